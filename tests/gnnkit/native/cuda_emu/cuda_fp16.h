// CPU stand-in for <cuda_fp16.h> (see cuda_runtime.h beside it): IEEE half precision through the
// compiler's _Float16, with the conversion intrinsics gnnkit's kernels use and the addition the
// emulated atomicAdd needs.
#pragma once

struct __half {
  _Float16 value;
};

inline float __half2float(__half h) { return static_cast<float>(h.value); }
inline __half __float2half(float f) { return __half{static_cast<_Float16>(f)}; }  // round to nearest even
inline __half operator+(__half a, __half b) { return __float2half(__half2float(a) + __half2float(b)); }
