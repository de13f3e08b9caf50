// Declarations of gnnkit's CPU kernels (ATen tensors in and out; see cuda/bindings.cpp).
#pragma once

#include <ATen/core/Tensor.h>  // not ATen.h: every op's header costs seconds a file

#include <cstdint>
#include <optional>
#include <tuple>
#include <vector>

namespace gnnkit {

// Row ranges [bounds[c], bounds[c+1]) of `chunks` chunks with about equal work, where row i
// costs (indptr[i+1] - indptr[i]) + 1: a binary search on the monotone indptr[i] + i.
std::vector<int64_t> balanced_row_bounds(const int64_t* indptr, int64_t num_rows, int64_t chunks);

// CSR SpMM (GE-SpMM style row split, https://arxiv.org/abs/2007.03179): out[i] = sum_e w_e x[col_e],
// divided by the row's entry count when `mean`.
at::Tensor spmm_csr_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                        const std::optional<at::Tensor>& values, const at::Tensor& x, bool mean);

// SELL-C-sigma (https://arxiv.org/abs/1307.6209) conversion of a CSR matrix:
// (chunk_ptr [S+1], perm [R], row_len [R], cols [slots], vals [slots]).
std::vector<at::Tensor> sell_from_csr_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                          const std::optional<at::Tensor>& values, int64_t chunk,
                                          int64_t sigma, at::ScalarType dtype);

at::Tensor spmm_sell_cpu(const at::Tensor& chunk_ptr, const at::Tensor& perm, const at::Tensor& row_len,
                         const at::Tensor& cols, const at::Tensor& vals, const at::Tensor& x,
                         int64_t chunk, bool mean);

// GINE's message sum (https://arxiv.org/abs/1905.12265), fused: out[i] = sum over the entries e of CSR row i
// of relu(x[src_e] + emb_e); emb holds one row per entry, in CSR order.
at::Tensor gine_sum_cpu(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& x, const at::Tensor& emb);

// The same with coded edge rows, emb_e = table[codes[e]] (codes [E]).
at::Tensor gine_sum_coded_cpu(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& x,
                              const at::Tensor& table, const at::Tensor& codes);

// Their gradients ((grad_x, grad_emb) or (grad_x, grad_table); undefined where not needed), walking the
// entries grouped by source: the transpose's row pointer csc_indptr [N_src + 1] and, per position, the
// entry's CSR slot and destination row.
std::vector<at::Tensor> gine_sum_backward_cpu(const at::Tensor& csc_indptr, const at::Tensor& csc_slots,
                                              const at::Tensor& csc_rows, const at::Tensor& x, const at::Tensor& emb,
                                              const at::Tensor& grad, bool need_x, bool need_emb);

std::vector<at::Tensor> gine_sum_coded_backward_cpu(const at::Tensor& csc_indptr, const at::Tensor& csc_slots,
                                                    const at::Tensor& csc_rows, const at::Tensor& x,
                                                    const at::Tensor& table, const at::Tensor& codes,
                                                    const at::Tensor& grad, bool need_x, bool need_table);

// Multi-hop uniform neighbour sampling: (node, row, col, edge, num_sampled_nodes, num_sampled_edges).
std::vector<at::Tensor> sample_neighbors_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                             const at::Tensor& seeds, const std::vector<int64_t>& fanouts,
                                             bool replace, int64_t seed, at::Tensor local);

// One hop over the given rows (the partitioned sampler's): (src, edge, count), edges grouped by row;
// edge is a position in indices, or edge_base[row] + its offset in the row when edge_base is given.
std::vector<at::Tensor> sample_rows_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& rows,
                                        int64_t k, bool replace, int64_t seed,
                                        const std::optional<at::Tensor>& edge_base);

// Local ids of src under the scratch map local (new nodes numbered from next_id in order of first
// occurrence, and recorded in local): (src_local, new nodes).
std::vector<at::Tensor> relabel_cpu(const at::Tensor& src, at::Tensor local, int64_t next_id);

// Fused three-core TT lookup with prefix reuse (TT-Rec / FBTT, https://arxiv.org/abs/2101.11714).
// Returns (out [B, D], perm [B], seg [U+1], uniq [U], group [M+1], level [M, q1 q2 r2]).
std::vector<at::Tensor> tt_forward_cpu(const at::Tensor& rows, const at::Tensor& c0, const at::Tensor& c1,
                                       const at::Tensor& c2, bool reuse_prefixes);

std::vector<at::Tensor> tt_backward_cpu(const at::Tensor& grad, const at::Tensor& c0, const at::Tensor& c1,
                                        const at::Tensor& c2, const at::Tensor& perm, const at::Tensor& seg,
                                        const at::Tensor& uniq, const at::Tensor& group,
                                        const at::Tensor& level);

// Elements of 1-D float32 x with |x| >= threshold: (indices int64 [m], values [m]), in index order.
std::vector<at::Tensor> select_magnitude_cpu(const at::Tensor& x, double threshold);

// Inverted dropout of float32 x: element i kept (times 1 / (1 - p)) when the i-th 32-bit draw of the
// counter-based stream under `seed` is >= p 2^32. The same seed gives the same mask (the backward pass).
at::Tensor dropout_cpu(const at::Tensor& x, double p, int64_t seed);

}  // namespace gnnkit
