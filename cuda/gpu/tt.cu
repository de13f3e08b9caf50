// CUDA kernels of the fused three-core TT lookup (plain CUDA, raw pointers; see kernels.h and
// cpu/tt.cpp). One block per digit prefix (i1, i2): the block contracts G0[i1] G1[i2] once into
// shared memory, then every distinct row below the prefix multiplies it by its G2 slice
// (TT-Rec / FBTT-Embedding, https://arxiv.org/abs/2101.11714). The backward pass keeps the
// prefix's partial gradient in shared memory and adds core gradients with atomics.

#include "kernels.h"

namespace gnnkit {
namespace gpu {

namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void tt_forward_kernel(const T* g0, const T* g1, const T* g2, const int64_t* perm, const int64_t* seg,
                                  const int64_t* uniq, const int64_t* group, TTShape s, T* level, T* out) {
  extern __shared__ __align__(16) unsigned char smem[];
  T* L = reinterpret_cast<T*>(smem);
  const int64_t m = blockIdx.x;
  const int64_t prefix = uniq[group[m]] / s.p3, i1 = prefix / s.p2, i2 = prefix % s.p2;
  const int64_t n1 = s.q2 * s.r2, size = s.q1 * n1, D = s.q1 * s.q2 * s.q3;
  const T* A = g0 + i1 * s.q1 * s.r1;
  const T* B = g1 + i2 * s.r1 * n1;
  for (int64_t e = threadIdx.x; e < size; e += blockDim.x) {
    const int64_t a = e / n1, n = e % n1;
    T acc = T(0);
    for (int64_t t = 0; t < s.r1; ++t) acc += A[a * s.r1 + t] * B[t * n1 + n];
    L[e] = acc;
    level[m * size + e] = acc;
  }
  __syncthreads();
  for (int64_t u = group[m]; u < group[m + 1]; ++u) {
    const T* C = g2 + (uniq[u] % s.p3) * s.r2 * s.q3;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      const int64_t a = d / s.q3, c = d % s.q3;
      T acc = T(0);
      for (int64_t t = 0; t < s.r2; ++t) acc += L[a * s.r2 + t] * C[t * s.q3 + c];
      for (int64_t j = seg[u]; j < seg[u + 1]; ++j) out[perm[j] * D + d] = acc;
    }
  }
}

template <typename T>
__global__ void tt_backward_kernel(const T* grad, const T* g0, const T* g1, const T* g2, const int64_t* perm,
                                   const int64_t* seg, const int64_t* uniq, const int64_t* group, TTShape s,
                                   const T* level, T* d0, T* d1, T* d2) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t n1 = s.q2 * s.r2, size = s.q1 * n1, D = s.q1 * s.q2 * s.q3, Q12 = s.q1 * s.q2;
  T* dL = reinterpret_cast<T*>(smem);
  T* gu = dL + size;
  const int64_t m = blockIdx.x;
  const int64_t prefix = uniq[group[m]] / s.p3, i1 = prefix / s.p2, i2 = prefix % s.p2;
  const T* L = level + m * size;
  for (int64_t e = threadIdx.x; e < size; e += blockDim.x) dL[e] = T(0);
  for (int64_t u = group[m]; u < group[m + 1]; ++u) {
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {  // the row's gradient, its positions summed
      T acc = T(0);
      for (int64_t j = seg[u]; j < seg[u + 1]; ++j) acc += grad[perm[j] * D + d];
      gu[d] = acc;
    }
    __syncthreads();
    const int64_t i3 = uniq[u] % s.p3;
    const T* C = g2 + i3 * s.r2 * s.q3;
    for (int64_t e = threadIdx.x; e < s.r2 * s.q3; e += blockDim.x) {  // dC = L^T gu
      const int64_t t = e / s.q3, c = e % s.q3;
      T acc = T(0);
      for (int64_t a = 0; a < Q12; ++a) acc += L[a * s.r2 + t] * gu[a * s.q3 + c];
      atomicAdd(d2 + i3 * s.r2 * s.q3 + e, acc);
    }
    for (int64_t e = threadIdx.x; e < Q12 * s.r2; e += blockDim.x) {  // dL += gu C^T
      const int64_t a = e / s.r2, t = e % s.r2;
      T acc = T(0);
      for (int64_t c = 0; c < s.q3; ++c) acc += gu[a * s.q3 + c] * C[t * s.q3 + c];
      dL[e] += acc;
    }
  }
  __syncthreads();
  const T* A = g0 + i1 * s.q1 * s.r1;
  const T* B = g1 + i2 * s.r1 * n1;
  for (int64_t e = threadIdx.x; e < s.r1 * n1; e += blockDim.x) {  // dB = A^T dL  (dL as [q1, q2 r2])
    const int64_t t = e / n1, n = e % n1;
    T acc = T(0);
    for (int64_t a = 0; a < s.q1; ++a) acc += A[a * s.r1 + t] * dL[a * n1 + n];
    atomicAdd(d1 + i2 * s.r1 * n1 + e, acc);
  }
  for (int64_t e = threadIdx.x; e < s.q1 * s.r1; e += blockDim.x) {  // dA = dL B^T
    const int64_t a = e / s.r1, t = e % s.r1;
    T acc = T(0);
    for (int64_t n = 0; n < n1; ++n) acc += dL[a * n1 + n] * B[t * n1 + n];
    atomicAdd(d0 + i1 * s.q1 * s.r1 + e, acc);
  }
}

}  // namespace

template <typename T>
void tt_forward(const T* g0, const T* g1, const T* g2, const int64_t* perm, const int64_t* seg, const int64_t* uniq,
                const int64_t* group, int64_t num_prefixes, TTShape s, T* level, T* out, cudaStream_t stream) {
  if (num_prefixes == 0) return;
  const size_t shared = tt_shared_bytes(s, sizeof(T), false);
  if (shared > kDefaultSharedBytes)
    cudaFuncSetAttribute(tt_forward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  tt_forward_kernel<T><<<static_cast<unsigned>(num_prefixes), kThreads, shared, stream>>>(g0, g1, g2, perm, seg, uniq,
                                                                                          group, s, level, out);
}

template <typename T>
void tt_backward(const T* grad, const T* g0, const T* g1, const T* g2, const int64_t* perm, const int64_t* seg,
                 const int64_t* uniq, const int64_t* group, int64_t num_prefixes, TTShape s, const T* level, T* d0,
                 T* d1, T* d2, cudaStream_t stream) {
  if (num_prefixes == 0) return;
  const size_t shared = tt_shared_bytes(s, sizeof(T), true);
  if (shared > kDefaultSharedBytes)
    cudaFuncSetAttribute(tt_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  tt_backward_kernel<T><<<static_cast<unsigned>(num_prefixes), kThreads, shared, stream>>>(
      grad, g0, g1, g2, perm, seg, uniq, group, s, level, d0, d1, d2);
}

template void tt_forward<float>(const float*, const float*, const float*, const int64_t*, const int64_t*,
                                const int64_t*, const int64_t*, int64_t, TTShape, float*, float*, cudaStream_t);
template void tt_forward<double>(const double*, const double*, const double*, const int64_t*, const int64_t*,
                                 const int64_t*, const int64_t*, int64_t, TTShape, double*, double*, cudaStream_t);
template void tt_backward<float>(const float*, const float*, const float*, const float*, const int64_t*,
                                 const int64_t*, const int64_t*, const int64_t*, int64_t, TTShape, const float*,
                                 float*, float*, float*, cudaStream_t);
template void tt_backward<double>(const double*, const double*, const double*, const double*, const int64_t*,
                                  const int64_t*, const int64_t*, const int64_t*, int64_t, TTShape, const double*,
                                  double*, double*, double*, cudaStream_t);

}  // namespace gpu
}  // namespace gnnkit
