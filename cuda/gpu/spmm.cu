// CUDA SpMM kernels over CSR and SELL-C-sigma (plain CUDA, raw pointers; see kernels.h).

#include "kernels.h"

namespace gnnkit {
namespace gpu {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;

// One warp computes 32 consecutive features of one output row. The warp loads 32 (column,
// value) pairs at a time, coalesced, into shared memory, then every lane walks them for its own
// feature: loads of x rows are coalesced across the warp.
template <typename T>
__device__ void warp_row(const int64_t* cols, const T* vals, int64_t first, int64_t n, int64_t stride, const T* x,
                         T* out_row, int64_t width, bool mean, int64_t* s_col, T* s_val) {
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
  if (f < width) out_row[f] = (mean && n > 0) ? acc / static_cast<T>(n) : acc;
}

template <typename T>
__global__ void spmm_csr_kernel(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out,
                                int64_t rows, int64_t width, bool mean) {
  __shared__ int64_t s_col[kWarpsPerBlock][kWarp];
  __shared__ T s_val[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= rows) return;  // the whole warp leaves together
  const int64_t b = indptr[row];
  warp_row(indices, values, b, indptr[row + 1] - b, 1, x, out + row * width, width, mean, s_col[warp], s_val[warp]);
}

template <typename T>
__global__ void spmm_sell_kernel(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len,
                                 const int64_t* cols, const T* vals, const T* x, T* out, int64_t rows, int64_t chunk,
                                 int64_t width, bool mean) {
  __shared__ int64_t s_col[kWarpsPerBlock][kWarp];
  __shared__ T s_val[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (t >= rows) return;
  const int64_t first = chunk_ptr[t / chunk] + t % chunk;
  warp_row(cols, vals, first, row_len[t], chunk, x, out + perm[t] * width, width, mean, s_col[warp], s_val[warp]);
}

dim3 grid_for(int64_t rows, int64_t width) {
  return dim3(static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock),
              static_cast<unsigned>((width + kWarp - 1) / kWarp));
}

}  // namespace

template <typename T>
void spmm_csr(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out, int64_t rows,
              int64_t width, bool mean, cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  spmm_csr_kernel<T><<<grid_for(rows, width), kWarpsPerBlock * kWarp, 0, stream>>>(indptr, indices, values, x, out,
                                                                                  rows, width, mean);
}

template <typename T>
void spmm_sell(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len, const int64_t* cols,
               const T* vals, const T* x, T* out, int64_t rows, int64_t chunk, int64_t width, bool mean,
               cudaStream_t stream) {
  if (rows == 0 || width == 0) return;
  spmm_sell_kernel<T><<<grid_for(rows, width), kWarpsPerBlock * kWarp, 0, stream>>>(
      chunk_ptr, perm, row_len, cols, vals, x, out, rows, chunk, width, mean);
}

template void spmm_csr<float>(const int64_t*, const int64_t*, const float*, const float*, float*, int64_t, int64_t,
                              bool, cudaStream_t);
template void spmm_csr<double>(const int64_t*, const int64_t*, const double*, const double*, double*, int64_t,
                               int64_t, bool, cudaStream_t);
template void spmm_sell<float>(const int64_t*, const int64_t*, const int64_t*, const int64_t*, const float*,
                               const float*, float*, int64_t, int64_t, int64_t, bool, cudaStream_t);
template void spmm_sell<double>(const int64_t*, const int64_t*, const int64_t*, const int64_t*, const double*,
                                const double*, double*, int64_t, int64_t, int64_t, bool, cudaStream_t);

}  // namespace gpu
}  // namespace gnnkit
