// The counter-based random stream shared by the CPU and CUDA neighbour samplers, so both draw the
// same numbers for the same (seed, hop, position): splitmix64 (Steele, Lea and Flood, "Fast
// Splittable Pseudorandom Number Generators", OOPSLA 2014) over a per-node key.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define GNNKIT_HD __host__ __device__ __forceinline__
#else
#define GNNKIT_HD inline
#endif

namespace gnnkit {

GNNKIT_HD uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// A counter-based stream: the i-th draw is splitmix64(key + i * golden), independent per key.
struct Stream {
  uint64_t state;
  GNNKIT_HD Stream(uint64_t seed, uint64_t hop, uint64_t pos)
      : state(splitmix64(splitmix64(seed ^ splitmix64(hop + 1)) ^ pos)) {}
  GNNKIT_HD uint64_t next() {
    state += 0x9E3779B97F4A7C15ULL;
    return splitmix64(state);
  }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < n / 2^64).
  GNNKIT_HD int64_t below(int64_t n) {
#ifdef __CUDA_ARCH__
    return static_cast<int64_t>(__umul64hi(next(), static_cast<uint64_t>(n)));
#else
    return static_cast<int64_t>((static_cast<unsigned __int128>(next()) * static_cast<uint64_t>(n)) >> 64);
#endif
  }
};

}  // namespace gnnkit
