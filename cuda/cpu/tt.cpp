// Fused three-core TT embedding lookup, forward and backward, with prefix reuse.
//
// The TT-Rec / FBTT-Embedding lookup (Yin et al., https://arxiv.org/abs/2101.11714) for cores
// G_k [p_k, r_{k-1}, q_k, r_k] (r_0 = r_3 = 1). Rows are sorted once; rows sharing the digit
// prefix (i1, i2) share the partial product L = G_0[i1] @ G_1[i2] ([q1 q2, r2]), computed once per
// prefix and kept for the backward pass; each distinct row then costs one [q1 q2, r2] x [r2, q3]
// product, written straight to every batch position that asked for it.
//
// Backward without atomics: the sort groups each row's batch positions and each prefix's rows, so
// a prefix (and its rows) belongs to one work chunk; core gradients are summed into one private
// buffer per chunk (a fixed number of chunks, so the result does not depend on the schedule)
// and the buffers are reduced in chunk order at the end.

#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>

namespace gnnkit {

namespace {

struct Shape {
  int64_t p1, p2, p3, q1, q2, q3, r1, r2;
  int64_t dim() const { return q1 * q2 * q3; }
  int64_t level() const { return q1 * q2 * r2; }
};

Shape check_cores(const at::Tensor& c0, const at::Tensor& c1, const at::Tensor& c2) {
  TORCH_CHECK(c0.dim() == 4 && c1.dim() == 4 && c2.dim() == 4, "TT cores must be 4-D [p, r_in, q, r_out]");
  TORCH_CHECK(c0.size(1) == 1 && c2.size(3) == 1, "TT boundary ranks must be 1");
  TORCH_CHECK(c0.size(3) == c1.size(1) && c1.size(3) == c2.size(1), "TT ranks of adjacent cores differ");
  TORCH_CHECK(c0.scalar_type() == c1.scalar_type() && c1.scalar_type() == c2.scalar_type(), "TT cores dtypes differ");
  return {c0.size(0), c1.size(0), c2.size(0), c0.size(2), c1.size(2), c2.size(2), c0.size(3), c1.size(3)};
}

template <typename T>
inline void axpy(T alpha, const T* x, T* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

// out [cols, rows] = in [rows, cols]^T
template <typename T>
inline void transpose(const T* in, int64_t rows, int64_t cols, T* out) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[j * rows + i] = in[i * cols + j];
  }
}

// out[f0 .. f0 + W) = sum_t a[t] * B[t, f0 .. f0 + W) for B [k, n] row-major, in registers.
template <typename T, int64_t W>
inline void matvec_tile(const T* a, const T* B, int64_t k, int64_t n, int64_t f0, T* out) {
  T acc[W] = {};
  for (int64_t t = 0; t < k; ++t) {
    const T at = a[t];
    const T* Bt = B + t * n + f0;
#pragma omp simd
    for (int64_t f = 0; f < W; ++f) acc[f] += at * Bt[f];
  }
  for (int64_t f = 0; f < W; ++f) out[f0 + f] = acc[f];
}

// out[0..n) = sum_t a[t] * B[t, 0..n) for B [k, n] row-major, accumulated in register tiles of
// 16, then 8 and 4 columns (TT widths such as q1 q2 = 20 leave short remainders), then singles.
template <typename T>
inline void matvec_rows(const T* a, const T* B, int64_t k, int64_t n, T* out) {
  int64_t f0 = 0;
  for (; f0 + 16 <= n; f0 += 16) matvec_tile<T, 16>(a, B, k, n, f0, out);
  for (; f0 + 8 <= n; f0 += 8) matvec_tile<T, 8>(a, B, k, n, f0, out);
  for (; f0 + 4 <= n; f0 += 4) matvec_tile<T, 4>(a, B, k, n, f0, out);
  for (; f0 < n; ++f0) {
    T acc = T(0);
    for (int64_t t = 0; t < k; ++t) acc += a[t] * B[t * n + f0];
    out[f0] = acc;
  }
}

// Prefetches the cache lines of a row of n elements (for writing or reading).
template <typename T>
inline void prefetch_row(const T* row, int64_t n, bool write) {
  const int64_t step = 64 / static_cast<int64_t>(sizeof(T));
  for (int64_t i = 0; i < n; i += step) {
    if (write) {
      __builtin_prefetch(row + i, 1);
    } else {
      __builtin_prefetch(row + i, 0);
    }
  }
}

// Work chunks over prefixes, balanced by rows (+1 per prefix); a fixed count for determinism.
std::vector<int64_t> prefix_chunks(const at::Tensor& group, int64_t per_thread) {
  const int64_t M = group.numel() - 1;
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(M, at::get_num_threads() * per_thread));
  return balanced_row_bounds(group.data_ptr<int64_t>(), M, chunks);
}

// The lookup's plan: the order rows are visited in (perm), their runs of equal rows (uniq, seg) and
// the runs of those with one digit prefix (group). With prefix reuse, rows are sorted so each
// distinct prefix and row is contracted once; without, every row is its own group in its own
// place (no sort: for batches of mostly distinct prefixes).
struct Plan {
  at::Tensor perm;
  std::vector<int64_t> uniq, seg, group;
};

Plan make_plan(const at::Tensor& rows, const Shape& s, bool reuse_prefixes) {
  const int64_t B = rows.numel();
  Plan plan;
  plan.uniq.reserve(B);
  if (!reuse_prefixes) {
    const int64_t* rp = rows.data_ptr<int64_t>();
    for (int64_t j = 0; j < B; ++j) {
      TORCH_CHECK(rp[j] >= 0 && rp[j] < s.p1 * s.p2 * s.p3, "TT row out of range");
      plan.uniq.push_back(rp[j]);
      plan.seg.push_back(j);
      plan.group.push_back(j);
    }
    plan.seg.push_back(B);
    plan.group.push_back(B);
    plan.perm = at::arange(B, rows.options());
    return plan;
  }
  auto [sorted, perm] = at::sort(rows, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const int64_t* sp = sorted.data_ptr<int64_t>();
  // Distinct rows (seg: their runs in `sorted`) and distinct prefixes (group: their runs of rows).
  for (int64_t j = 0; j < B; ++j) {
    if (j == 0 || sp[j] != sp[j - 1]) {
      TORCH_CHECK(sp[j] >= 0 && sp[j] < s.p1 * s.p2 * s.p3, "TT row out of range");
      if (plan.uniq.empty() || sp[j] / s.p3 != plan.uniq.back() / s.p3) {
        plan.group.push_back(static_cast<int64_t>(plan.uniq.size()));
      }
      plan.uniq.push_back(sp[j]);
      plan.seg.push_back(j);
    }
  }
  plan.seg.push_back(B);
  plan.group.push_back(static_cast<int64_t>(plan.uniq.size()));
  plan.perm = perm;
  return plan;
}

}  // namespace

std::vector<at::Tensor> tt_forward_cpu(const at::Tensor& rows_in, const at::Tensor& c0_in,
                                       const at::Tensor& c1_in, const at::Tensor& c2_in, bool reuse_prefixes) {
  const Shape s = check_cores(c0_in, c1_in, c2_in);
  const at::Tensor c0 = c0_in.contiguous(), c1 = c1_in.contiguous(), c2 = c2_in.contiguous();
  const at::Tensor rows = rows_in.to(at::kLong).contiguous().view({-1});
  const int64_t B = rows.numel();
  Plan plan = make_plan(rows, s, reuse_prefixes);
  const at::Tensor perm = plan.perm;
  const std::vector<int64_t>&uniq = plan.uniq, &seg = plan.seg, &group = plan.group;
  auto lopt = rows.options();
  at::Tensor uniq_t = at::tensor(uniq, lopt), seg_t = at::tensor(seg, lopt), group_t = at::tensor(group, lopt);
  const int64_t M = group_t.numel() - 1;
  at::Tensor out = at::empty({B, s.dim()}, c0.options());
  at::Tensor level = at::empty({M, s.level()}, c0.options());
  const std::vector<int64_t> bounds = prefix_chunks(group_t, 4);
  const int64_t* pp = perm.data_ptr<int64_t>();
  AT_DISPATCH_FLOATING_TYPES(c0.scalar_type(), "tt_forward_cpu", [&] {
    const scalar_t *g0 = c0.data_ptr<scalar_t>(), *g1 = c1.data_ptr<scalar_t>(), *g2 = c2.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    scalar_t* lv = level.data_ptr<scalar_t>();
    const int64_t Q12 = s.q1 * s.q2, n1 = s.q2 * s.r2, D = s.dim();
    at::parallel_for(0, static_cast<int64_t>(bounds.size()) - 1, 1, [&](int64_t b0, int64_t b1) {
      std::vector<scalar_t> yt(D), ct(s.q3 * s.r2), lt(s.level());
      for (int64_t m = bounds[b0]; m < bounds[b1]; ++m) {
        const int64_t prefix = uniq[group[m]] / s.p3, i1 = prefix / s.p2, i2 = prefix % s.p2;
        const scalar_t* A = g0 + i1 * s.q1 * s.r1;  // [q1, r1]
        const scalar_t* Bm = g1 + i2 * s.r1 * n1;   // [r1, q2 r2]
        scalar_t* L = lv + m * s.level();           // [q1, q2 r2] = [q1 q2, r2]
        for (int64_t a = 0; a < s.q1; ++a) matvec_rows(A + a * s.r1, Bm, s.r1, n1, L + a * n1);
        transpose(L, Q12, s.r2, lt.data());  // L^T [r2, q1 q2]: each row's product runs along q1 q2
        for (int64_t u = group[m]; u < group[m + 1]; ++u) {
          transpose(g2 + (uniq[u] % s.p3) * s.r2 * s.q3, s.r2, s.q3, ct.data());  // C^T [q3, r2]
          // y^T [q3, q1 q2] = C^T L^T: q3 register-tiled products of length r2 (no horizontal sums)
          for (int64_t c = 0; c < s.q3; ++c) {
            matvec_rows(ct.data() + c * s.r2, lt.data(), s.r2, Q12, yt.data() + c * Q12);
          }
          if (u + 1 < static_cast<int64_t>(uniq.size())) {  // the next row's output rows are random writes
            for (int64_t j = seg[u + 1]; j < seg[u + 2] && j < seg[u + 1] + 4; ++j) prefetch_row(op + pp[j] * D, D, true);
          }
          scalar_t* first = op + pp[seg[u]] * D;  // y = (y^T)^T written once, then copied to repeats
          for (int64_t a = 0; a < Q12; ++a) {
            for (int64_t c = 0; c < s.q3; ++c) first[a * s.q3 + c] = yt[c * Q12 + a];
          }
          for (int64_t j = seg[u] + 1; j < seg[u + 1]; ++j) std::copy(first, first + D, op + pp[j] * D);
        }
      }
    });
  });
  return {out, perm, seg_t, uniq_t, group_t, level};
}

std::vector<at::Tensor> tt_backward_cpu(const at::Tensor& grad_in, const at::Tensor& c0_in, const at::Tensor& c1_in,
                                        const at::Tensor& c2_in, const at::Tensor& perm, const at::Tensor& seg,
                                        const at::Tensor& uniq, const at::Tensor& group, const at::Tensor& level) {
  const Shape s = check_cores(c0_in, c1_in, c2_in);
  const at::Tensor c0 = c0_in.contiguous(), c1 = c1_in.contiguous(), c2 = c2_in.contiguous();
  const at::Tensor grad = grad_in.to(c0.scalar_type()).contiguous();
  TORCH_CHECK(grad.dim() == 2 && grad.size(0) == perm.numel() && grad.size(1) == s.dim(), "TT grad shape mismatch");
  const std::vector<int64_t> bounds = prefix_chunks(group, 1);  // one gradient buffer per thread
  const int64_t chunks = static_cast<int64_t>(bounds.size()) - 1;
  const int64_t n0 = c0.numel(), n1 = c1.numel(), n2 = c2.numel();
  at::Tensor partial = at::zeros({chunks, n0 + n1 + n2}, c0.options());
  // Middle-core slices transposed once per call ([p2, q2 r2, r1]): dA = dL B^T then runs as
  // register-tiled products instead of q1 r1 dot products with horizontal sums.
  const at::Tensor c1t = c1.view({s.p2, s.r1, s.q2 * s.r2}).transpose(1, 2).contiguous();
  const int64_t *pp = perm.data_ptr<int64_t>(), *sg = seg.data_ptr<int64_t>();
  const int64_t *up = uniq.data_ptr<int64_t>(), *gp = group.data_ptr<int64_t>();
  const int64_t num_rows = uniq.numel();
  AT_DISPATCH_FLOATING_TYPES(c0.scalar_type(), "tt_backward_cpu", [&] {
    const scalar_t *g0 = c0.data_ptr<scalar_t>(), *g2 = c2.data_ptr<scalar_t>();
    const scalar_t* g1t = c1t.data_ptr<scalar_t>();
    const scalar_t* gr = grad.data_ptr<scalar_t>();
    const scalar_t* lv = level.data_ptr<scalar_t>();
    scalar_t* part = partial.data_ptr<scalar_t>();
    const int64_t Q12 = s.q1 * s.q2, w1 = s.q2 * s.r2, D = s.dim();
    at::parallel_for(0, chunks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<scalar_t> gu(D), gut(D), dL(s.level()), ct(s.q3 * s.r2), dct(s.q3 * s.r2), col(s.q1), row(w1),
          tmp(s.r2), tmp_a(s.r1);
      for (int64_t c = b0; c < b1; ++c) {
        scalar_t* d0 = part + c * (n0 + n1 + n2);
        scalar_t* d1 = d0 + n0;
        scalar_t* d2 = d1 + n1;
        for (int64_t m = bounds[c]; m < bounds[c + 1]; ++m) {
          const int64_t prefix = up[gp[m]] / s.p3, i1 = prefix / s.p2, i2 = prefix % s.p2;
          const scalar_t* L = lv + m * s.level();
          std::fill(dL.begin(), dL.end(), scalar_t(0));
          for (int64_t u = gp[m]; u < gp[m + 1]; ++u) {
            if (u + 1 < num_rows) {  // the next row's gradient rows are random reads
              for (int64_t j = sg[u + 1]; j < sg[u + 2] && j < sg[u + 1] + 4; ++j) prefetch_row(gr + pp[j] * D, D, false);
            }
            std::fill(gu.begin(), gu.end(), scalar_t(0));  // the row's gradient: its positions summed
            for (int64_t j = sg[u]; j < sg[u + 1]; ++j) {
              const scalar_t* g = gr + pp[j] * D;
              for (int64_t e = 0; e < D; ++e) gu[e] += g[e];
            }
            const int64_t i3 = up[u] % s.p3;
            transpose(g2 + i3 * s.r2 * s.q3, s.r2, s.q3, ct.data());  // C^T [q3, r2]
            transpose(gu.data(), Q12, s.q3, gut.data());               // gu^T [q3, q1 q2]
            // dC^T = gu^T L and dL += gu C^T, each output row summed in registers and stored once
            for (int64_t k = 0; k < s.q3; ++k) matvec_rows(gut.data() + k * Q12, L, Q12, s.r2, dct.data() + k * s.r2);
            for (int64_t a = 0; a < Q12; ++a) {
              matvec_rows(gu.data() + a * s.q3, ct.data(), s.q3, s.r2, tmp.data());
              axpy(scalar_t(1), tmp.data(), dL.data() + a * s.r2, s.r2);
            }
            scalar_t* dC = d2 + i3 * s.r2 * s.q3;
            for (int64_t t = 0; t < s.r2; ++t) {
              for (int64_t k = 0; k < s.q3; ++k) dC[t * s.q3 + k] += dct[k * s.r2 + t];
            }
          }
          const scalar_t* A = g0 + i1 * s.q1 * s.r1;  // [q1, r1]
          const scalar_t* Bt = g1t + i2 * w1 * s.r1;  // B^T [q2 r2, r1]
          scalar_t* dA = d0 + i1 * s.q1 * s.r1;
          scalar_t* dB = d1 + i2 * s.r1 * w1;
          // dL as [q1, q2 r2]: dB += A^T dL, each row of dB updated once (register tiles);
          // dA += dL B^T.
          for (int64_t t = 0; t < s.r1; ++t) {
            for (int64_t a = 0; a < s.q1; ++a) col[a] = A[a * s.r1 + t];
            matvec_rows(col.data(), dL.data(), s.q1, w1, row.data());
            axpy(scalar_t(1), row.data(), dB + t * w1, w1);
          }
          for (int64_t a = 0; a < s.q1; ++a) {
            matvec_rows(dL.data() + a * w1, Bt, w1, s.r1, tmp_a.data());
            axpy(scalar_t(1), tmp_a.data(), dA + a * s.r1, s.r1);
          }
        }
      }
    });
  });
  at::Tensor total = partial.sum(0);  // chunk buffers reduced in a fixed order
  return {total.narrow(0, 0, n0).view(c0.sizes()).clone(), total.narrow(0, n0, n1).view(c1.sizes()).clone(),
          total.narrow(0, n0 + n1, n2).view(c2.sizes()).clone()};
}

}  // namespace gnnkit
