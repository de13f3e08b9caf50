// Launchers of gnnkit's CUDA kernels: raw device pointers in, no torch headers, so every .cu file
// compiles standalone with nvcc (CI compiles them for sm_80 and sm_90 without a GPU). The torch
// glue that calls them is gpu/dispatch.cpp, built only with a CUDA torch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

namespace gnnkit {
namespace gpu {

// Rows longer than `segment` entries are split into segments of that length, each its own work
// item, so that a power-law hub does not keep one warp busy while the rest of the GPU idles:
// kSegment by default. Segments of a row add into it atomically, in varying order; with kUnsplit
// no row is split and every sum runs in the same order each time (torch's deterministic mode).
constexpr int64_t kSegment = 256;
constexpr int64_t kUnsplit = INT64_MAX;

// An upper bound of the work items of a product (every row, and a further item a segment of nnz),
// known without a host sync.
inline int64_t spmm_items_bound(int64_t rows, int64_t nnz, int64_t segment) {
  return rows + nnz / segment + (nnz % segment != 0);
}

// The work plan of spmm_csr / spmm_sell: per row, its segments of `segment` entries beyond the first into
// extra_ptr[1 .. rows] (extra_ptr[0] = 0), with the output rows of split rows zeroed; row lengths
// from indptr (CSR) or row_len (SELL slots, output row perm[t]). The counts still need an
// inclusive scan (extra_ptr[1:]) before the product runs.
template <typename T>
void spmm_plan(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows, int64_t segment,
               int64_t* extra_ptr, T* out, int64_t width, cudaStream_t stream);

// out[r] = sum_e w_e x[col_e] (/ row count when mean); one warp per work item and 32 x V features
// (V = 1, 2, 4 or 8 per lane in one access of at most 16 bytes, as the width and alignment allow),
// column indices staged through shared memory (GE-SpMM's coalesced row caching,
// https://arxiv.org/abs/2007.03179). T: float, double, __half or __nv_bfloat16 (16-bit values
// summed in float, rounded once). Work items: one per row (its first `segment` entries), then
// the further segments of rows longer than `segment` (extra_ptr, from spmm_plan with the same
// segment). `items` may exceed their number (spmm_items_bound, so no host sync is needed). Any
// width: the grid covers at most kMaxGridY tiles of 32 x V features and loops over the rest.
// Segments of a split row add into it atomically (float sums in varying order); for 16-bit T they
// add into `split_sums` instead (required for them when rows are split), a float buffer of
// split_rows_bound(nnz, segment) x width whose used rows the launcher zeroes on the device, and
// each split row is rounded from there once (nullptr: atomics into `out`, for float and double).
template <typename T>
void spmm_csr(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out, float* split_sums,
              int64_t rows, const int64_t* extra_ptr, int64_t segment, int64_t items, int64_t width, bool mean,
              cudaStream_t stream);

// The same over SELL-C-sigma (https://arxiv.org/abs/1307.6209): row slot t of chunk t / C, items
// over the slots' lengths row_len.
template <typename T>
void spmm_sell(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len, const int64_t* cols,
               const T* vals, const T* x, T* out, float* split_sums, int64_t rows, int64_t chunk,
               const int64_t* extra_ptr, int64_t segment, int64_t items, int64_t width, bool mean,
               cudaStream_t stream);

// Rows of the `split_sums` buffer: at least the further segments of all split rows, which number
// fewer than nnz / segment.
inline int64_t split_rows_bound(int64_t nnz, int64_t segment) { return nnz / segment + 1; }

// The most feature tiles the SpMM grid spans (its y dimension, at most 65535 on every GPU); a
// build may lower it to exercise the loop over further tiles.
#ifndef GNNKIT_MAX_GRID_Y
#define GNNKIT_MAX_GRID_Y 65535
#endif
constexpr int64_t kMaxGridY = GNNKIT_MAX_GRID_Y;

// One hop of uniform sampling: frontier node i writes count[i] edge positions at offset[i].
void sample_hop(const int64_t* indptr, const int64_t* frontier, const int64_t* offset, const int64_t* count,
                int64_t frontier_size, int64_t k, bool replace, uint64_t seed, uint64_t hop, int64_t* edges,
                cudaStream_t stream);

struct TTShape {
  int64_t p1, p2, p3, q1, q2, q3, r1, r2;
};

// Dynamic shared memory of a TT block in bytes: the prefix's [q1, q2 r2] product, and in the
// backward pass also its [q1 q2, q3] gradient. Above kDefaultSharedBytes a launch opts in (up to
// the device's cudaDevAttrMaxSharedMemoryPerBlockOptin, which the caller checks).
inline size_t tt_shared_bytes(const TTShape& s, size_t element, bool backward) {
  return element * static_cast<size_t>(s.q1 * s.q2 * (s.r2 + (backward ? s.q3 : 0)));
}
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// Fused 3-core TT lookup: one block per digit prefix (i1, i2); see cpu/tt.cpp for the layout.
template <typename T>
void tt_forward(const T* g0, const T* g1, const T* g2, const int64_t* perm, const int64_t* seg,
                const int64_t* uniq, const int64_t* group, int64_t num_prefixes, TTShape shape, T* level, T* out,
                cudaStream_t stream);

// Its gradients (atomics into the core gradients; they must be zeroed by the caller).
template <typename T>
void tt_backward(const T* grad, const T* g0, const T* g1, const T* g2, const int64_t* perm, const int64_t* seg,
                 const int64_t* uniq, const int64_t* group, int64_t num_prefixes, TTShape shape, const T* level,
                 T* d0, T* d1, T* d2, cudaStream_t stream);

}  // namespace gpu
}  // namespace gnnkit
