// Torch glue of the CUDA kernels: checks, allocations, plans built with ATen ops, launches on the
// current stream. Compiled only when torch has CUDA (GNNKIT_WITH_CUDA); the kernels themselves
// live in the .cu files and take raw pointers.

#include "dispatch.h"

#include <ATen/Context.h>
#include <ATen/Dispatch.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/repeat_interleave.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/unique_consecutive.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>

#include <limits>
#include <optional>
#include <tuple>

#include "kernels.h"

namespace gnnkit {

namespace {

cudaStream_t stream() { return c10::cuda::getCurrentCUDAStream().stream(); }

void check_cuda(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.is_cuda() && t.is_contiguous(), name, " must be a contiguous CUDA tensor");
}

// A launch that could not start (configuration, resources) raises here, at its own call, rather
// than as an unrelated error of a later kernel; no host sync.
void check_launch() { C10_CUDA_KERNEL_LAUNCH_CHECK(); }

// TT blocks keep a prefix's product in shared memory: refuse cores whose product does not fit.
void check_tt_shared(const gpu::TTShape& s, size_t element, bool backward) {
  int device = 0, limit = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t bytes = gpu::tt_shared_bytes(s, element, backward);
  TORCH_CHECK(bytes <= static_cast<size_t>(limit), "tt_lookup: the cores need ", bytes,
              " bytes of shared memory a block (q1 q2 (r2 + q3) values), above this GPU's ", limit);
}

// The CUDA type of a torch scalar type: at::Half and at::BFloat16 share the layout of CUDA's own.
template <typename S>
struct CudaScalar {
  using type = S;
};
template <>
struct CudaScalar<at::Half> {
  using type = __half;
};
template <>
struct CudaScalar<at::BFloat16> {
  using type = __nv_bfloat16;
};

template <typename S>
typename CudaScalar<S>::type* cuda_ptr(const at::Tensor& t) {
  return reinterpret_cast<typename CudaScalar<S>::type*>(t.data_ptr<S>());
}

// Rows are split into segments (atomic sums in varying order) unless torch is asked for
// deterministic algorithms (torch.use_deterministic_algorithms): then each row is summed whole, by
// one warp a feature tile.
int64_t spmm_segment() {
  return at::globalContext().deterministicAlgorithms() ? gpu::kUnsplit : gpu::kSegment;
}

// The float rows that split rows of 16-bit values sum into (see gpu::spmm_csr); none otherwise.
at::Tensor split_sums(const at::Tensor& x, int64_t nnz, int64_t segment) {
  const bool narrow = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  return narrow && segment != gpu::kUnsplit
             ? at::empty({gpu::split_rows_bound(nnz, segment), x.size(1)}, x.options().dtype(at::kFloat))
             : at::Tensor();
}

float* float_ptr(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }

at::Tensor exclusive_cumsum(const at::Tensor& counts) {
  return at::cat({at::zeros({1}, counts.options()), counts.cumsum(0)});
}

// The SpMM work plan (see gpu::spmm_plan), made on the stream without a host sync: extra_ptr, the
// segment length and an upper bound of the number of work items. `out` is zeroed where rows are
// split.
struct Items {
  at::Tensor extra_ptr;
  int64_t segment;
  int64_t count;
};

template <typename S>
Items spmm_items(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows, int64_t nnz,
                 at::Tensor& out) {
  const int64_t segment = spmm_segment();
  at::Tensor extra_ptr = at::empty({rows + 1}, out.options().dtype(at::kLong));
  gpu::spmm_plan(indptr, row_len, perm, rows, segment, extra_ptr.data_ptr<int64_t>(), cuda_ptr<S>(out), out.size(1),
                 stream());
  check_launch();
  extra_ptr.slice(0, 1).cumsum_(0);
  return {extra_ptr, segment, gpu::spmm_items_bound(rows, nnz, segment)};
}

}  // namespace

at::Tensor spmm_csr_cuda(const at::Tensor& indptr, const at::Tensor& indices, const std::optional<at::Tensor>& values,
                         const at::Tensor& x_in, bool mean) {
  check_cuda(indptr, "indptr");
  check_cuda(indices, "indices");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const int64_t R = indptr.numel() - 1, F = x.size(1);
  at::Tensor out = at::empty({R, F}, x.options());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "spmm_csr_cuda", [&] {
    if (R == 0 || F == 0) return;
    const Items items = spmm_items<scalar_t>(indptr.data_ptr<int64_t>(), nullptr, nullptr, R, indices.numel(), out);
    at::Tensor w = values ? values->to(x.scalar_type()).contiguous() : at::Tensor();
    const at::Tensor sums = split_sums(x, indices.numel(), items.segment);
    gpu::spmm_csr(indptr.data_ptr<int64_t>(), indices.data_ptr<int64_t>(),
                  values ? cuda_ptr<scalar_t>(w) : nullptr, cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(out),
                  float_ptr(sums), R, items.extra_ptr.data_ptr<int64_t>(), items.segment, items.count, F, mean,
                  stream());
    check_launch();
  });
  return out;
}

at::Tensor spmm_sell_cuda(const at::Tensor& chunk_ptr, const at::Tensor& perm, const at::Tensor& row_len,
                          const at::Tensor& cols, const at::Tensor& vals, const at::Tensor& x_in, int64_t chunk,
                          bool mean) {
  for (const auto* t : {&chunk_ptr, &perm, &row_len, &cols, &vals}) check_cuda(*t, "SELL arrays");
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.contiguous();
  const int64_t R = perm.numel(), F = x.size(1);
  TORCH_CHECK(chunk >= 1, "spmm_sell: chunk must be >= 1, got ", chunk);
  at::Tensor out = at::empty({R, F}, x.options());
  TORCH_CHECK(vals.scalar_type() == x.scalar_type(), "spmm_sell: the matrix holds ", vals.scalar_type(),
              " values but x is ", x.scalar_type());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "spmm_sell_cuda", [&] {
    if (R == 0 || F == 0) return;
    const Items items = spmm_items<scalar_t>(nullptr, row_len.data_ptr<int64_t>(), perm.data_ptr<int64_t>(), R,
                                             cols.numel(), out);
    const at::Tensor sums = split_sums(x, cols.numel(), items.segment);
    gpu::spmm_sell(chunk_ptr.data_ptr<int64_t>(), perm.data_ptr<int64_t>(), row_len.data_ptr<int64_t>(),
                   cols.data_ptr<int64_t>(), cuda_ptr<scalar_t>(vals), cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(out),
                   float_ptr(sums), R, chunk, items.extra_ptr.data_ptr<int64_t>(), items.segment, items.count, F,
                   mean, stream());
    check_launch();
  });
  return out;
}

// Hops are sampled by the kernel; relabelling (first occurrence order) uses ATen ops like the
// pure-PyTorch sampler (gnnkit.data.sampler.relabel): the first occurrence of each unseen node leaves
// the least mark, position - n - 1, by a min-scatter. Two host read-backs a hop: the number of edges
// (to size them) and of new nodes (the masked select).
std::vector<at::Tensor> sample_neighbors_cuda(const at::Tensor& indptr, const at::Tensor& indices,
                                              const at::Tensor& seeds_in, const std::vector<int64_t>& fanouts,
                                              bool replace, int64_t seed, at::Tensor local_in) {
  check_cuda(indptr, "indptr");
  check_cuda(indices, "indices");
  const c10::cuda::CUDAGuard guard(indptr.device());
  at::Tensor local = local_in.to(at::kLong);  // works on an int64 copy, written back at the end
  const at::Tensor seeds = seeds_in.to(indptr.device(), at::kLong).contiguous();
  const int64_t B = seeds.numel();
  local.scatter_reduce_(0, seeds, at::arange(B, local.options()), "amin", /*include_self=*/false);
  std::vector<at::Tensor> nodes{seeds}, rows, cols, edges;
  std::vector<int64_t> num_nodes{B}, num_edges;
  at::Tensor frontier = seeds;
  int64_t frontier_start = 0, num_seen = B;
  for (size_t h = 0; h < fanouts.size(); ++h) {
    const int64_t k = fanouts[h];
    const at::Tensor start = indptr.index_select(0, frontier);
    const at::Tensor deg = indptr.index_select(0, frontier + 1) - start;
    const at::Tensor count = k < 0 ? deg : replace ? at::where(deg > 0, k, 0) : deg.clamp_max(k);
    const at::Tensor offset = exclusive_cumsum(count);
    const int64_t total = offset[-1].item<int64_t>();
    at::Tensor edge = at::empty({total}, indptr.options());
    gpu::sample_hop(indptr.data_ptr<int64_t>(), frontier.data_ptr<int64_t>(), offset.data_ptr<int64_t>(),
                    count.contiguous().data_ptr<int64_t>(), frontier.numel(), k, replace, static_cast<uint64_t>(seed),
                    h, edge.data_ptr<int64_t>(), stream());
    check_launch();
    const at::Tensor src = indices.index_select(0, edge);
    const at::Tensor marks = at::where(local.index_select(0, src) < 0, at::arange(-total - 1, -1, local.options()),
                                       std::numeric_limits<int64_t>::max());
    local.scatter_reduce_(0, src, marks, "amin", /*include_self=*/true);
    const at::Tensor fresh = src.masked_select(local.index_select(0, src) == marks);
    local.index_copy_(0, fresh, at::arange(num_seen, num_seen + fresh.numel(), local.options()));
    rows.push_back(local.index_select(0, src));
    // sized (the overload of a repeats vector and an output size): no read-back
    cols.push_back(at::repeat_interleave(count, std::optional<int64_t>(total)) + frontier_start);
    edges.push_back(edge);
    nodes.push_back(fresh);
    num_edges.push_back(total);
    num_nodes.push_back(fresh.numel());
    frontier_start = num_seen;
    frontier = fresh;
    num_seen += fresh.numel();
  }
  for (const auto& chunk : nodes) local.index_fill_(0, chunk, -1);
  local_in.copy_(local);
  auto cat = [&](const std::vector<at::Tensor>& parts) {
    return parts.empty() ? at::empty({0}, indptr.options()) : at::cat(parts);
  };
  auto counts = [](const std::vector<int64_t>& v) { return at::tensor(v, at::kLong); };
  return {cat(nodes), cat(rows), cat(cols), cat(edges), counts(num_nodes), counts(num_edges)};
}

// With prefix reuse the rows are sorted and grouped by prefix (a sort and two unique passes, whose
// sizes the host waits for); without, every row is its own group in its own place, one launch and
// no host sync, each block contracting its row's prefix itself.
std::vector<at::Tensor> tt_forward_cuda(const at::Tensor& rows_in, const at::Tensor& c0_in, const at::Tensor& c1_in,
                                        const at::Tensor& c2_in, bool reuse_prefixes) {
  const c10::cuda::CUDAGuard guard(c0_in.device());
  const at::Tensor c0 = c0_in.contiguous(), c1 = c1_in.contiguous(), c2 = c2_in.contiguous();
  const gpu::TTShape s{c0.size(0), c1.size(0), c2.size(0), c0.size(2), c1.size(2), c2.size(2), c0.size(3), c1.size(3)};
  const at::Tensor rows = rows_in.to(c0.device(), at::kLong).contiguous().view({-1});
  at::Tensor perm, uniq, seg, group;
  if (reuse_prefixes) {
    at::Tensor sorted, counts, group_counts;
    std::tie(sorted, perm) = at::sort(rows, /*stable=*/true, 0, false);
    std::tie(uniq, std::ignore, counts) = at::unique_consecutive(sorted, false, true);
    seg = exclusive_cumsum(counts);
    std::tie(std::ignore, std::ignore, group_counts) = at::unique_consecutive(at::div(uniq, s.p3, "floor"), false, true);
    group = exclusive_cumsum(group_counts);
  } else {
    perm = at::arange(rows.numel(), rows.options());
    uniq = rows;
    seg = at::arange(rows.numel() + 1, rows.options());
    group = seg;
  }
  check_tt_shared(s, c0.element_size(), false);
  const int64_t M = group.numel() - 1;
  at::Tensor out = at::empty({rows.numel(), s.q1 * s.q2 * s.q3}, c0.options());
  at::Tensor level = at::empty({M, s.q1 * s.q2 * s.r2}, c0.options());
  AT_DISPATCH_FLOATING_TYPES(c0.scalar_type(), "tt_forward_cuda", [&] {
    gpu::tt_forward<scalar_t>(c0.data_ptr<scalar_t>(), c1.data_ptr<scalar_t>(), c2.data_ptr<scalar_t>(),
                              perm.data_ptr<int64_t>(), seg.data_ptr<int64_t>(), uniq.data_ptr<int64_t>(),
                              group.data_ptr<int64_t>(), M, s, level.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(),
                              stream());
    check_launch();
  });
  return {out, perm, seg, uniq, group, level};
}

std::vector<at::Tensor> tt_backward_cuda(const at::Tensor& grad_in, const at::Tensor& c0_in, const at::Tensor& c1_in,
                                         const at::Tensor& c2_in, const at::Tensor& perm, const at::Tensor& seg,
                                         const at::Tensor& uniq, const at::Tensor& group, const at::Tensor& level) {
  const c10::cuda::CUDAGuard guard(c0_in.device());
  const at::Tensor c0 = c0_in.contiguous(), c1 = c1_in.contiguous(), c2 = c2_in.contiguous();
  const gpu::TTShape s{c0.size(0), c1.size(0), c2.size(0), c0.size(2), c1.size(2), c2.size(2), c0.size(3), c1.size(3)};
  // core gradients are summed with atomics (gnnkit's Python TT contraction is the deterministic path):
  // the caller alerts in deterministic mode (gnnkit.native.ops.alert_not_deterministic), in Python
  const at::Tensor grad = grad_in.to(c0.scalar_type()).contiguous();
  check_tt_shared(s, c0.element_size(), true);
  at::Tensor d0 = at::zeros_like(c0), d1 = at::zeros_like(c1), d2 = at::zeros_like(c2);
  AT_DISPATCH_FLOATING_TYPES(c0.scalar_type(), "tt_backward_cuda", [&] {
    gpu::tt_backward<scalar_t>(grad.data_ptr<scalar_t>(), c0.data_ptr<scalar_t>(), c1.data_ptr<scalar_t>(),
                               c2.data_ptr<scalar_t>(), perm.data_ptr<int64_t>(), seg.data_ptr<int64_t>(),
                               uniq.data_ptr<int64_t>(), group.data_ptr<int64_t>(), group.numel() - 1, s,
                               level.data_ptr<scalar_t>(), d0.data_ptr<scalar_t>(), d1.data_ptr<scalar_t>(),
                               d2.data_ptr<scalar_t>(), stream());
    check_launch();
  });
  return {d0, d1, d2};
}

}  // namespace gnnkit
