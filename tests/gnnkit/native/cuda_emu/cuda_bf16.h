// CPU stand-in for <cuda_bf16.h> (see cuda_runtime.h beside it): bfloat16 as the upper 16 bits of
// a float, rounded to nearest even as __float2bfloat16 does (NaN kept a NaN).
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 h) {
  const uint32_t u = static_cast<uint32_t>(h.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __nv_bfloat16{static_cast<uint16_t>((u >> 16) | 0x40u)};
  return __nv_bfloat16{static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}

inline __nv_bfloat16 operator+(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16(__bfloat162float(a) + __bfloat162float(b));
}
