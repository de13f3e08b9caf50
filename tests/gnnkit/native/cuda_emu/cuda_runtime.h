// A CPU stand-in for the CUDA runtime, just enough to run gnnkit's kernels (cuda/gpu/*.cu) for
// correctness on a machine without a GPU. It replaces <cuda_runtime.h> on the include path; the
// test (test_cuda_emulated.py) rewrites each `kernel<<<grid, block, shared, stream>>>(args)` into
// `gnnkit_emu::Launch(grid, block, shared, stream)(kernel, args)` and each `extern __shared__`
// array into the launch's dynamic shared buffer before compiling the file as C++20.
//
// Semantics kept: blocks run one after another; the threads of a block run concurrently as OS
// threads (made once per launch and reused block after block), so __syncthreads and __syncwarp
// are real barriers (std::barrier) and a thread that returns early leaves them (arrive_and_drop),
// as an exited CUDA thread does. __shared__ arrays
// become function statics, which is per-block shared memory because blocks do not overlap.
// atomicAdd is serialised by a mutex. Not kept: warp-synchronous code that relies on lockstep
// execution without __syncwarp, timing, memory spaces (host pointers are device pointers here).
#pragma once

#include <algorithm>
#include <barrier>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint3 {
  unsigned x, y, z;
};
using cudaStream_t = void*;
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
// A launch's opt-in to more dynamic shared memory: the emulator's buffers have no such limit.
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel*, cudaFuncAttribute, int) { return cudaSuccess; }

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))

inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;

namespace gnnkit_emu {

constexpr unsigned kWarpSize = 32;

struct BlockSync {
  explicit BlockSync(unsigned threads) : block(threads) {
    for (unsigned first = 0; first < threads; first += kWarpSize) {
      warps.push_back(std::make_unique<std::barrier<>>(std::min(kWarpSize, threads - first)));
    }
  }
  std::barrier<> block;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
};

inline thread_local BlockSync* sync_point = nullptr;
inline thread_local unsigned warp_index = 0;
inline thread_local unsigned char* shared_buffer = nullptr;

inline std::mutex& atomic_mutex() {
  static std::mutex m;
  return m;
}

inline unsigned char* dynamic_shared() { return shared_buffer; }

// kernel<<<grid, block, shared, stream>>>(args...) becomes Launch(grid, block, shared, stream)(kernel, args...).
// One OS thread per CUDA thread of a block, made once per launch: for every block in turn the
// launcher sets up fresh barriers (an exited thread's drop must not carry into the next block),
// opens a gate, and waits at a second gate until every thread has finished that block.
struct Launch {
  dim3 grid, block;
  std::size_t shared;
  Launch(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), shared(s) {}

  template <typename Kernel, typename... Args>
  void operator()(Kernel kernel, Args... args) const {
    const unsigned threads = block.x * block.y * block.z;
    std::vector<unsigned char> buffer_storage(shared + 16);
    unsigned char* buffer = buffer_storage.data() + (16 - reinterpret_cast<std::uintptr_t>(buffer_storage.data()) % 16) % 16;
    std::barrier<> gate(threads + 1);  // the launcher and the block's threads, twice per block
    std::unique_ptr<BlockSync> sync;
    uint3 current{0, 0, 0};
    bool done = false;
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
        blockDim = block;
        gridDim = grid;
        warp_index = t / kWarpSize;
        shared_buffer = buffer;
        for (;;) {
          gate.arrive_and_wait();  // the next block is set up (or the launch is over)
          if (done) return;
          blockIdx = current;
          sync_point = sync.get();
          kernel(args...);
          sync_point->block.arrive_and_drop();  // an exited thread no longer holds the others up
          sync_point->warps[warp_index]->arrive_and_drop();
          gate.arrive_and_wait();  // the whole block has finished
        }
      });
    }
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          sync = std::make_unique<BlockSync>(threads);
          current = {bx, by, bz};
          gate.arrive_and_wait();
          gate.arrive_and_wait();
        }
    done = true;
    gate.arrive_and_wait();
    for (auto& thread : pool) thread.join();
  }
};

}  // namespace gnnkit_emu

inline void __syncthreads() { gnnkit_emu::sync_point->block.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { gnnkit_emu::sync_point->warps[gnnkit_emu::warp_index]->arrive_and_wait(); }

template <typename T>
inline T atomicAdd(T* address, T value) {
  std::lock_guard<std::mutex> lock(gnnkit_emu::atomic_mutex());
  const T old = *address;
  *address = old + value;
  return old;
}
