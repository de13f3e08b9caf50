// CUDA SpMM kernels over CSR and SELL-C-sigma (plain CUDA, raw pointers; see kernels.h).

#include "kernels.h"

namespace gnnkit {
namespace gpu {

namespace {

constexpr int kWarp = 32;
constexpr int kWarpsPerBlock = 8;
// Staged columns whose x rows a lane loads before it adds any of them: independent loads in flight,
// so a long row (a 256-entry segment of a hub) waits for memory about once per kUnroll entries
// instead of once per entry, which shortens the longest warps that end the kernel.
constexpr int kUnroll = 4;

// Products and sums run in Num<T>::Acc: float for the 16-bit types (their values converted on
// load, the result rounded once on store), T itself otherwise. Explicit intrinsics, since torch
// builds CUDA code with the 16-bit types' implicit conversions turned off.
template <typename T>
struct Num {
  using Acc = T;
  static __device__ __forceinline__ Acc widen(T v) { return v; }
  static __device__ __forceinline__ T narrow(Acc v) { return v; }
};
template <>
struct Num<__half> {
  using Acc = float;
  static __device__ __forceinline__ float widen(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half narrow(float v) { return __float2half(v); }
};
template <>
struct Num<__nv_bfloat16> {
  using Acc = float;
  static __device__ __forceinline__ float widen(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 narrow(float v) { return __float2bfloat16(v); }
};

// V consecutive features moved as one aligned access (16 bytes at most: one LDG.128/STG.128).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

// The V features from f of x's row col, in one aligned access.
template <typename T, int V>
__device__ __forceinline__ Pack<T, V> load(const T* x, int64_t col, int64_t width, int64_t f) {
  return *reinterpret_cast<const Pack<T, V>*>(x + col * width + f);
}

// acc += w * p, the V features of one staged column, in Acc.
template <typename T, int V>
__device__ __forceinline__ void accumulate(typename Num<T>::Acc* acc, typename Num<T>::Acc w, const Pack<T, V>& p) {
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] += w * Num<T>::widen(p.v[v]);
}

// One warp computes the 32 x V consecutive features of feature tile `tile` of one work item: a row,
// or a segment of at most `segment` entries of a long row (power-law hubs would otherwise keep one
// warp busy for the whole kernel). The warp loads 32 (column, value) pairs at a time, coalesced,
// into shared memory, then every lane walks them for its own V features: the x row loads of the
// warp are coalesced and vectorised, and a row's columns are staged once for up to 32 x V features
// (GE-SpMM's coalesced row caching with its feature coarsening, https://arxiv.org/abs/2007.03179).
// Segments of one row add into it atomically (the row was zeroed); a whole row is stored. With
// `split_row` (16-bit values) the segments add into that float row instead, rounded once by
// finish_split_kernel.
template <typename T, int V>
__device__ void warp_segment(const int64_t* cols, const T* vals, int64_t first, int64_t n, int64_t stride,
                             int64_t row_len, bool split, const T* x, T* out_row, float* split_row, int64_t width,
                             int64_t tile, bool mean, int64_t* s_col, typename Num<T>::Acc* s_val) {
  using Acc = typename Num<T>::Acc;
  const int lane = threadIdx.x % kWarp;
  const int64_t f = (tile * kWarp + lane) * V;  // the lane's first feature
  Acc acc[V];
#pragma unroll
  for (int v = 0; v < V; ++v) acc[v] = Acc(0);
  for (int64_t base = 0; base < n; base += kWarp) {
    if (base + lane < n) {
      const int64_t slot = first + (base + lane) * stride;
      s_col[lane] = cols[slot];
      s_val[lane] = vals ? Num<T>::widen(vals[slot]) : Acc(1);
    }
    __syncwarp();
    const int64_t m = n - base < kWarp ? n - base : kWarp;
    if (f < width) {
      int64_t j = 0;
      for (; j + kUnroll <= m; j += kUnroll) {  // the loads first, then the sums in entry order
        Pack<T, V> p[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) p[u] = load<T, V>(x, s_col[j + u], width, f);
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) accumulate<T, V>(acc, s_val[j + u], p[u]);
      }
      for (; j < m; ++j) accumulate<T, V>(acc, s_val[j], load<T, V>(x, s_col[j], width, f));
    }
    __syncwarp();
  }
  if (f >= width) return;
  const Acc scale = (mean && row_len > 0) ? Acc(1) / static_cast<Acc>(row_len) : Acc(1);
  if (split) {
    if constexpr (std::is_same_v<Acc, T>) {  // float, double: into the zeroed row itself
      if (split_row == nullptr) {
#pragma unroll
        for (int v = 0; v < V; ++v) atomicAdd(out_row + f + v, acc[v] * scale);
        return;
      }
    }
#pragma unroll
    for (int v = 0; v < V; ++v) atomicAdd(split_row + f + v, static_cast<float>(acc[v] * scale));
  } else {
    Pack<T, V> p;
#pragma unroll
    for (int v = 0; v < V; ++v) p.v[v] = Num<T>::narrow(acc[v] * scale);
    *reinterpret_cast<Pack<T, V>*>(out_row + f) = p;
  }
}

// Work item -> (row, segment). Item r < rows is the first (or only) segment of row r; the items
// after them are the further segments of split rows: extra_ptr[r] .. extra_ptr[r + 1] - 1 (past
// `rows`) are row r's, found by a binary search that only those few warps make; row -1 past them.
struct Item {
  int64_t row, begin, segments;
};

__device__ Item locate(const int64_t* extra_ptr, int64_t rows, int64_t segment, int64_t item) {
  if (item < rows) return {item, 0, extra_ptr[item + 1] - extra_ptr[item] + 1};
  const int64_t e = item - rows;
  if (e >= extra_ptr[rows]) return {-1, 0, 0};  // the grid is an upper bound of the items
  int64_t lo = 0, hi = rows;  // the last r with extra_ptr[r] <= e
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (extra_ptr[mid] <= e) lo = mid; else hi = mid;
  }
  return {lo, (e - extra_ptr[lo] + 1) * segment, extra_ptr[lo + 1] - extra_ptr[lo] + 1};
}

// The float row of split row r in `split_sums`: slot extra_ptr[r], the index of its first further
// segment (unique per split row, below the number of further segments).
__device__ __forceinline__ float* split_row_of(float* split_sums, const int64_t* extra_ptr, int64_t row,
                                               int64_t width) {
  return split_sums == nullptr ? nullptr : split_sums + extra_ptr[row] * width;
}

template <typename T, int V>
__global__ void spmm_csr_kernel(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out,
                                float* split_sums, int64_t rows, const int64_t* extra_ptr, int64_t segment,
                                int64_t items, int64_t width, bool mean) {
  __shared__ int64_t s_col[kWarpsPerBlock][kWarp];
  __shared__ typename Num<T>::Acc s_val[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= items) return;  // the whole warp leaves together
  const Item it = locate(extra_ptr, rows, segment, item);
  if (it.row < 0) return;
  const int64_t b = indptr[it.row], len = indptr[it.row + 1] - b;
  const int64_t n = it.segments == 1 ? len : (len - it.begin < segment ? len - it.begin : segment);
  for (int64_t tile = blockIdx.y; tile * kWarp * V < width; tile += gridDim.y) {  // the same count for the whole warp
    warp_segment<T, V>(indices, values, b + it.begin, n, 1, len, it.segments > 1, x, out + it.row * width,
                       split_row_of(split_sums, extra_ptr, it.row, width), width, tile, mean, s_col[warp],
                       s_val[warp]);
  }
}

template <typename T, int V>
__global__ void spmm_sell_kernel(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len,
                                 const int64_t* cols, const T* vals, const T* x, T* out, float* split_sums,
                                 int64_t rows, int64_t chunk, const int64_t* extra_ptr, int64_t segment, int64_t items,
                                 int64_t width, bool mean) {
  __shared__ int64_t s_col[kWarpsPerBlock][kWarp];
  __shared__ typename Num<T>::Acc s_val[kWarpsPerBlock][kWarp];
  const int warp = threadIdx.x / kWarp;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (item >= items) return;
  const Item it = locate(extra_ptr, rows, segment, item);
  if (it.row < 0) return;
  const int64_t t = it.row, len = row_len[t];
  const int64_t n = it.segments == 1 ? len : (len - it.begin < segment ? len - it.begin : segment);
  const int64_t first = chunk_ptr[t / chunk] + t % chunk + it.begin * chunk;
  for (int64_t tile = blockIdx.y; tile * kWarp * V < width; tile += gridDim.y) {
    warp_segment<T, V>(cols, vals, first, n, chunk, len, it.segments > 1, x, out + perm[t] * width,
                       split_row_of(split_sums, extra_ptr, t, width), width, tile, mean, s_col[warp], s_val[warp]);
  }
}

// Zeroes the float rows that split rows add into: extra_ptr[rows] of them, a count only the device
// holds (the buffer itself is an upper bound), so no host sync and no clearing of the whole bound.
__global__ void zero_split_kernel(const int64_t* extra_ptr, int64_t rows, float* split_sums, int64_t width) {
  const int64_t n = extra_ptr[rows] * width;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    split_sums[i] = 0.0f;
  }
}

// One thread per row: a split row's float sum (split_sums) rounded into its output row.
template <typename T>
__global__ void finish_split_kernel(const int64_t* extra_ptr, const int64_t* perm, int64_t rows,
                                    const float* split_sums, T* out, int64_t width) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows || extra_ptr[t + 1] == extra_ptr[t]) return;
  const float* sum = split_sums + extra_ptr[t] * width;
  T* row = out + (perm ? perm[t] : t) * width;
  for (int64_t f = 0; f < width; ++f) row[f] = Num<T>::narrow(static_cast<typename Num<T>::Acc>(sum[f]));
}

// One thread per row: the number of further segments of row t (beyond its first) into
// extra_ptr[t + 1] (extra_ptr[0] = 0; an inclusive scan then makes extra_ptr), and a split row's
// output zeroed for the atomic adds. Row lengths come from indptr (CSR) or row_len (SELL, whose
// slot t is output row perm[t]).
template <typename T>
__global__ void plan_kernel(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows,
                            int64_t segment, int64_t* extra_ptr, T* out, int64_t width) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t == 0) extra_ptr[0] = 0;
  if (t >= rows) return;
  const int64_t len = row_len ? row_len[t] : indptr[t + 1] - indptr[t];
  const int64_t segments = len > segment ? (len - 1) / segment + 1 : 1;
  extra_ptr[t + 1] = segments - 1;
  if (segments > 1) {
    T* row = out + (perm ? perm[t] : t) * width;
    for (int64_t f = 0; f < width; ++f) row[f] = Num<T>::narrow(typename Num<T>::Acc(0));
  }
}

// Blocks of kWarpsPerBlock work items by feature tiles of 32 x V (at most kMaxGridY of them: the
// kernels loop over further tiles).
dim3 grid_for(int64_t items, int64_t width, int vector) {
  const int64_t tiles = (width + kWarp * vector - 1) / (kWarp * vector);
  return dim3(static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock),
              static_cast<unsigned>(tiles < kMaxGridY ? tiles : kMaxGridY));
}

// Features per lane: the widest access of at most 16 bytes that divides the width, that both x and
// out are aligned for, and that still gives every lane of a warp features to compute (a width
// below 32 x V would leave lanes idle that a narrower access keeps busy).
template <typename T>
int vector_width(const T* x, const T* out, int64_t width) {
  int v = static_cast<int>(16 / sizeof(T));
  const auto aligned = [&](const void* p) { return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * v) == 0; };
  while (v > 1 && (width % v != 0 || width < kWarp * v || !aligned(x) || !aligned(out))) v /= 2;
  return v;
}

// Calls launch(std::integral_constant<int, V>{}) for the run-time vector width V (a power of two <= 8).
template <typename Launch>
void with_vector(int v, Launch launch) {
  switch (v) {
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 2: launch(std::integral_constant<int, 2>{}); break;
    default: launch(std::integral_constant<int, 1>{}); break;
  }
}

}  // namespace

template <typename T>
void spmm_plan(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows, int64_t segment,
               int64_t* extra_ptr, T* out, int64_t width, cudaStream_t stream) {
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((rows + threads) / threads);
  plan_kernel<T><<<blocks, threads, 0, stream>>>(indptr, row_len, perm, rows, segment, extra_ptr, out, width);
}

void zero_split(const int64_t* extra_ptr, int64_t rows, float* split_sums, int64_t width, cudaStream_t stream) {
  if (split_sums == nullptr) return;
  zero_split_kernel<<<256, 256, 0, stream>>>(extra_ptr, rows, split_sums, width);
}

template <typename T>
void finish_split(const int64_t* extra_ptr, const int64_t* perm, int64_t rows, const float* split_sums, T* out,
                  int64_t width, cudaStream_t stream) {
  if (split_sums == nullptr) return;
  const int threads = 256;
  finish_split_kernel<T><<<static_cast<unsigned>((rows + threads - 1) / threads), threads, 0, stream>>>(
      extra_ptr, perm, rows, split_sums, out, width);
}

template <typename T>
void spmm_csr(const int64_t* indptr, const int64_t* indices, const T* values, const T* x, T* out, float* split_sums,
              int64_t rows, const int64_t* extra_ptr, int64_t segment, int64_t items, int64_t width, bool mean,
              cudaStream_t stream) {
  if (items == 0 || width == 0) return;
  zero_split(extra_ptr, rows, split_sums, width, stream);
  const int v = vector_width(x, out, width);
  with_vector(v, [&](auto vector) {
    spmm_csr_kernel<T, decltype(vector)::value><<<grid_for(items, width, v), kWarpsPerBlock * kWarp, 0, stream>>>(
        indptr, indices, values, x, out, split_sums, rows, extra_ptr, segment, items, width, mean);
  });
  finish_split(extra_ptr, nullptr, rows, split_sums, out, width, stream);
}

template <typename T>
void spmm_sell(const int64_t* chunk_ptr, const int64_t* perm, const int64_t* row_len, const int64_t* cols,
               const T* vals, const T* x, T* out, float* split_sums, int64_t rows, int64_t chunk,
               const int64_t* extra_ptr, int64_t segment, int64_t items, int64_t width, bool mean,
               cudaStream_t stream) {
  if (items == 0 || width == 0) return;
  zero_split(extra_ptr, rows, split_sums, width, stream);
  const int v = vector_width(x, out, width);
  with_vector(v, [&](auto vector) {
    spmm_sell_kernel<T, decltype(vector)::value><<<grid_for(items, width, v), kWarpsPerBlock * kWarp, 0, stream>>>(
        chunk_ptr, perm, row_len, cols, vals, x, out, split_sums, rows, chunk, extra_ptr, segment, items, width, mean);
  });
  finish_split(extra_ptr, perm, rows, split_sums, out, width, stream);
}

#define GNNKIT_SPMM_INSTANTIATE(T)                                                                                  \
  template void spmm_plan<T>(const int64_t*, const int64_t*, const int64_t*, int64_t, int64_t, int64_t*, T*,       \
                             int64_t, cudaStream_t);                                                                \
  template void spmm_csr<T>(const int64_t*, const int64_t*, const T*, const T*, T*, float*, int64_t,               \
                            const int64_t*, int64_t, int64_t, int64_t, bool, cudaStream_t);                         \
  template void spmm_sell<T>(const int64_t*, const int64_t*, const int64_t*, const int64_t*, const T*, const T*,   \
                             T*, float*, int64_t, int64_t, const int64_t*, int64_t, int64_t, int64_t, bool,        \
                             cudaStream_t);
GNNKIT_SPMM_INSTANTIATE(float)
GNNKIT_SPMM_INSTANTIATE(double)
GNNKIT_SPMM_INSTANTIATE(__half)
GNNKIT_SPMM_INSTANTIATE(__nv_bfloat16)
#undef GNNKIT_SPMM_INSTANTIATE

}  // namespace gpu
}  // namespace gnnkit
