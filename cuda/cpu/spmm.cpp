// CPU SpMM kernels: CSR with an nnz-balanced row split, and SELL-C-sigma.
//
// CSR: each thread gets a contiguous block of rows holding about the same number of entries
// (plus one per row), the row split of GE-SpMM (Huang et al., https://arxiv.org/abs/2007.03179)
// moved to CPU threads. The feature dimension is the inner, contiguous loop: a row's accumulator
// is a fixed-size tile the compiler keeps in vector registers, so every gathered x row is read
// once per tile and the output is written once.
//
// SELL-C-sigma (Kreutzer et al., https://arxiv.org/abs/1307.6209): rows sorted by length inside
// windows of sigma rows, packed into chunks of C rows stored column-major and padded to the
// longest row of the chunk, so chunks hold rows of similar length (skewed degree distributions).

#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace gnnkit {

namespace {

constexpr int64_t kTile = 64;  // accumulator elements kept in registers per pass
// Software prefetch of the gathered x rows, this many entries ahead of the product (across row
// boundaries: a row's few entries give the out-of-order core too little to overlap), at most
// kPrefetchLines cache lines of each row (the hardware prefetcher follows longer rows).
constexpr int64_t kPrefetchEntries = 32;
constexpr int64_t kPrefetchLines = 4;
// Outputs larger than this (beyond the last-level cache, so the next reader misses anyway) are
// written with streaming stores: no read-for-ownership of lines that are entirely overwritten.
constexpr int64_t kStreamBytes = int64_t(32) << 20;

// dst[0..W) = acc * scale; streamed past the caches when `stream` (float, W a multiple of 16,
// dst 64-byte aligned: the caller checks), where the CPU has AVX-512.
template <typename T, int64_t W>
inline void store_tile(T* dst, const T* acc, T scale, bool stream) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float> && W % 16 == 0) {
    if (stream) {
      const __m512 s = _mm512_set1_ps(scale);
      for (int64_t f = 0; f < W; f += 16) _mm512_stream_ps(dst + f, _mm512_mul_ps(_mm512_loadu_ps(acc + f), s));
      return;
    }
  }
#endif
  (void)stream;
  for (int64_t f = 0; f < W; ++f) dst[f] = acc[f] * scale;
}

// Whether spmm_csr_cpu streams its output (see kStreamBytes and store_tile).
template <typename T>
bool stream_output(const T* out, int64_t rows, int64_t F) {
#if defined(__AVX512F__)
  return std::is_same_v<T, float> && F % 16 == 0 && reinterpret_cast<std::uintptr_t>(out) % 64 == 0 &&
         rows * F * static_cast<int64_t>(sizeof(T)) > kStreamBytes;
#else
  (void)out, (void)rows, (void)F;
  return false;
#endif
}

// Prefetches the first `lines` cache lines of x row idx[e] (row length F).
template <typename T>
inline void prefetch_x_row(const T* x, const int64_t* idx, int64_t e, int64_t F, int64_t lines) {
  const char* row = reinterpret_cast<const char*>(x + idx[e] * F);
  for (int64_t l = 0; l < lines; ++l) __builtin_prefetch(row + 64 * l, 0);
}

// Orders this thread's streaming stores before what follows (they bypass the usual ordering).
inline void stream_fence() {
#if defined(__AVX512F__)
  _mm_sfence();
#endif
}

void check_csr(const at::Tensor& indptr, const at::Tensor& indices) {
  TORCH_CHECK(indptr.dtype() == at::kLong && indices.dtype() == at::kLong, "indptr/indices must be int64");
  TORCH_CHECK(indptr.dim() == 1 && indices.dim() == 1 && indptr.numel() >= 1, "indptr/indices must be 1-D");
}

// acc[0..W) = scale * sum over the row's entries of w * x[col, f0 + 0..W) (w = 1 unless Weighted).
template <typename T, int64_t W, bool Weighted>
inline void row_tile(const int64_t* idx, const T* w, int64_t begin, int64_t end, int64_t stride,
                     const T* x, int64_t f0, int64_t F, T scale, T* out, bool stream) {
  T acc[W];
  for (int64_t f = 0; f < W; ++f) acc[f] = T(0);
  for (int64_t e = begin; e < end; e += stride) {
    const T* xr = x + idx[e] * F + f0;
    if constexpr (Weighted) {
      const T we = w[e];
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += we * xr[f];
    } else {
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += xr[f];
    }
  }
  store_tile<T, W>(out + f0, acc, scale, stream);
}

// Kept opaque to interprocedural optimisation: GCC's clone specialised for stride 1 (the CSR call)
// runs twice as slow at width 64 as the generic one (measured, GCC 12, -O3 -march=native).
template <typename T, bool Weighted>
__attribute__((noipa)) void row_product_impl(const int64_t* idx, const T* w, int64_t begin, int64_t end, int64_t stride,
                             const T* x, int64_t F, T scale, T* out, bool stream) {
  int64_t f0 = 0;
  for (; f0 + kTile <= F; f0 += kTile) {
    row_tile<T, kTile, Weighted>(idx, w, begin, end, stride, x, f0, F, scale, out, stream);
  }
  for (; f0 + 32 <= F; f0 += 32) row_tile<T, 32, Weighted>(idx, w, begin, end, stride, x, f0, F, scale, out, stream);
  for (; f0 + 16 <= F; f0 += 16) row_tile<T, 16, Weighted>(idx, w, begin, end, stride, x, f0, F, scale, out, stream);
  for (; f0 < F; ++f0) row_tile<T, 1, Weighted>(idx, w, begin, end, stride, x, f0, F, scale, out, false);
}

// out row (length F) = scale * sum_e w_e x[idx_e]; entries e = begin, begin+stride, ... < end;
// `stream`: see stream_output.
template <typename T>
inline void row_product(const int64_t* idx, const T* w, int64_t begin, int64_t end, int64_t stride,
                        const T* x, int64_t F, T scale, T* out, bool stream = false) {
  if (w) {
    row_product_impl<T, true>(idx, w, begin, end, stride, x, F, scale, out, stream);
  } else {
    row_product_impl<T, false>(idx, w, begin, end, stride, x, F, scale, out, stream);
  }
}

// Rows [r0, r1) of a CSR product of width exactly W (16, 32 or 64: one register tile), in one
// pass over their entries: the x row of the entry kPrefetchEntries ahead is prefetched in the
// same loop, so a row costs little beyond its entries (most rows of a sparse graph are short).
template <typename T, int64_t W, bool Weighted>
void csr_rows_fixed(const int64_t* ip, const int64_t* idx, const T* w, const T* x, T* out, int64_t r0, int64_t r1,
                    bool mean, bool stream) {
  constexpr int64_t kLines = std::min<int64_t>(kPrefetchLines, W * static_cast<int64_t>(sizeof(T)) / 64);
  const int64_t first = ip[r0], last = ip[r1];
  for (int64_t e = first; e < std::min(first + kPrefetchEntries, last); ++e) prefetch_x_row(x, idx, e, W, kLines);
  for (int64_t i = r0; i < r1; ++i) {
    T acc[W];
    for (int64_t f = 0; f < W; ++f) acc[f] = T(0);
    const int64_t end = ip[i + 1];
    for (int64_t e = ip[i]; e < end; ++e) {
      if (e + kPrefetchEntries < last) prefetch_x_row(x, idx, e + kPrefetchEntries, W, kLines);
      const T* xr = x + idx[e] * W;
      const T we = Weighted ? w[e] : T(1);
#pragma omp simd
      for (int64_t f = 0; f < W; ++f) acc[f] += Weighted ? we * xr[f] : xr[f];
    }
    const int64_t n = end - ip[i];
    store_tile<T, W>(out + i * W, acc, (mean && n > 0) ? T(1) / T(n) : T(1), stream);
  }
}

// The fixed-width path for widths 16, 32 and 64; false for other widths.
template <typename T>
bool csr_rows_fixed_width(const int64_t* ip, const int64_t* idx, const T* w, const T* x, T* out, int64_t F,
                          int64_t r0, int64_t r1, bool mean, bool stream) {
  auto run = [&](auto width) {
    constexpr int64_t W = decltype(width)::value;
    if (w) {
      csr_rows_fixed<T, W, true>(ip, idx, w, x, out, r0, r1, mean, stream);
    } else {
      csr_rows_fixed<T, W, false>(ip, idx, w, x, out, r0, r1, mean, stream);
    }
    return true;
  };
  switch (F) {
    case 16: return run(std::integral_constant<int64_t, 16>{});
    case 32: return run(std::integral_constant<int64_t, 32>{});
    case 64: return run(std::integral_constant<int64_t, 64>{});
    default: return false;
  }
}

}  // namespace

std::vector<int64_t> balanced_row_bounds(const int64_t* indptr, int64_t num_rows, int64_t chunks) {
  const int64_t total = indptr[num_rows] + num_rows;
  std::vector<int64_t> bounds(chunks + 1, num_rows);
  bounds[0] = 0;
  for (int64_t c = 1; c < chunks; ++c) {
    const int64_t target = total * c / chunks;
    int64_t lo = bounds[c - 1], hi = num_rows;  // first row i with indptr[i] + i >= target
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (indptr[mid] + mid < target) lo = mid + 1; else hi = mid;
    }
    bounds[c] = lo;
  }
  return bounds;
}

at::Tensor spmm_csr_cpu(const at::Tensor& indptr_in, const at::Tensor& indices_in,
                        const std::optional<at::Tensor>& values, const at::Tensor& x_in, bool mean) {
  check_csr(indptr_in, indices_in);
  const at::Tensor indptr = indptr_in.contiguous(), indices = indices_in.contiguous();
  TORCH_CHECK(x_in.dim() == 2, "x must be 2-D");
  const at::Tensor x = x_in.contiguous();
  const int64_t R = indptr.numel() - 1, F = x.size(1);
  at::Tensor out = at::empty({R, F}, x.options());
  if (R == 0 || F == 0) return out;
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* idx = indices.data_ptr<int64_t>();
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(R, at::get_num_threads() * 4));
  const std::vector<int64_t> bounds = balanced_row_bounds(ip, R, chunks);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "spmm_csr_cpu", [&] {
    at::Tensor w = values ? values->to(x.scalar_type()).contiguous() : at::Tensor();
    const scalar_t* wp = values ? w.data_ptr<scalar_t>() : nullptr;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t lines = std::min<int64_t>(kPrefetchLines, (F * static_cast<int64_t>(sizeof(scalar_t)) + 63) / 64);
    const bool stream = stream_output(op, R, F);
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        if (csr_rows_fixed_width<scalar_t>(ip, idx, wp, xp, op, F, bounds[c], bounds[c + 1], mean, stream)) continue;
        const int64_t last = ip[bounds[c + 1]];
        int64_t ahead = ip[bounds[c]];  // the next entry whose x row is prefetched
        for (int64_t i = bounds[c]; i < bounds[c + 1]; ++i) {
          for (const int64_t until = std::min(ip[i + 1] + kPrefetchEntries, last); ahead < until; ++ahead) {
            prefetch_x_row(xp, idx, ahead, F, lines);
          }
          const int64_t n = ip[i + 1] - ip[i];
          const scalar_t scale = (mean && n > 0) ? scalar_t(1) / scalar_t(n) : scalar_t(1);
          row_product<scalar_t>(idx, wp, ip[i], ip[i + 1], 1, xp, F, scale, op + i * F, stream);
        }
      }
      if (stream) stream_fence();
    });
  });
  return out;
}

std::vector<at::Tensor> sell_from_csr_cpu(const at::Tensor& indptr_in, const at::Tensor& indices_in,
                                          const std::optional<at::Tensor>& values, int64_t C,
                                          int64_t sigma, at::ScalarType dtype) {
  check_csr(indptr_in, indices_in);
  const at::Tensor indptr = indptr_in.contiguous(), indices = indices_in.contiguous();
  TORCH_CHECK(C >= 1 && sigma >= 1, "SELL: chunk and sigma must be >= 1");
  sigma = std::max<int64_t>(C, (sigma + C - 1) / C * C);  // whole chunks per window
  const int64_t R = indptr.numel() - 1;
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* idx = indices.data_ptr<int64_t>();
  auto lopt = indptr.options();
  at::Tensor perm = at::empty({R}, lopt), row_len = at::empty({R}, lopt);
  int64_t* pp = perm.data_ptr<int64_t>();
  int64_t* lp = row_len.data_ptr<int64_t>();
  // Sort rows by decreasing length inside each sigma window (stable: ties keep row order).
  const int64_t windows = (R + sigma - 1) / sigma;
  at::parallel_for(0, windows, 1, [&](int64_t w0, int64_t w1) {
    for (int64_t w = w0; w < w1; ++w) {
      const int64_t b = w * sigma, e = std::min(R, b + sigma);
      std::iota(pp + b, pp + e, b);
      std::stable_sort(pp + b, pp + e, [&](int64_t a, int64_t c) {
        return ip[a + 1] - ip[a] > ip[c + 1] - ip[c];
      });
      for (int64_t r = b; r < e; ++r) lp[r] = ip[pp[r] + 1] - ip[pp[r]];
    }
  });
  const int64_t S = (R + C - 1) / C;
  at::Tensor chunk_ptr = at::empty({S + 1}, lopt);
  int64_t* cp = chunk_ptr.data_ptr<int64_t>();
  cp[0] = 0;
  for (int64_t s = 0; s < S; ++s) cp[s + 1] = cp[s] + (s * C < R ? lp[s * C] : 0) * C;  // first row is longest
  const int64_t slots = cp[S];
  at::Tensor cols = at::zeros({slots}, lopt);
  at::Tensor vals = at::zeros({slots}, indptr.options().dtype(dtype));
  int64_t* colp = cols.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(dtype, "sell_from_csr_cpu", [&] {
    at::Tensor w = values ? values->to(dtype).contiguous() : at::Tensor();
    const scalar_t* wp = values ? w.data_ptr<scalar_t>() : nullptr;
    scalar_t* vp = vals.data_ptr<scalar_t>();
    at::parallel_for(0, S, 1, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        for (int64_t r = 0; r < C && s * C + r < R; ++r) {
          const int64_t row = pp[s * C + r], b = ip[row];
          for (int64_t j = 0; j < lp[s * C + r]; ++j) {
            colp[cp[s] + j * C + r] = idx[b + j];
            vp[cp[s] + j * C + r] = wp ? wp[b + j] : scalar_t(1);
          }
        }
      }
    });
  });
  return {chunk_ptr, perm, row_len, cols, vals};
}

at::Tensor spmm_sell_cpu(const at::Tensor& chunk_ptr, const at::Tensor& perm, const at::Tensor& row_len,
                         const at::Tensor& cols, const at::Tensor& vals, const at::Tensor& x_in,
                         int64_t C, bool mean) {
  TORCH_CHECK(x_in.dim() == 2, "x must be 2-D");
  TORCH_CHECK(C >= 1, "spmm_sell: chunk must be >= 1, got ", C);
  TORCH_CHECK(vals.scalar_type() == x_in.scalar_type(), "SELL values and x must share a dtype");
  const at::Tensor x = x_in.contiguous();
  const int64_t R = perm.numel(), F = x.size(1), S = chunk_ptr.numel() - 1;
  at::Tensor out = at::empty({R, F}, x.options());
  if (R == 0 || F == 0) return out;
  const int64_t* cp = chunk_ptr.data_ptr<int64_t>();
  const int64_t* pp = perm.data_ptr<int64_t>();
  const int64_t* lp = row_len.data_ptr<int64_t>();
  const int64_t* colp = cols.data_ptr<int64_t>();
  // Balance chunks by their padded slots (+ C per chunk): reuse the CSR splitter on chunk_ptr / C.
  std::vector<int64_t> work(S + 1);
  for (int64_t s = 0; s <= S; ++s) work[s] = cp[s] / C;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(S, at::get_num_threads() * 4));
  const std::vector<int64_t> bounds = balanced_row_bounds(work.data(), S, parts);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "spmm_sell_cpu", [&] {
    const scalar_t* vp = vals.data_ptr<scalar_t>();
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t s = bounds[p0]; s < bounds[p1]; ++s) {
        for (int64_t r = 0; r < C && s * C + r < R; ++r) {
          const int64_t n = lp[s * C + r];
          const scalar_t scale = (mean && n > 0) ? scalar_t(1) / scalar_t(n) : scalar_t(1);
          row_product<scalar_t>(colp, vp, cp[s] + r, cp[s] + r + n * C, C, xp, F, scale,
                                op + pp[s * C + r] * F);
        }
      }
    });
  });
  return out;
}

}  // namespace gnnkit
