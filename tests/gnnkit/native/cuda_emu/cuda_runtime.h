// A CPU stand-in for the CUDA runtime, just enough to run gnnkit's kernels (cuda/gpu/*.cu) for
// correctness on a machine without a GPU. It replaces <cuda_runtime.h> on the include path; the
// test (test_cuda_emulated.py) rewrites each `kernel<<<grid, block, shared, stream>>>(args)` into
// `gnnkit_emu::Launch(grid, block, shared, stream)(kernel, args)` and each `extern __shared__`
// array into the launch's dynamic shared buffer before compiling the file as C++20.
//
// Semantics kept: blocks run one after another; the threads of a block are fibers (ucontext) of
// one OS thread that switch only at __syncthreads and __syncwarp, which are real barriers: a
// thread waits there until every live thread of its block (or warp) has arrived, and a thread
// that returns early leaves them, as an exited CUDA thread does. Between two barriers the threads
// run one after another, in index order and in reverse order on alternate passes, so a missing
// barrier shows up whichever thread writes and whichever reads. A barrier some live thread never
// reaches is reported and aborts, where a GPU would hang. __shared__ arrays become function
// statics, which is per-block shared memory because blocks do not overlap. Not kept: warp-
// synchronous code that relies on lockstep execution without __syncwarp, timing, memory spaces
// (host pointers are device pointers here). (Fibers, not OS threads: a block of 256 OS threads
// meeting at barriers spent its time in the scheduler, the more so on a busy machine.)
#pragma once

#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
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

// The running fiber's coordinates: the scheduler sets them before it resumes a fiber.
inline uint3 threadIdx{0, 0, 0};
inline uint3 blockIdx{0, 0, 0};
inline dim3 blockDim;
inline dim3 gridDim;

namespace gnnkit_emu {

constexpr unsigned kWarpSize = 32;
constexpr std::size_t kStackBytes = 256 * 1024;

struct Fiber {
  ucontext_t context;
  std::unique_ptr<char[]> stack{new char[kStackBytes]};  // left uninitialised: pages a fiber never touches cost nothing
  uint3 index{0, 0, 0};
  unsigned warp = 0;
  bool finished = false;
};

inline ucontext_t scheduler;
inline Fiber* running = nullptr;
inline std::uint64_t progress = 0;  // barrier phases completed and threads finished, for deadlock detection
inline const std::function<void()>* body = nullptr;

// Back to the scheduler; the fiber continues here when it is next resumed.
inline void yield() { swapcontext(&running->context, &scheduler); }

// A barrier among a block's (or a warp's) live threads, as std::barrier's arrive_and_wait and
// arrive_and_drop: a phase completes when every thread still expected has arrived.
struct Barrier {
  explicit Barrier(unsigned threads) : expected(threads) {}
  void arrive_and_wait() {
    const std::uint64_t mine = phase;
    if (++arrived == expected) {
      complete();
      return;
    }
    while (phase == mine) yield();
  }
  void arrive_and_drop() {
    --expected;
    if (arrived > 0 && arrived == expected) complete();
  }
  unsigned expected, arrived = 0;
  std::uint64_t phase = 0;

 private:
  void complete() {
    arrived = 0;
    ++phase;
    ++progress;
  }
};

struct BlockSync {
  explicit BlockSync(unsigned threads) : block(threads) {
    for (unsigned first = 0; first < threads; first += kWarpSize) {
      warps.push_back(std::make_unique<Barrier>(threads - first < kWarpSize ? threads - first : kWarpSize));
    }
  }
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
};

inline BlockSync* sync_point = nullptr;
inline unsigned char* shared_buffer = nullptr;

inline unsigned char* dynamic_shared() { return shared_buffer; }

// A fiber's whole life: the kernel, then leaving the barriers (an exited thread holds no one up).
inline void fiber_main() {
  (*body)();
  sync_point->block.arrive_and_drop();
  sync_point->warps[running->warp]->arrive_and_drop();
  running->finished = true;
  ++progress;
}  // returns to uc_link, the scheduler

// Runs one block: resumes every unfinished fiber once per pass, alternating the order, until all
// have finished; aborts if a whole pass changes nothing (a barrier some live thread never reaches).
inline void run_block(std::vector<Fiber>& fibers) {
  for (Fiber& fiber : fibers) {
    fiber.finished = false;
    getcontext(&fiber.context);
    fiber.context.uc_stack.ss_sp = fiber.stack.get();
    fiber.context.uc_stack.ss_size = kStackBytes;
    fiber.context.uc_link = &scheduler;
    makecontext(&fiber.context, fiber_main, 0);
  }
  const std::size_t n = fibers.size();
  for (std::size_t pass = 0, live = n; live > 0; ++pass) {
    const std::uint64_t before = progress;
    live = 0;
    for (std::size_t i = 0; i < n; ++i) {
      Fiber& fiber = fibers[pass % 2 == 0 ? i : n - 1 - i];
      if (fiber.finished) continue;
      threadIdx = fiber.index;
      running = &fiber;
      swapcontext(&scheduler, &fiber.context);
      live += fiber.finished ? 0 : 1;
    }
    if (live > 0 && progress == before) {
      std::fprintf(stderr, "gnnkit_emu: block (%u, %u, %u): %zu live threads wait at a barrier the others never reach\n",
                   blockIdx.x, blockIdx.y, blockIdx.z, live);
      std::abort();
    }
  }
}

// kernel<<<grid, block, shared, stream>>>(args...) becomes Launch(grid, block, shared, stream)(kernel, args...):
// the blocks in turn, each with fresh barriers, its threads as fibers (made once per launch).
struct Launch {
  dim3 grid, block;
  std::size_t shared;
  Launch(dim3 g, dim3 b, std::size_t s = 0, cudaStream_t = nullptr) : grid(g), block(b), shared(s) {}

  template <typename Kernel, typename... Args>
  void operator()(Kernel kernel, Args... args) const {
    const unsigned threads = block.x * block.y * block.z;
    std::vector<unsigned char> buffer_storage(shared + 16);
    shared_buffer = buffer_storage.data() + (16 - reinterpret_cast<std::uintptr_t>(buffer_storage.data()) % 16) % 16;
    std::vector<Fiber> fibers(threads);
    for (unsigned t = 0; t < threads; ++t) {
      fibers[t].index = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
      fibers[t].warp = t / kWarpSize;
    }
    const std::function<void()> call = [&] { kernel(args...); };
    body = &call;
    blockDim = block;
    gridDim = grid;
    for (unsigned bz = 0; bz < grid.z; ++bz)
      for (unsigned by = 0; by < grid.y; ++by)
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          BlockSync sync(threads);
          sync_point = &sync;
          blockIdx = {bx, by, bz};
          run_block(fibers);
        }
  }
};

}  // namespace gnnkit_emu

inline void __syncthreads() { gnnkit_emu::sync_point->block.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  gnnkit_emu::sync_point->warps[gnnkit_emu::running->warp]->arrive_and_wait();
}

// One OS thread runs every fiber, and fibers switch only at barriers: a plain read-modify-write is atomic.
template <typename T>
inline T atomicAdd(T* address, T value) {
  const T old = *address;
  *address = old + value;
  return old;
}
