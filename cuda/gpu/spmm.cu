// CUDA SpMM kernels over CSR and SELL-C-sigma (plain CUDA, raw pointers; see kernels.h).

#include "kernels.h"

namespace gnnkit {
namespace gpu {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;

// One warp computes 32 consecutive features of one work item: a row, or a segment of at most
// kSegment entries of a long row (power-law hubs would otherwise keep one warp busy for the whole
// kernel). The warp loads 32 (column, value) pairs at a time, coalesced, into shared memory, then
// every lane walks them for its own feature: loads of x rows are coalesced across the warp.
// Segments of one row add into it atomically (the row was zeroed); a whole row is stored.
template <typename T>
__device__ void warp_segment(const int64_t* cols, const T* vals, int64_t first, int64_t n, int64_t stride,
                             int64_t row_len, bool split, const T* x, T* out_row, int64_t width, bool mean,
                             int64_t* s_col, T* s_val) {
  const int lane = threadIdx.x % kWarp;
  const int64_t f = static_cast<int64_t>(blockIdx.y) * kWarp + lane;
  T acc = T(0);
  for (int64_t base = 0; base < n; base += kWarp) {
    if (base + lane < n) {
      const int64_t slot = first + (base + lane) * stride;
      s_col[lane] = cols[slot];
      s_val[lane] = vals ? vals[slot] : T(1);
    }
    __syncwarp();
    const int64_t m = n - base < kWarp ? n - base : kWarp;
    if (f < width) {
      for (int64_t j = 0; j < m; ++j) acc += s_val[j] * x[s_col[j] * width + f];
    }
    __syncwarp();
  }
  if (f >= width) return;
  const T value = (mean && row_len > 0) ? acc / static_cast<T>(row_len) : acc;
  if (split) {
    atomicAdd(out_row + f, value);
  } else {
    out_row[f] = value;
  }
}

// Work item -> (row, segment). Item r < rows is the first (or only) segment of row r; the items
// after them are the further segments of split rows: extra_ptr[r] .. extra_ptr[r + 1] - 1 (past
// `rows`) are row r's, found by a binary search that only those few warps make; row -1 past them.
struct Item {
  int64_t row, begin, segments;
};

__device__ Item locate(const int64_t* extra_ptr, int64_t rows, int64_t item) {
  if (item < rows) return {item, 0, extra_ptr[item + 1] - extra_ptr[item] + 1};
  const int64_t e = item - rows;
  if (e >= extra_ptr[rows]) return {-1, 0, 0};  // the grid is an upper bound of the items
  int64_t lo = 0, hi = rows;  // the last r with extra_ptr[r] <= e
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (extra_ptr[mid] <= e) lo = mid; else hi = mid;
  }
  return {lo, (e - extra_ptr[lo] + 1) * kSegment, extra_ptr[lo + 1] - extra_ptr[lo] + 1};
}

template <typename T>
__global__ void spmm_csr_kernel(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out,
                                int64_t rows, const int64_t* extra_ptr, int64_t items, int64_t width, bool mean) {
  __shared__ int64_t s_col[kWarpsPerBlock][kWarp];
  __shared__ T s_val[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= items) return;  // the whole warp leaves together
  const Item it = locate(extra_ptr, rows, item);
  if (it.row < 0) return;
  const int64_t b = indptr[it.row], len = indptr[it.row + 1] - b;
  const int64_t n = it.segments == 1 ? len : (len - it.begin < kSegment ? len - it.begin : kSegment);
  warp_segment(indices, values, b + it.begin, n, 1, len, it.segments > 1, x, out + it.row * width, width, mean,
               s_col[warp], s_val[warp]);
}

template <typename T>
__global__ void spmm_sell_kernel(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len,
                                 const int64_t* cols, const T* vals, const T* x, T* out, int64_t rows, int64_t chunk,
                                 const int64_t* extra_ptr, int64_t items, int64_t width, bool mean) {
  __shared__ int64_t s_col[kWarpsPerBlock][kWarp];
  __shared__ T s_val[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= items) return;
  const Item it = locate(extra_ptr, rows, item);
  if (it.row < 0) return;
  const int64_t t = it.row, len = row_len[t];
  const int64_t n = it.segments == 1 ? len : (len - it.begin < kSegment ? len - it.begin : kSegment);
  const int64_t first = chunk_ptr[t / chunk] + t % chunk + it.begin * chunk;
  warp_segment(cols, vals, first, n, chunk, len, it.segments > 1, x, out + perm[t] * width, width, mean, s_col[warp],
               s_val[warp]);
}

// One thread per row: the number of further segments of row t (beyond its first) into
// extra_ptr[t + 1] (extra_ptr[0] = 0; an inclusive scan then makes extra_ptr), and a split row's
// output zeroed for the atomic adds. Row lengths come from indptr (CSR) or row_len (SELL, whose
// slot t is output row perm[t]).
template <typename T>
__global__ void plan_kernel(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows,
                            int64_t* extra_ptr, T* out, int64_t width) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t == 0) extra_ptr[0] = 0;
  if (t >= rows) return;
  const int64_t len = row_len ? row_len[t] : indptr[t + 1] - indptr[t];
  const int64_t segments = len > kSegment ? (len + kSegment - 1) / kSegment : 1;
  extra_ptr[t + 1] = segments - 1;
  if (segments > 1) {
    T* row = out + (perm ? perm[t] : t) * width;
    for (int64_t f = 0; f < width; ++f) row[f] = T(0);
  }
}

dim3 grid_for(int64_t items, int64_t width) {
  return dim3(static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock),
              static_cast<unsigned>((width + kWarp - 1) / kWarp));
}

}  // namespace

template <typename T>
void spmm_plan(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows, int64_t* extra_ptr,
               T* out, int64_t width, cudaStream_t stream) {
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((rows + threads) / threads);
  plan_kernel<T><<<blocks, threads, 0, stream>>>(indptr, row_len, perm, rows, extra_ptr, out, width);
}

template <typename T>
void spmm_csr(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out, int64_t rows,
              const int64_t* extra_ptr, int64_t items, int64_t width, bool mean, cudaStream_t stream) {
  if (items == 0 || width == 0) return;
  spmm_csr_kernel<T><<<grid_for(items, width), kWarpsPerBlock * kWarp, 0, stream>>>(
      indptr, indices, values, x, out, rows, extra_ptr, items, width, mean);
}

template <typename T>
void spmm_sell(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len, const int64_t* cols,
               const T* vals, const T* x, T* out, int64_t rows, int64_t chunk, const int64_t* extra_ptr, int64_t items,
               int64_t width, bool mean, cudaStream_t stream) {
  if (items == 0 || width == 0) return;
  spmm_sell_kernel<T><<<grid_for(items, width), kWarpsPerBlock * kWarp, 0, stream>>>(
      chunk_ptr, perm, row_len, cols, vals, x, out, rows, chunk, extra_ptr, items, width, mean);
}

template void spmm_plan<float>(const int64_t*, const int64_t*, const int64_t*, int64_t, int64_t*, float*, int64_t,
                               cudaStream_t);
template void spmm_plan<double>(const int64_t*, const int64_t*, const int64_t*, int64_t, int64_t*, double*, int64_t,
                                cudaStream_t);
template void spmm_csr<float>(const int64_t*, const int64_t*, const float*, const float*, float*, int64_t,
                              const int64_t*, int64_t, int64_t, bool, cudaStream_t);
template void spmm_csr<double>(const int64_t*, const int64_t*, const double*, const double*, double*, int64_t,
                               const int64_t*, int64_t, int64_t, bool, cudaStream_t);
template void spmm_sell<float>(const int64_t*, const int64_t*, const int64_t*, const int64_t*, const float*,
                               const float*, float*, int64_t, int64_t, const int64_t*, int64_t, int64_t, bool,
                               cudaStream_t);
template void spmm_sell<double>(const int64_t*, const int64_t*, const int64_t*, const int64_t*, const double*,
                                const double*, double*, int64_t, int64_t, const int64_t*, int64_t, int64_t, bool,
                                cudaStream_t);

}  // namespace gpu
}  // namespace gnnkit
