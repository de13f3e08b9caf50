// Magnitude selection for top-k gradient compression: one pass that returns the elements whose
// absolute value reaches a threshold, with their indices.
//
// The top-k compressors (TopKA2A, all-gather top-k) estimate a threshold from a strided sample so
// that about 2k elements pass, then run an exact top-k on the candidates only. In PyTorch the
// candidate step is four passes over the gradient (|x| into a buffer, the comparison into a bool
// mask, nonzero, a gather); here it is one read of x. Threads scan contiguous blocks into their own
// lists, concatenated in block order, so the result is in index order for any thread count.

#include "ops.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>

namespace gnnkit {

std::vector<at::Tensor> select_magnitude_cpu(const at::Tensor& x, double threshold) {
  TORCH_CHECK(x.dim() == 1 && x.scalar_type() == at::kFloat, "select_magnitude: x must be 1-D float32");
  TORCH_CHECK(!x.is_cuda(), "select_magnitude: x must be a CPU tensor");
  const at::Tensor xc = x.contiguous();
  const float* p = xc.data_ptr<float>();
  const int64_t n = xc.numel();
  const float t = static_cast<float>(threshold);
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<std::vector<int64_t>> found(static_cast<size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      std::vector<int64_t>& mine = found[static_cast<size_t>(b)];
      const int64_t end = std::min(n, (b + 1) * kBlock);
      for (int64_t i = b * kBlock; i < end; ++i) {
        if (std::fabs(p[i]) >= t) mine.push_back(i);
      }
    }
  });
  std::vector<int64_t> offsets(static_cast<size_t>(blocks) + 1, 0);
  for (int64_t b = 0; b < blocks; ++b) offsets[b + 1] = offsets[b] + static_cast<int64_t>(found[b].size());
  at::Tensor indices = at::empty({offsets[blocks]}, xc.options().dtype(at::kLong));
  at::Tensor values = at::empty({offsets[blocks]}, xc.options());
  int64_t* out_i = indices.data_ptr<int64_t>();
  float* out_v = values.data_ptr<float>();
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t o = offsets[b];
      for (int64_t i : found[static_cast<size_t>(b)]) {
        out_i[o] = i;
        out_v[o++] = p[i];
      }
    }
  });
  return {indices, values};
}

}  // namespace gnnkit
