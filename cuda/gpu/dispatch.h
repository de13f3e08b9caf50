// Torch-tensor entry points of the CUDA kernels (gpu/dispatch.cpp; built only with a CUDA torch).
#pragma once

#include <ATen/core/Tensor.h>  // not ATen.h: every op's header costs seconds a file

#include <optional>
#include <vector>

namespace gnnkit {

at::Tensor spmm_csr_cuda(const at::Tensor& indptr, const at::Tensor& indices, const std::optional<at::Tensor>& values,
                         const at::Tensor& x, bool mean);

at::Tensor spmm_sell_cuda(const at::Tensor& chunk_ptr, const at::Tensor& perm, const at::Tensor& row_len,
                          const at::Tensor& cols, const at::Tensor& vals, const at::Tensor& x, int64_t chunk, bool mean);

std::vector<at::Tensor> sample_neighbors_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                              const at::Tensor& seeds, const std::vector<int64_t>& fanouts,
                                              bool replace, int64_t seed, at::Tensor local);

std::vector<at::Tensor> tt_forward_cuda(const at::Tensor& rows, const at::Tensor& c0, const at::Tensor& c1,
                                        const at::Tensor& c2, bool reuse_prefixes);

std::vector<at::Tensor> tt_backward_cuda(const at::Tensor& grad, const at::Tensor& c0, const at::Tensor& c1,
                                         const at::Tensor& c2, const at::Tensor& perm, const at::Tensor& seg,
                                         const at::Tensor& uniq, const at::Tensor& group, const at::Tensor& level);

}  // namespace gnnkit
