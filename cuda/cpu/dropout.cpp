// Dropout with a counter-based random stream: element i is kept when the i-th 32-bit draw of
// splitmix64 (cuda/rng.h) under the call's seed is at least p * 2^32, and then scaled by 1 / (1 - p).
//
// torch's CPU dropout draws a Bernoulli per element from a locked mt19937, about 15 ns an element;
// a full-graph layer of ogbn-arxiv (169k x 128) spends ~0.3 s there. Here one splitmix64 gives two
// draws and every block is independent, so threads split the work freely and the mask is the same
// for any thread count. The backward pass calls the same kernel with the same seed on the incoming
// gradient: it regenerates the mask instead of storing it.

#include "ops.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>

#include "../rng.h"

namespace gnnkit {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

// Pairs [j0, j1): elements 2j and 2j+1 take the low and high halves of draw j. Plain arguments
// (not lambda captures) so the compiler sees no aliasing and vectorises the loop.
void dropout_pairs(const float* __restrict in, float* __restrict out, int64_t j0, int64_t j1, uint64_t key,
                   uint32_t threshold, float scale) {
  for (int64_t j = j0; j < j1; ++j) {
    const uint64_t r = splitmix64(key + static_cast<uint64_t>(j) * kGolden);
    out[2 * j] = in[2 * j] * (static_cast<uint32_t>(r) >= threshold ? scale : 0.0f);
    out[2 * j + 1] = in[2 * j + 1] * (static_cast<uint32_t>(r >> 32) >= threshold ? scale : 0.0f);
  }
}

}  // namespace

at::Tensor dropout_cpu(const at::Tensor& x, double p, int64_t seed) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "dropout: x must be float32");
  TORCH_CHECK(!x.is_cuda(), "dropout: x must be a CPU tensor");
  TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout: p must lie in [0, 1), got ", p);
  const at::Tensor xc = x.contiguous();
  at::Tensor out = at::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* o = out.data_ptr<float>();
  const int64_t n = xc.numel(), pairs = n / 2;
  // keep when draw >= threshold (p = 0 keeps everything); branch-free so the loop vectorises
  const uint32_t threshold = static_cast<uint32_t>(std::min(std::ldexp(p, 32), 4294967295.0));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const uint64_t key = splitmix64(static_cast<uint64_t>(seed));
  at::parallel_for(0, pairs, 1 << 14, [&](int64_t j0, int64_t j1) {
    dropout_pairs(in, o, j0, j1, key, threshold, scale);
  });
  if (n % 2) {  // the last element takes the low half of its pair's draw
    const uint64_t r = splitmix64(key + static_cast<uint64_t>(pairs) * kGolden);
    o[n - 1] = in[n - 1] * (static_cast<uint32_t>(r) >= threshold ? scale : 0.0f);
  }
  return out;
}

}  // namespace gnnkit
