// Runs gnnkit's CUDA kernels under the CPU emulator (cuda_runtime.h beside this file) against
// simple references: SpMM over CSR and SELL (sum and mean, weighted or not, a hub row split into
// segments or, in deterministic mode, kept whole, empty rows, widths that are and are not
// multiples of 32, every vector width, more feature tiles than the grid spans (the harness is built
// with GNNKIT_MAX_GRID_Y=2), an unaligned x, float, double, half and bfloat16 values), one sampling hop (valid,
// distinct without replacement, the same draws for the same seed), and the fused TT lookup with
// its gradients (against the dense product of the cores). Prints one "ok NAME" or "FAIL NAME: why"
// line per check; the exit status is the number of failures.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels.h"

using namespace gnnkit::gpu;
using Vec = std::vector<int64_t>;

namespace {

int failures = 0;

void report(const std::string& name, const std::string& why) {
  if (why.empty()) {
    std::printf("ok %s\n", name.c_str());
  } else {
    std::printf("FAIL %s: %s\n", name.c_str(), why.c_str());
    ++failures;
  }
}

// Host conversions of the kernels' value types.
template <typename T>
T make(double v) { return static_cast<T>(v); }
template <>
__half make<__half>(double v) { return __float2half(static_cast<float>(v)); }
template <>
__nv_bfloat16 make<__nv_bfloat16>(double v) { return __float2bfloat16(static_cast<float>(v)); }
double value(float v) { return v; }
double value(double v) { return v; }
double value(__half v) { return __half2float(v); }
double value(__nv_bfloat16 v) { return __bfloat162float(v); }

// Relative tolerance of a type's results (16-bit: sums in float, so only the output's one rounding,
// 2^-11 for half and 2^-8 for bfloat16, with room for the float sums).
template <typename T>
double tolerance() {
  return std::is_same_v<T, double> ? 1e-10 : std::is_same_v<T, float> ? 1e-4 : std::is_same_v<T, __half> ? 1e-3 : 5e-3;
}

// The float buffer split rows of 16-bit values add into (none for float and double: atomics into
// out), filled with NaN: the launcher must zero the rows it uses.
template <typename T>
std::vector<float> split_sums(int64_t nnz, int64_t width, int64_t segment) {
  const bool narrow = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;
  return std::vector<float>(narrow && segment != kUnsplit ? split_rows_bound(nnz, segment) * width : 0, std::nanf(""));
}

template <typename T>
std::vector<T> converted(const std::vector<double>& v) {
  std::vector<T> out;
  for (const double e : v) out.push_back(make<T>(e));
  return out;
}

// The values a kernel actually sees: ``v`` rounded to T.
template <typename T>
std::vector<double> rounded(const std::vector<double>& v) {
  std::vector<double> out;
  for (const double e : v) out.push_back(value(make<T>(e)));
  return out;
}

template <typename T>
std::string compare(const std::vector<T>& got, const std::vector<double>& want, double tol) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + " != " + std::to_string(want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(value(got[i]) - want[i]);
    if (!(err <= tol * (1.0 + std::fabs(want[i])))) {
      return "element " + std::to_string(i) + ": " + std::to_string(value(got[i])) + " vs " + std::to_string(want[i]);
    }
  }
  return "";
}

struct Csr {
  int64_t rows, cols;
  Vec indptr, indices;
  std::vector<double> values;
};

// Random rows of 0..12 entries, a few empty, one hub of `hub` entries (split into segments).
Csr random_csr(int64_t rows, int64_t cols, int64_t hub, std::mt19937_64& rng) {
  Csr a{rows, cols, {0}, {}, {}};
  std::uniform_int_distribution<int64_t> deg(0, 12), col(0, cols - 1);
  std::uniform_real_distribution<double> w(-1.0, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r == rows / 3 ? hub : (r % 17 == 0 ? 0 : deg(rng));
    for (int64_t j = 0; j < n; ++j) {
      a.indices.push_back(col(rng));
      a.values.push_back(w(rng));
    }
    a.indptr.push_back(static_cast<int64_t>(a.indices.size()));
  }
  return a;
}

std::vector<double> reference_spmm(const Csr& a, const std::vector<double>& x, int64_t width, bool weighted,
                                   bool mean) {
  std::vector<double> out(a.rows * width, 0.0);
  for (int64_t r = 0; r < a.rows; ++r) {
    const int64_t len = a.indptr[r + 1] - a.indptr[r];
    for (int64_t e = a.indptr[r]; e < a.indptr[r + 1]; ++e) {
      const double w = weighted ? a.values[e] : 1.0;
      for (int64_t f = 0; f < width; ++f) out[r * width + f] += w * x[a.indices[e] * width + f];
    }
    if (mean && len > 0) {
      for (int64_t f = 0; f < width; ++f) out[r * width + f] /= static_cast<double>(len);
    }
  }
  return out;
}

// The work plan the torch glue builds (gpu/dispatch.cpp): counts, then an inclusive scan.
template <typename T>
std::pair<Vec, int64_t> plan(const int64_t* indptr, const int64_t* row_len, const int64_t* perm, int64_t rows,
                             int64_t nnz, int64_t segment, std::vector<T>& out, int64_t width) {
  Vec extra(rows + 1);
  spmm_plan<T>(indptr, row_len, perm, rows, segment, extra.data(), out.data(), width, nullptr);
  std::partial_sum(extra.begin() + 1, extra.end(), extra.begin() + 1);
  return {extra, spmm_items_bound(rows, nnz, segment)};
}

// The product's error against the reference, or that the plan split a row it had to keep whole.
template <typename T>
std::string judged(const std::vector<T>& out, const std::vector<double>& want, const Vec& extra, int64_t segment) {
  if (segment == kUnsplit && extra.back() != 0) return "rows were split without atomics allowed";
  return compare(out, want, tolerance<T>());
}

// `offset` elements of padding before x: 1 makes x unaligned for vector loads (the kernel must
// fall back to scalar ones).
template <typename T>
void check_csr(const std::string& name, const Csr& a, int64_t width, bool weighted, bool mean, std::mt19937_64& rng,
               int64_t offset = 0, int64_t segment = kSegment) {
  std::normal_distribution<double> normal;
  std::vector<double> x(a.cols * width);
  for (auto& v : x) v = normal(rng);
  std::vector<T> xt(offset, make<T>(0.0)), vt = converted<T>(a.values);
  for (const T v : converted<T>(x)) xt.push_back(v);
  std::vector<T> out(a.rows * width, make<T>(-7.0));  // garbage: every row must be written
  auto [extra, items] = plan<T>(a.indptr.data(), nullptr, nullptr, a.rows, a.indices.size(), segment, out, width);
  auto sums = split_sums<T>(a.indices.size(), width, segment);
  spmm_csr<T>(a.indptr.data(), a.indices.data(), weighted ? vt.data() : nullptr, xt.data() + offset, out.data(),
              sums.empty() ? nullptr : sums.data(), a.rows, extra.data(), segment, items, width, mean, nullptr);
  Csr seen = a;
  seen.values = rounded<T>(a.values);
  report(name, judged(out, reference_spmm(seen, rounded<T>(x), width, weighted, mean), extra, segment));
}

// SELL-C-sigma as gnnkit builds it (cpu/spmm.cpp): rows by decreasing length in windows of sigma,
// chunks of C slots stored column-major, padded to the chunk's longest row.
template <typename T>
void check_sell(const std::string& name, const Csr& a, int64_t width, bool mean, int64_t C, int64_t sigma,
                std::mt19937_64& rng, int64_t segment = kSegment) {
  const int64_t R = a.rows;
  Vec perm(R), len(R);
  for (int64_t b = 0; b < R; b += sigma) {
    const int64_t e = std::min(R, b + sigma);
    std::iota(perm.begin() + b, perm.begin() + e, b);
    std::stable_sort(perm.begin() + b, perm.begin() + e, [&](int64_t p, int64_t q) {
      return a.indptr[p + 1] - a.indptr[p] > a.indptr[q + 1] - a.indptr[q];
    });
  }
  for (int64_t t = 0; t < R; ++t) len[t] = a.indptr[perm[t] + 1] - a.indptr[perm[t]];
  const int64_t S = (R + C - 1) / C;
  Vec chunk_ptr(S + 1, 0);
  for (int64_t s = 0; s < S; ++s) {
    int64_t longest = 0;
    for (int64_t t = s * C; t < std::min(R, (s + 1) * C); ++t) longest = std::max(longest, len[t]);
    chunk_ptr[s + 1] = chunk_ptr[s] + longest * C;
  }
  Vec cols(chunk_ptr[S], 0);
  std::vector<T> vals(chunk_ptr[S], make<T>(0.0));
  for (int64_t t = 0; t < R; ++t) {
    for (int64_t j = 0; j < len[t]; ++j) {
      const int64_t slot = chunk_ptr[t / C] + t % C + j * C, e = a.indptr[perm[t]] + j;
      cols[slot] = a.indices[e];
      vals[slot] = make<T>(a.values[e]);
    }
  }
  std::normal_distribution<double> normal;
  std::vector<double> x(a.cols * width);
  for (auto& v : x) v = normal(rng);
  std::vector<T> xt = converted<T>(x), out(R * width, make<T>(-7.0));
  auto [extra, items] = plan<T>(nullptr, len.data(), perm.data(), R, a.indices.size(), segment, out, width);
  auto sums = split_sums<T>(a.indices.size(), width, segment);
  spmm_sell<T>(chunk_ptr.data(), perm.data(), len.data(), cols.data(), vals.data(), xt.data(), out.data(),
               sums.empty() ? nullptr : sums.data(), R, C, extra.data(), segment, items, width, mean, nullptr);
  Csr seen = a;
  seen.values = rounded<T>(a.values);
  report(name, judged(out, reference_spmm(seen, rounded<T>(x), width, true, mean), extra, segment));
}

void check_sampler(std::mt19937_64& rng) {
  const Csr a = random_csr(200, 200, 300, rng);
  Vec frontier;
  for (int64_t r = 0; r < a.rows; r += 2) frontier.push_back(r);
  frontier.push_back(a.rows / 3);  // the hub, twice
  frontier.push_back(a.rows / 3);
  for (const int64_t k : {-1, 0, 3, 8, 500}) {
    for (const bool replace : {false, true}) {
      Vec count(frontier.size()), offset(frontier.size() + 1, 0);
      for (size_t i = 0; i < frontier.size(); ++i) {
        const int64_t deg = a.indptr[frontier[i] + 1] - a.indptr[frontier[i]];
        count[i] = k < 0 ? deg : replace ? (deg > 0 ? k : 0) : std::min(deg, k);
        offset[i + 1] = offset[i] + count[i];
      }
      auto draw = [&](uint64_t seed) {
        Vec edges(offset.back(), -1);
        sample_hop(a.indptr.data(), frontier.data(), offset.data(), count.data(), frontier.size(), k, replace, seed,
                   1, edges.data(), nullptr);
        return edges;
      };
      const Vec edges = draw(42);
      std::string why;
      for (size_t i = 0; i < frontier.size() && why.empty(); ++i) {
        const int64_t b = a.indptr[frontier[i]], e = a.indptr[frontier[i] + 1];
        std::set<int64_t> seen;
        for (int64_t j = offset[i]; j < offset[i + 1]; ++j) {
          if (edges[j] < b || edges[j] >= e) why = "edge outside its row";
          if (!replace && !seen.insert(edges[j]).second) why = "repeated edge without replacement";
        }
      }
      if (why.empty() && draw(42) != edges) why = "the same seed gave other draws";
      const bool random = k > 0 && k < 12;
      if (why.empty() && random && draw(43) == edges) why = "another seed gave the same draws";
      report("sample_hop k=" + std::to_string(k) + (replace ? " replace" : ""), why);
    }
  }
}

// The fused TT lookup against the dense product of the cores, and its gradients against the
// gradients of that product with respect to each core (<grad, out> is the loss).
// `reuse`: the sorted plan that contracts each prefix once; otherwise every row its own group in
// its own place (the plan gpu/dispatch.cpp builds without prefix reuse).
template <typename T>
void check_tt(const std::string& name, TTShape s, int64_t batch, bool reuse, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  auto randn = [&](int64_t n) {
    std::vector<double> v(n);
    for (auto& e : v) e = normal(rng);
    return v;
  };
  const auto g0 = randn(s.p1 * s.q1 * s.r1), g1 = randn(s.p2 * s.r1 * s.q2 * s.r2), g2 = randn(s.p3 * s.r2 * s.q3);
  const int64_t N = s.p1 * s.p2 * s.p3, D = s.q1 * s.q2 * s.q3, n1 = s.q2 * s.r2;
  std::uniform_int_distribution<int64_t> pick(0, N - 1);
  Vec rows(batch);
  for (auto& r : rows) r = pick(rng);
  rows[1] = rows[0];  // a repeated row
  // The plan of gpu/dispatch.cpp: stable sort, unique rows (seg), groups by digit prefix.
  Vec perm(batch);
  std::iota(perm.begin(), perm.end(), 0);
  Vec uniq, seg{0}, group{0};
  if (reuse) {
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return rows[a] < rows[b]; });
    for (int64_t j = 0; j < batch; ++j) {
      const int64_t r = rows[perm[j]];
      if (uniq.empty() || uniq.back() != r) {
        if (!uniq.empty()) seg.push_back(j);
        if (!uniq.empty() && uniq.back() / s.p3 != r / s.p3) group.push_back(static_cast<int64_t>(uniq.size()));
        uniq.push_back(r);
      }
    }
    seg.push_back(batch);
    group.push_back(static_cast<int64_t>(uniq.size()));
  } else {
    uniq = rows;
    seg.resize(batch + 1);
    std::iota(seg.begin(), seg.end(), 0);
    group = seg;
  }
  const int64_t M = static_cast<int64_t>(group.size()) - 1;
  std::vector<T> t0(g0.begin(), g0.end()), t1(g1.begin(), g1.end()), t2(g2.begin(), g2.end());
  std::vector<T> level(M * s.q1 * n1), out(batch * D, T(-7));
  tt_forward<T>(t0.data(), t1.data(), t2.data(), perm.data(), seg.data(), uniq.data(), group.data(), M, s,
                level.data(), out.data(), nullptr);
  const auto grad = randn(batch * D);
  std::vector<double> want(batch * D, 0.0), d0(g0.size(), 0.0), d1(g1.size(), 0.0), d2(g2.size(), 0.0);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t i1 = rows[b] / (s.p2 * s.p3), i2 = rows[b] / s.p3 % s.p2, i3 = rows[b] % s.p3;
    for (int64_t a = 0; a < s.q1; ++a)
      for (int64_t q = 0; q < s.q2; ++q)
        for (int64_t c = 0; c < s.q3; ++c)
          for (int64_t t = 0; t < s.r1; ++t)
            for (int64_t u = 0; u < s.r2; ++u) {
              const double A = g0[(i1 * s.q1 + a) * s.r1 + t], B = g1[i2 * s.r1 * n1 + t * n1 + q * s.r2 + u];
              const double C = g2[(i3 * s.r2 + u) * s.q3 + c], G = grad[b * D + (a * s.q2 + q) * s.q3 + c];
              want[b * D + (a * s.q2 + q) * s.q3 + c] += A * B * C;
              d0[(i1 * s.q1 + a) * s.r1 + t] += G * B * C;
              d1[i2 * s.r1 * n1 + t * n1 + q * s.r2 + u] += G * A * C;
              d2[(i3 * s.r2 + u) * s.q3 + c] += G * A * B;
            }
  }
  const double tol = tolerance<T>();
  report(name + " forward", compare(out, want, tol));
  std::vector<T> gt(grad.begin(), grad.end()), e0(g0.size(), T(0)), e1(g1.size(), T(0)), e2(g2.size(), T(0));
  tt_backward<T>(gt.data(), t0.data(), t1.data(), t2.data(), perm.data(), seg.data(), uniq.data(), group.data(), M, s,
                 level.data(), e0.data(), e1.data(), e2.data(), nullptr);
  std::string why = compare(e0, d0, tol);
  if (why.empty()) why = compare(e1, d1, tol);
  if (why.empty()) why = compare(e2, d2, tol);
  report(name + " backward", why);
}

}  // namespace

int main() {
  std::mt19937_64 rng(7);
  const Csr a = random_csr(300, 250, 700, rng);  // the hub spans three segments of kSegment
  // vector widths 1, 1, 1, 2, 4, 4, 1 for float; 161 features are 6 tiles, over the grid's 2
  for (const int64_t width : {1, 32, 45, 64, 128, 256, 161}) {
    for (const bool weighted : {false, true}) {
      for (const bool mean : {false, true}) {
        const std::string tag = " F=" + std::to_string(width) + (weighted ? " weighted" : "") + (mean ? " mean" : "");
        check_csr<float>("spmm_csr float" + tag, a, width, weighted, mean, rng);
      }
    }
    check_sell<float>("spmm_sell float F=" + std::to_string(width), a, width, false, 32, 128, rng);
  }
  check_csr<float>("spmm_csr float F=128 unaligned x", a, 128, true, false, rng, 1);
  check_csr<double>("spmm_csr double F=33 weighted mean", a, 33, true, true, rng);
  check_csr<double>("spmm_csr double F=64 weighted", a, 64, true, false, rng);
  check_sell<double>("spmm_sell double F=33 mean", a, 33, true, 8, 64, rng);
  for (const int64_t width : {45, 161}) {  // deterministic mode: the hub row stays one warp's
    const std::string tag = " F=" + std::to_string(width) + " unsplit";
    check_csr<float>("spmm_csr float" + tag + " weighted mean", a, width, true, true, rng, 0, kUnsplit);
    check_csr<__half>("spmm_csr half" + tag + " weighted", a, width, true, false, rng, 0, kUnsplit);
    check_sell<float>("spmm_sell float" + tag, a, width, false, 32, 128, rng, kUnsplit);
    check_sell<__nv_bfloat16>("spmm_sell bfloat16" + tag + " mean", a, width, true, 32, 128, rng, kUnsplit);
  }
  // split rows over more tiles than the grid spans: 3 tiles of 4 floats a lane, 6 of half values
  check_csr<float>("spmm_csr float F=384 weighted", a, 384, true, false, rng);
  check_csr<__half>("spmm_csr half F=161 weighted mean", a, 161, true, true, rng);
  check_sell<__nv_bfloat16>("spmm_sell bfloat16 F=800 mean", a, 800, true, 32, 128, rng);
  for (const int64_t width : {16, 64, 256}) {  // vector widths 1, 2 and 8 for 16-bit values
    const std::string tag = " F=" + std::to_string(width);
    check_csr<__half>("spmm_csr half" + tag + " weighted mean", a, width, true, true, rng);
    check_csr<__nv_bfloat16>("spmm_csr bfloat16" + tag + " weighted", a, width, true, false, rng);
    check_sell<__half>("spmm_sell half" + tag, a, width, false, 32, 128, rng);
    check_sell<__nv_bfloat16>("spmm_sell bfloat16" + tag + " mean", a, width, true, 32, 128, rng);
  }
  const Csr empty{5, 4, {0, 0, 0, 0, 0, 0}, {}, {}};
  check_csr<float>("spmm_csr float no entries", empty, 16, false, true, rng);
  check_sampler(rng);
  check_tt<float>("tt float", TTShape{3, 4, 5, 2, 3, 2, 3, 4}, 40, true, rng);
  check_tt<double>("tt double", TTShape{2, 3, 7, 3, 2, 4, 2, 5}, 64, true, rng);
  check_tt<float>("tt float per row", TTShape{3, 4, 5, 2, 3, 2, 3, 4}, 40, false, rng);
  std::printf("%d failure(s)\n", failures);
  return failures;
}
