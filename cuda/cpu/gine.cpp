// GINE's message sum, fused: out[i] = sum over the entries e of CSR row i of relu(x[src_e] + emb_e)
// (the edge variant of GIN: Xu et al., https://arxiv.org/abs/1810.00826; Hu et al.,
// https://arxiv.org/abs/1905.12265).
//
// Gather, add, ReLU and the row sum as separate tensor ops write and re-read the [E, F] messages
// three times forward and again backward; here every entry is one vectorised pass over its x and
// edge rows into the output row, which stays in L1 while the row's few entries add up.
//
// The edge features come either as one row per entry (emb [E, F], CSR order) or "coded": a row of
// a small table, emb_e = table[codes[e]] (e.g. one row per bond type, a combination of bond
// feature values), read from cache, so the [E, F] embeddings are never written, and their
// gradient is summed straight into the table's.
//
// The backward pass walks the entries grouped by source (the CSC order: the transpose's row
// pointer and, per position, the entry's CSR slot and destination row), so one thread owns each
// row of grad_x and needs no atomics, and recomputes the ReLU mask instead of storing it:
//   m_e = g[dst_e] * 1[x[src_e] + emb_e > 0],  grad_x[j] = sum over e with src_e = j of m_e,
//   grad_emb[e] = m_e, or grad_table[codes[e]] += m_e (per-thread tables, summed at the end).

#include "ops.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gnnkit {

namespace {

// Edge rows stored one per entry.
template <typename T>
struct EntryRows {
  const T* emb;
  int64_t F;
  const T* row(int64_t e) const { return emb + e * F; }
};

// Edge rows looked up in a table.
template <typename T>
struct CodedRows {
  const T* table;
  const int64_t* codes;
  int64_t F;
  const T* row(int64_t e) const { return table + codes[e] * F; }
};

// o[0..F) (+)= relu(xr + er); `first` writes instead of adding. ReLU as `v < 0 ? 0 : v` keeps a
// NaN (as torch's relu does).
template <typename T>
inline void add_message(T* __restrict o, const T* __restrict xr, const T* __restrict er, int64_t F, bool first) {
  if (first) {
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const T v = xr[f] + er[f];
      o[f] = v < T(0) ? T(0) : v;
    }
  } else {
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const T v = xr[f] + er[f];
      o[f] += v < T(0) ? T(0) : v;
    }
  }
}

// One entry's gradient: m = gr * 1[xr + er > 0] written to mr (added to it with Add), and added
// to gx (NeedX).
template <typename T, bool NeedX, bool Add>
inline void entry_grad(T* __restrict gx, T* __restrict mr, const T* __restrict xr, const T* __restrict er,
                       const T* __restrict gr, int64_t F) {
#pragma omp simd
  for (int64_t f = 0; f < F; ++f) {
    const T m = xr[f] + er[f] > T(0) ? gr[f] : T(0);
    if constexpr (Add) {
      mr[f] += m;
    } else {
      mr[f] = m;
    }
    if constexpr (NeedX) gx[f] += m;
  }
}

// Rows [r0, r1) of the forward product.
template <typename T, typename Rows>
void forward_rows(const int64_t* ip, const int64_t* sp, const T* x, const Rows& rows, T* out, int64_t F, int64_t r0,
                  int64_t r1) {
  for (int64_t i = r0; i < r1; ++i) {
    T* o = out + i * F;
    if (ip[i] == ip[i + 1]) std::fill(o, o + F, T(0));
    for (int64_t e = ip[i]; e < ip[i + 1]; ++e) add_message(o, x + sp[e] * F, rows.row(e), F, e == ip[i]);
  }
}

// Where an entry's gradient m_e goes: a row of grad_emb (EntryRows), or added into the row of its
// code in this thread's table gradient (CodedRows); a scratch row when that gradient is not needed.
template <typename T>
struct EntrySink {
  static constexpr bool kAdd = false;
  T* ge;  // null: not needed
  int64_t F;
  T* target(int64_t e, T* scratch) const { return ge ? ge + e * F : scratch; }
};

template <typename T>
struct TableSink {
  static constexpr bool kAdd = true;
  T* gt;  // this thread's [V, F] table gradient; null: not needed
  const int64_t* codes;
  int64_t F;
  T* target(int64_t e, T* scratch) const { return gt ? gt + codes[e] * F : scratch; }
};

// Columns (source nodes) [j0, j1) of the backward pass.
template <typename T, bool NeedX, typename Rows, typename Sink>
void backward_columns(const int64_t* cp, const int64_t* slots, const int64_t* dst, const T* x, const Rows& rows,
                      const Sink& sink, const T* g, T* gx, int64_t F, int64_t j0, int64_t j1) {
  std::vector<T> scratch(F);
  for (int64_t j = j0; j < j1; ++j) {
    T* gxr = NeedX ? gx + j * F : nullptr;
    if constexpr (NeedX) std::fill(gxr, gxr + F, T(0));
    const T* xr = x + j * F;
    for (int64_t k = cp[j]; k < cp[j + 1]; ++k) {
      const int64_t e = slots[k];
      entry_grad<T, NeedX, Sink::kAdd>(gxr, sink.target(e, scratch.data()), xr, rows.row(e), g + dst[k] * F, F);
    }
  }
}

void check_index(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.dtype() == at::kLong && t.dim() == 1, "gine: ", name, " must be a 1-D int64 tensor");
}

void check_dense(const at::Tensor& x, const at::Tensor& rows) {
  TORCH_CHECK(x.dim() == 2 && rows.dim() == 2 && x.size(1) == rows.size(1), "gine: x and edge rows must be [*, F]");
  TORCH_CHECK(x.scalar_type() == rows.scalar_type(), "gine: x and edge rows must share a dtype");
  TORCH_CHECK(!x.is_cuda() && !rows.is_cuda(), "gine: CPU tensors only");
}

// Work chunks (a few per thread) of about equal entries + rows, over a row pointer of n rows.
std::vector<int64_t> chunk_bounds(const int64_t* ptr, int64_t n) {
  return balanced_row_bounds(ptr, n, std::max<int64_t>(1, std::min<int64_t>(n, at::get_num_threads() * 4)));
}

// The forward pass over `rows` (EntryRows or CodedRows built from the scalar type's pointers).
template <typename MakeRows>
at::Tensor forward(const at::Tensor& indptr_in, const at::Tensor& src_in, const at::Tensor& x_in, int64_t nnz,
                   const MakeRows& make_rows) {
  check_index(indptr_in, "indptr");
  check_index(src_in, "src");
  const at::Tensor indptr = indptr_in.contiguous(), src = src_in.contiguous(), x = x_in.contiguous();
  TORCH_CHECK(indptr.numel() >= 1 && src.numel() == nnz, "gine: edge rows must match the entries");
  const int64_t R = indptr.numel() - 1, F = x.size(1);
  at::Tensor out = at::empty({R, F}, x.options());
  if (R == 0 || F == 0) return out;
  const int64_t* ip = indptr.data_ptr<int64_t>();
  const int64_t* sp = src.data_ptr<int64_t>();
  const std::vector<int64_t> bounds = chunk_bounds(ip, R);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gine_sum_cpu", [&] {
    const auto rows = make_rows(scalar_t(0));
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, static_cast<int64_t>(bounds.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
      forward_rows(ip, sp, xp, rows, op, F, bounds[c0], bounds[c1]);
    });
  });
  return out;
}

struct Csc {
  at::Tensor indptr, slots, rows;
  Csc(const at::Tensor& i, const at::Tensor& s, const at::Tensor& r) {
    check_index(i, "csc_indptr");
    check_index(s, "csc_slots");
    check_index(r, "csc_rows");
    indptr = i.contiguous(), slots = s.contiguous(), rows = r.contiguous();
  }
};

}  // namespace

at::Tensor gine_sum_cpu(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& x_in,
                        const at::Tensor& emb_in) {
  check_dense(x_in, emb_in);
  const at::Tensor emb = emb_in.contiguous();
  const int64_t F = x_in.size(1);
  return forward(indptr, src, x_in, emb.size(0), [&](auto zero) {
    using T = decltype(zero);
    return EntryRows<T>{emb.data_ptr<T>(), F};
  });
}

at::Tensor gine_sum_coded_cpu(const at::Tensor& indptr, const at::Tensor& src, const at::Tensor& x_in,
                              const at::Tensor& table_in, const at::Tensor& codes_in) {
  check_dense(x_in, table_in);
  check_index(codes_in, "codes");
  const at::Tensor table = table_in.contiguous(), codes = codes_in.contiguous();
  const int64_t F = x_in.size(1);
  return forward(indptr, src, x_in, codes.numel(), [&](auto zero) {
    using T = decltype(zero);
    return CodedRows<T>{table.data_ptr<T>(), codes.data_ptr<int64_t>(), F};
  });
}

std::vector<at::Tensor> gine_sum_backward_cpu(const at::Tensor& csc_indptr, const at::Tensor& csc_slots,
                                              const at::Tensor& csc_rows, const at::Tensor& x_in,
                                              const at::Tensor& emb_in, const at::Tensor& grad_in, bool need_x,
                                              bool need_emb) {
  check_dense(x_in, emb_in);
  check_dense(grad_in, emb_in);
  const Csc csc(csc_indptr, csc_slots, csc_rows);
  const at::Tensor x = x_in.contiguous(), emb = emb_in.contiguous(), grad = grad_in.contiguous();
  TORCH_CHECK(csc.indptr.numel() == x.size(0) + 1, "gine: csc_indptr must have one entry per x row, plus one");
  const int64_t N = x.size(0), F = x.size(1);
  at::Tensor gx = need_x ? at::empty_like(x) : at::Tensor();
  at::Tensor ge = need_emb ? at::empty_like(emb) : at::Tensor();
  if (N == 0 || F == 0 || !(need_x || need_emb)) return {gx, ge};
  const int64_t* cp = csc.indptr.data_ptr<int64_t>();
  const std::vector<int64_t> bounds = chunk_bounds(cp, N);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gine_sum_backward_cpu", [&] {
    const EntryRows<scalar_t> rows{emb.data_ptr<scalar_t>(), F};
    const EntrySink<scalar_t> sink{need_emb ? ge.data_ptr<scalar_t>() : nullptr, F};
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = grad.data_ptr<scalar_t>();
    scalar_t* gxp = need_x ? gx.data_ptr<scalar_t>() : nullptr;
    const int64_t* sl = csc.slots.data_ptr<int64_t>();
    const int64_t* dst = csc.rows.data_ptr<int64_t>();
    at::parallel_for(0, static_cast<int64_t>(bounds.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
      if (need_x) {
        backward_columns<scalar_t, true>(cp, sl, dst, xp, rows, sink, gp, gxp, F, bounds[c0], bounds[c1]);
      } else {
        backward_columns<scalar_t, false>(cp, sl, dst, xp, rows, sink, gp, gxp, F, bounds[c0], bounds[c1]);
      }
    });
  });
  return {gx, ge};
}

std::vector<at::Tensor> gine_sum_coded_backward_cpu(const at::Tensor& csc_indptr, const at::Tensor& csc_slots,
                                                    const at::Tensor& csc_rows, const at::Tensor& x_in,
                                                    const at::Tensor& table_in, const at::Tensor& codes_in,
                                                    const at::Tensor& grad_in, bool need_x, bool need_table) {
  check_dense(x_in, table_in);
  check_dense(grad_in, table_in);
  check_index(codes_in, "codes");
  const Csc csc(csc_indptr, csc_slots, csc_rows);
  const at::Tensor x = x_in.contiguous(), table = table_in.contiguous(), grad = grad_in.contiguous();
  const at::Tensor codes = codes_in.contiguous();
  TORCH_CHECK(csc.indptr.numel() == x.size(0) + 1, "gine: csc_indptr must have one entry per x row, plus one");
  const int64_t N = x.size(0), F = x.size(1), V = table.size(0);
  at::Tensor gx = need_x ? at::empty_like(x) : at::Tensor();
  // One table gradient per thread (no atomics), summed at the end: tables are small (one row per bond type).
  const int64_t threads = at::get_num_threads();
  at::Tensor gt = need_table ? at::zeros({threads, V, F}, table.options()) : at::Tensor();
  if (N == 0 || F == 0 || !(need_x || need_table)) return {gx, need_table ? gt.sum(0) : gt};
  const int64_t* cp = csc.indptr.data_ptr<int64_t>();
  const std::vector<int64_t> bounds = chunk_bounds(cp, N);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "gine_sum_coded_backward_cpu", [&] {
    const CodedRows<scalar_t> rows{table.data_ptr<scalar_t>(), codes.data_ptr<int64_t>(), F};
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = grad.data_ptr<scalar_t>();
    scalar_t* gxp = need_x ? gx.data_ptr<scalar_t>() : nullptr;
    scalar_t* gtp = need_table ? gt.data_ptr<scalar_t>() : nullptr;
    const int64_t* sl = csc.slots.data_ptr<int64_t>();
    const int64_t* dst = csc.rows.data_ptr<int64_t>();
    at::parallel_for(0, static_cast<int64_t>(bounds.size()) - 1, 1, [&](int64_t c0, int64_t c1) {
      const TableSink<scalar_t> sink{gtp ? gtp + at::get_thread_num() * V * F : nullptr, codes.data_ptr<int64_t>(), F};
      if (need_x) {
        backward_columns<scalar_t, true>(cp, sl, dst, xp, rows, sink, gp, gxp, F, bounds[c0], bounds[c1]);
      } else {
        backward_columns<scalar_t, false>(cp, sl, dst, xp, rows, sink, gp, gxp, F, bounds[c0], bounds[c1]);
      }
    });
  });
  return {gx, need_table ? (threads == 1 ? gt[0] : gt.sum(0)) : gt};
}

}  // namespace gnnkit
