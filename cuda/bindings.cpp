// The one Python binding of gnnkit's native kernels. Each op checks the device of its inputs and
// runs the CPU kernel (cuda/cpu) or, in builds with GNNKIT_WITH_CUDA, the CUDA one (cuda/gpu).

#include <torch/csrc/utils/pybind.h>  // pybind11 and torch's casters, without torch/extension.h's whole C++ API
#include <torch/csrc/Exceptions.h>     // torch::wrap_pybind_function_no_gil: torch's error and warning handling

#include "cpu/ops.h"

#ifdef GNNKIT_WITH_CUDA
#include "gpu/dispatch.h"
#define GNNKIT_DEVICE_SWITCH(tensor, cpu_call, cuda_call) \
  return (tensor).is_cuda() ? (cuda_call) : (cpu_call)
#else
#define GNNKIT_DEVICE_SWITCH(tensor, cpu_call, cuda_call)                                   \
  TORCH_CHECK(!(tensor).is_cuda(), "gnnkit native: this build has no CUDA kernels"); \
  return (cpu_call)
#endif

namespace gnnkit {

at::Tensor spmm_csr(const at::Tensor& indptr, const at::Tensor& indices, const std::optional<at::Tensor>& values,
                    const at::Tensor& x, bool mean) {
  GNNKIT_DEVICE_SWITCH(x, spmm_csr_cpu(indptr, indices, values, x, mean),
                       spmm_csr_cuda(indptr, indices, values, x, mean));
}

std::vector<at::Tensor> sell_from_csr(const at::Tensor& indptr, const at::Tensor& indices,
                                      const std::optional<at::Tensor>& values, int64_t chunk, int64_t sigma,
                                      at::ScalarType dtype) {
  // Built on the CPU (a one-off conversion); the caller moves the result to the device.
  return sell_from_csr_cpu(indptr.cpu(), indices.cpu(), values ? std::optional<at::Tensor>(values->cpu()) : values,
                           chunk, sigma, dtype);
}

at::Tensor spmm_sell(const at::Tensor& chunk_ptr, const at::Tensor& perm, const at::Tensor& row_len,
                     const at::Tensor& cols, const at::Tensor& vals, const at::Tensor& x, int64_t chunk, bool mean) {
  GNNKIT_DEVICE_SWITCH(x, spmm_sell_cpu(chunk_ptr, perm, row_len, cols, vals, x, chunk, mean),
                       spmm_sell_cuda(chunk_ptr, perm, row_len, cols, vals, x, chunk, mean));
}

// GINE's message sum: CPU only (on the GPU gnnkit keeps the spmm path: gather, ReLU, CSR SpMM).
at::Tensor gine_sum(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& x, const at::Tensor& emb) {
  return gine_sum_cpu(indptr, src, x, emb);
}

at::Tensor gine_sum_coded(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& x,
                          const at::Tensor& table, const at::Tensor& codes) {
  return gine_sum_coded_cpu(indptr, src, x, table, codes);
}

std::vector<at::Tensor> gine_sum_backward(const at::Tensor& csc_indptr, const at::Tensor& csc_slots,
                                          const at::Tensor& csc_rows, const at::Tensor& x, const at::Tensor& emb,
                                          const at::Tensor& grad, bool need_x, bool need_emb) {
  return gine_sum_backward_cpu(csc_indptr, csc_slots, csc_rows, x, emb, grad, need_x, need_emb);
}

std::vector<at::Tensor> gine_sum_coded_backward(const at::Tensor& csc_indptr, const at::Tensor& csc_slots,
                                                const at::Tensor& csc_rows, const at::Tensor& x,
                                                const at::Tensor& table, const at::Tensor& codes,
                                                const at::Tensor& grad, bool need_x, bool need_table) {
  return gine_sum_coded_backward_cpu(csc_indptr, csc_slots, csc_rows, x, table, codes, grad, need_x, need_table);
}

std::vector<at::Tensor> sample_neighbors(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                                         const std::vector<int64_t>& fanouts, bool replace, int64_t seed,
                                         at::Tensor local) {
  GNNKIT_DEVICE_SWITCH(indptr, sample_neighbors_cpu(indptr, indices, seeds, fanouts, replace, seed, local),
                       sample_neighbors_cuda(indptr, indices, seeds, fanouts, replace, seed, local));
}

std::vector<at::Tensor> sample_rows(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& rows,
                                    int64_t k, bool replace, int64_t seed, const std::optional<at::Tensor>& edge_base) {
  // CPU only: the partitioned sampler answers other ranks over gloo, on the CPU.
  return sample_rows_cpu(indptr, indices, rows, k, replace, seed, edge_base);
}

std::vector<at::Tensor> relabel(const at::Tensor& src, at::Tensor local, int64_t next_id) {
  return relabel_cpu(src, local, next_id);
}

std::vector<at::Tensor> tt_forward(const at::Tensor& rows, const at::Tensor& c0, const at::Tensor& c1,
                                   const at::Tensor& c2, bool reuse_prefixes) {
  GNNKIT_DEVICE_SWITCH(c0, tt_forward_cpu(rows, c0, c1, c2, reuse_prefixes),
                       tt_forward_cuda(rows, c0, c1, c2, reuse_prefixes));
}

std::vector<at::Tensor> tt_backward(const at::Tensor& grad, const at::Tensor& c0, const at::Tensor& c1,
                                    const at::Tensor& c2, const at::Tensor& perm, const at::Tensor& seg,
                                    const at::Tensor& uniq, const at::Tensor& group, const at::Tensor& level) {
  GNNKIT_DEVICE_SWITCH(c0, tt_backward_cpu(grad, c0, c1, c2, perm, seg, uniq, group, level),
                       tt_backward_cuda(grad, c0, c1, c2, perm, seg, uniq, group, level));
}

std::vector<at::Tensor> select_magnitude(const at::Tensor& x, double threshold) {
  // CPU only: gnnkit.comm.sparse keeps GPU tensors on its PyTorch path.
  return select_magnitude_cpu(x, threshold);
}

at::Tensor dropout(const at::Tensor& x, double p, int64_t seed) {
  // CPU only: torch's CUDA dropout is already a fused Philox kernel.
  return dropout_cpu(x, p, seed);
}

std::vector<std::string> kernels() {
  std::vector<std::string> names{"spmm_csr",    "spmm_sell",  "gine_sum",         "sample_neighbors", "sample_rows",
                                 "relabel",     "tt_lookup",  "select_magnitude", "dropout"};
#ifdef GNNKIT_WITH_CUDA
  for (const char* n : {"spmm_csr_cuda", "spmm_sell_cuda", "sample_neighbors_cuda", "tt_lookup_cuda"}) names.push_back(n);
#endif
  return names;
}

}  // namespace gnnkit

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  // Each kernel is bound as torch binds its own functions (torch::wrap_pybind_function_no_gil). The
  // interpreter lock is let go while it runs (it takes tensors and numbers only), so a thread
  // preparing the next batch (gnnkit.data.prefetch) and the training loop overlap. A C++ warning it
  // raises, such as torch's sync debug mode on a size read-back, reaches Python's warnings in the
  // calling thread when it returns, as torch's operators' do (gnnkit.step_profile counts them),
  // instead of going to stderr.
#define GNNKIT_KERNEL(name, doc) m.def(#name, torch::wrap_pybind_function_no_gil(&gnnkit::name), doc)
  m.doc() = "gnnkit native kernels (CPU: ATen parallel_for; CUDA when built with it)";
  GNNKIT_KERNEL(spmm_csr, "CSR SpMM (sum or mean)");
  GNNKIT_KERNEL(sell_from_csr, "SELL-C-sigma conversion of a CSR matrix");
  GNNKIT_KERNEL(spmm_sell, "SELL-C-sigma SpMM (sum or mean)");
  GNNKIT_KERNEL(gine_sum, "GINE's message sum: per CSR row, sum of relu(x[src] + emb)");
  GNNKIT_KERNEL(gine_sum_coded, "gine_sum with edge rows looked up in a table");
  GNNKIT_KERNEL(gine_sum_backward, "gradients of gine_sum, walking the entries by source");
  GNNKIT_KERNEL(gine_sum_coded_backward, "gradients of gine_sum_coded");
  GNNKIT_KERNEL(sample_neighbors, "uniform multi-hop neighbour sampling");
  GNNKIT_KERNEL(sample_rows, "one hop of uniform neighbour sampling over given rows");
  GNNKIT_KERNEL(relabel, "local ids of sampled nodes, new ones in order of first occurrence");
  GNNKIT_KERNEL(tt_forward, "fused 3-core TT lookup (prefix reuse, or one row a group)");
  GNNKIT_KERNEL(tt_backward, "gradients of the fused TT lookup");
  GNNKIT_KERNEL(select_magnitude, "elements with |x| >= threshold, with their indices");
  GNNKIT_KERNEL(dropout, "inverted dropout with a counter-based mask (same seed, same mask)");
  m.def("kernels", &gnnkit::kernels, "names of the kernels in this build");
#undef GNNKIT_KERNEL
}
