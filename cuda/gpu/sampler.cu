// CUDA kernel of one uniform sampling hop (plain CUDA, raw pointers; see kernels.h). The random
// stream of frontier node i is keyed by (seed, hop, i), as in cpu/sampler.cpp, so the choice of
// edges does not depend on the launch configuration.

#include "kernels.h"
#include "../rng.h"

namespace gnnkit {
namespace gpu {

namespace {

// One thread per frontier node: the whole row, k draws with replacement, or k distinct
// positions by Floyd's algorithm (membership by a scan of the thread's own output, O(k^2)).
// Up to k = 64 the CPU kernel draws the same positions; above it, on rows shorter than 4k, the
// CPU takes a partial Fisher-Yates shuffle instead (equally uniform, other draws).
__global__ void sample_hop_kernel(const int64_t* indptr, const int64_t* frontier, const int64_t* offset,
                                  const int64_t* count, int64_t frontier_size, int64_t k, bool replace, uint64_t seed,
                                  uint64_t hop, int64_t* edges) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= frontier_size) return;
  const int64_t start = indptr[frontier[i]], deg = indptr[frontier[i] + 1] - start, n = count[i];
  int64_t* out = edges + offset[i];
  if (n == 0) return;
  Stream rng(seed, hop, static_cast<uint64_t>(i));
  if (replace && k >= 0) {
    for (int64_t j = 0; j < n; ++j) out[j] = start + rng.below(deg);
    return;
  }
  if (n == deg) {
    for (int64_t j = 0; j < n; ++j) out[j] = start + j;
    return;
  }
  int64_t m = 0;
  for (int64_t j = deg - n; j < deg; ++j) {
    const int64_t t = start + rng.below(j + 1);
    bool dup = false;
    for (int64_t q = 0; q < m && !dup; ++q) dup = out[q] == t;
    out[m++] = dup ? start + j : t;
  }
}

}  // namespace

void sample_hop(const int64_t* indptr, const int64_t* frontier, const int64_t* offset, const int64_t* count,
                int64_t frontier_size, int64_t k, bool replace, uint64_t seed, uint64_t hop, int64_t* edges,
                cudaStream_t stream) {
  if (frontier_size == 0) return;
  const int threads = 128;
  const unsigned blocks = static_cast<unsigned>((frontier_size + threads - 1) / threads);
  sample_hop_kernel<<<blocks, threads, 0, stream>>>(indptr, frontier, offset, count, frontier_size, k, replace, seed,
                                                    hop, edges);
}

}  // namespace gpu
}  // namespace gnnkit
