// Uniform multi-hop neighbour sampling over a destination-major CSR graph (GraphSAGE,
// https://arxiv.org/abs/1706.02216), with the output layout of gnnkit's pure-PyTorch
// CSRNeighborSampler (and PyG's NeighborSampler): seeds first, then nodes in order of discovery;
// edges grouped by hop, then by destination in node order.
//
// Every frontier node draws from its own counter-based random stream keyed by (seed, hop,
// position in the frontier), so the sample depends on the seed only, never on the thread count
// or the schedule. Edges are drawn in parallel; relabelling (global -> local ids, first
// occurrence order) is one sequential pass over the sampled edges, as in pyg-lib.

#include "ops.h"
#include "../rng.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_set>

namespace gnnkit {

namespace {

constexpr int64_t kFloydMaxK = 64;  // Floyd with a linear membership scan up to this fan-out
constexpr int64_t kShuffleFactor = 4;  // partial Fisher-Yates when deg <= factor * k

// Writes k distinct offsets in [0, deg) to out (deg > k > 0).
void distinct_offsets(int64_t deg, int64_t k, Stream& rng, int64_t* out, std::vector<int64_t>& scratch,
                      std::unordered_set<int64_t>& seen) {
  if (k <= kFloydMaxK) {  // Floyd's algorithm: k draws, O(k^2) comparisons
    int64_t n = 0;
    for (int64_t j = deg - k; j < deg; ++j) {
      const int64_t t = rng.below(j + 1);
      const bool dup = std::find(out, out + n, t) != out + n;
      out[n++] = dup ? j : t;
    }
  } else if (deg <= kShuffleFactor * k) {  // first k entries of a partial Fisher-Yates shuffle
    scratch.resize(deg);
    std::iota(scratch.begin(), scratch.end(), int64_t(0));
    for (int64_t j = 0; j < k; ++j) {
      std::swap(scratch[j], scratch[j + rng.below(deg - j)]);
      out[j] = scratch[j];
    }
  } else {  // Floyd's algorithm with a hash set
    seen.clear();
    int64_t n = 0;
    for (int64_t j = deg - k; j < deg; ++j) {
      const int64_t t = rng.below(j + 1);
      const int64_t pick = seen.insert(t).second ? t : j;
      if (pick == j) seen.insert(j);
      out[n++] = pick;
    }
  }
}

// Row pointers read through their stride (the graph may be a strided or memory-mapped view).
struct Ptr {
  const int64_t* data;
  int64_t stride;
  int64_t operator[](int64_t i) const { return data[i * stride]; }
};

// The number of edges each of the F frontier rows gives to one hop, and their running offsets
// (offset[F] is the hop's edge count).
void hop_counts(const Ptr& ip, const int64_t* frontier, int64_t F, int64_t k, bool replace, int64_t* count,
                int64_t* offset) {
  offset[0] = 0;
  for (int64_t i = 0; i < F; ++i) {
    const int64_t deg = ip[frontier[i] + 1] - ip[frontier[i]];
    count[i] = k < 0 ? deg : replace ? (deg > 0 ? k : 0) : std::min(deg, k);
    offset[i + 1] = offset[i] + count[i];
  }
}

// Draws the edges of one hop (hop_counts' sizes): edge positions grouped by frontier row, and the
// source node of every sampled edge (independent loads, done in parallel, so a sequential
// relabelling pass touches only the scratch map).
void draw_hop(const Ptr& ip, const Ptr& idx, const int64_t* frontier, int64_t F, int64_t k, bool replace,
              uint64_t seed, uint64_t hop, const int64_t* count, const int64_t* offset, int64_t* edges,
              int64_t* srcs) {
  at::parallel_for(0, F, 256, [&](int64_t b, int64_t e) {
    std::vector<int64_t> scratch;
    std::unordered_set<int64_t> seen;
    for (int64_t i = b; i < e; ++i) {
      const int64_t start = ip[frontier[i]], deg = ip[frontier[i] + 1] - start, n = count[i];
      int64_t* out = edges + offset[i];
      if (n == 0) continue;
      Stream rng(seed, hop, static_cast<uint64_t>(i));
      if (replace && k >= 0) {
        for (int64_t j = 0; j < n; ++j) out[j] = start + rng.below(deg);
      } else if (n == deg) {
        for (int64_t j = 0; j < n; ++j) out[j] = start + j;
      } else {
        distinct_offsets(deg, n, rng, out, scratch, seen);
        for (int64_t j = 0; j < n; ++j) out[j] += start;
      }
      int64_t* src = srcs + offset[i];
      for (int64_t j = 0; j < n; ++j) src[j] = idx[out[j]];
    }
  });
}

// Local ids of the E nodes in src (pyg-lib's relabelling): a node seen before keeps its id in
// local, a new one gets the next id from next_id on, in order of first occurrence, and is appended
// to fresh.
template <typename L>
void relabel_pass(const int64_t* src, int64_t E, L* local, int64_t next_id, int64_t* out,
                  std::vector<int64_t>& fresh) {
  for (int64_t e = 0; e < E; ++e) {
    L id = local[src[e]];
    if (id < 0) {
      id = static_cast<L>(next_id + static_cast<int64_t>(fresh.size()));
      local[src[e]] = id;
      fresh.push_back(src[e]);
    }
    out[e] = id;
  }
}

at::Tensor to_tensor(const std::vector<int64_t>& v) {
  at::Tensor t = at::empty({static_cast<int64_t>(v.size())}, at::kLong);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return t;
}

template <typename L>
std::vector<at::Tensor> sample_impl(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& seeds,
                                    const std::vector<int64_t>& fanouts, bool replace, uint64_t seed,
                                    L* local) {
  const Ptr ip{indptr.data_ptr<int64_t>(), indptr.stride(0)};
  const Ptr idx{indices.data_ptr<int64_t>(), indices.stride(0)};
  const int64_t B = seeds.numel();
  const int64_t* sp = seeds.data_ptr<int64_t>();
  std::vector<int64_t> nodes(sp, sp + B);
  std::vector<int64_t> rows, cols, all_edges, num_nodes{B}, num_edges;
  for (int64_t i = B - 1; i >= 0; --i) local[sp[i]] = static_cast<L>(i);  // repeated seeds: first position
  std::vector<int64_t> frontier(nodes), edges, srcs, count, offset, fresh;
  int64_t frontier_start = 0;
  for (size_t h = 0; h < fanouts.size(); ++h) {
    const int64_t F = static_cast<int64_t>(frontier.size());
    count.resize(F);
    offset.resize(F + 1);
    hop_counts(ip, frontier.data(), F, fanouts[h], replace, count.data(), offset.data());
    edges.resize(offset[F]);
    srcs.resize(offset[F]);
    draw_hop(ip, idx, frontier.data(), F, fanouts[h], replace, seed, h, count.data(), offset.data(), edges.data(),
             srcs.data());
    const int64_t num_seen = static_cast<int64_t>(nodes.size());
    const size_t base = rows.size();
    rows.resize(base + edges.size());
    cols.resize(base + edges.size());
    fresh.clear();
    relabel_pass(srcs.data(), offset[F], local, num_seen, rows.data() + base, fresh);
    for (int64_t i = 0, pos = static_cast<int64_t>(base); i < F; ++i) {
      std::fill(cols.begin() + pos, cols.begin() + pos + count[i], frontier_start + i);
      pos += count[i];
    }
    nodes.insert(nodes.end(), fresh.begin(), fresh.end());
    all_edges.insert(all_edges.end(), edges.begin(), edges.end());
    num_edges.push_back(static_cast<int64_t>(edges.size()));
    num_nodes.push_back(static_cast<int64_t>(fresh.size()));
    frontier.assign(fresh.begin(), fresh.end());
    frontier_start = num_seen;
  }
  for (int64_t v : nodes) local[v] = L(-1);  // reset only what this batch touched
  return {to_tensor(nodes), to_tensor(rows), to_tensor(cols), to_tensor(all_edges), to_tensor(num_nodes),
          to_tensor(num_edges)};
}

void check_graph(const at::Tensor& indptr, const at::Tensor& indices) {
  TORCH_CHECK(indptr.dtype() == at::kLong && indices.dtype() == at::kLong, "indptr/indices must be int64");
  TORCH_CHECK(indptr.dim() == 1 && indices.dim() == 1, "indptr/indices must be 1-D");
}

}  // namespace

std::vector<at::Tensor> sample_neighbors_cpu(const at::Tensor& indptr, const at::Tensor& indices,
                                             const at::Tensor& seeds_in, const std::vector<int64_t>& fanouts,
                                             bool replace, int64_t seed, at::Tensor local) {
  check_graph(indptr, indices);
  TORCH_CHECK(local.is_contiguous() && local.numel() == indptr.numel() - 1, "scratch map must have num_nodes entries");
  for (int64_t k : fanouts) TORCH_CHECK(k >= -1, "fan-outs must be >= -1");
  const at::Tensor seeds = seeds_in.to(at::kLong).contiguous();
  const int64_t N = indptr.numel() - 1;
  const int64_t* sp = seeds.data_ptr<int64_t>();
  for (int64_t i = 0; i < seeds.numel(); ++i) TORCH_CHECK(sp[i] >= 0 && sp[i] < N, "seed ids out of range");
  const uint64_t s = static_cast<uint64_t>(seed);
  if (local.scalar_type() == at::kInt) {
    return sample_impl<int32_t>(indptr, indices, seeds, fanouts, replace, s, local.data_ptr<int32_t>());
  }
  TORCH_CHECK(local.scalar_type() == at::kLong, "scratch map must be int32 or int64");
  return sample_impl<int64_t>(indptr, indices, seeds, fanouts, replace, s, local.data_ptr<int64_t>());
}

std::vector<at::Tensor> sample_rows_cpu(const at::Tensor& indptr, const at::Tensor& indices, const at::Tensor& rows_in,
                                        int64_t k, bool replace, int64_t seed,
                                        const std::optional<at::Tensor>& edge_base_in) {
  check_graph(indptr, indices);
  TORCH_CHECK(k >= -1, "fan-out must be >= -1");
  const at::Tensor rows = rows_in.to(at::kLong).contiguous();
  const int64_t N = indptr.numel() - 1, F = rows.numel();
  const int64_t* rp = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < F; ++i) TORCH_CHECK(rp[i] >= 0 && rp[i] < N, "row ids out of range");
  const Ptr ip{indptr.data_ptr<int64_t>(), indptr.stride(0)};
  const Ptr idx{indices.data_ptr<int64_t>(), indices.stride(0)};
  at::Tensor count = at::empty({F}, at::kLong);
  std::vector<int64_t> offset(F + 1);
  hop_counts(ip, rp, F, k, replace, count.data_ptr<int64_t>(), offset.data());
  at::Tensor edge = at::empty({offset[F]}, at::kLong), src = at::empty({offset[F]}, at::kLong);
  int64_t* ep = edge.data_ptr<int64_t>();
  draw_hop(ip, idx, rp, F, k, replace, static_cast<uint64_t>(seed), 0, count.data_ptr<int64_t>(), offset.data(), ep,
           src.data_ptr<int64_t>());
  if (edge_base_in.has_value()) {  // positions in another numbering of the edges, row by row
    const at::Tensor base = edge_base_in->to(at::kLong).contiguous();
    TORCH_CHECK(base.dim() == 1 && base.numel() == N, "edge_base must hold one entry per row");
    const int64_t* bp = base.data_ptr<int64_t>();
    at::parallel_for(0, F, 1024, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t shift = bp[rp[i]] - ip[rp[i]];
        for (int64_t j = offset[i]; j < offset[i + 1]; ++j) ep[j] += shift;
      }
    });
  }
  return {src, edge, count};
}

std::vector<at::Tensor> relabel_cpu(const at::Tensor& src_in, at::Tensor local, int64_t next_id) {
  const at::Tensor src = src_in.to(at::kLong).contiguous();
  TORCH_CHECK(local.is_contiguous() && local.dim() == 1, "scratch map must be a contiguous vector");
  const int64_t E = src.numel(), N = local.numel();
  const int64_t* sp = src.data_ptr<int64_t>();
  for (int64_t e = 0; e < E; ++e) TORCH_CHECK(sp[e] >= 0 && sp[e] < N, "node ids out of range");
  const int64_t top = local.scalar_type() == at::kInt ? std::numeric_limits<int32_t>::max()
                                                      : std::numeric_limits<int64_t>::max();
  TORCH_CHECK(next_id >= 0 && next_id <= top - E, "too many nodes for the scratch map's dtype");
  at::Tensor out = at::empty({E}, at::kLong);
  std::vector<int64_t> fresh;
  if (local.scalar_type() == at::kInt) {
    relabel_pass(sp, E, local.data_ptr<int32_t>(), next_id, out.data_ptr<int64_t>(), fresh);
  } else {
    TORCH_CHECK(local.scalar_type() == at::kLong, "scratch map must be int32 or int64");
    relabel_pass(sp, E, local.data_ptr<int64_t>(), next_id, out.data_ptr<int64_t>(), fresh);
  }
  return {out, to_tensor(fresh)};
}

}  // namespace gnnkit
