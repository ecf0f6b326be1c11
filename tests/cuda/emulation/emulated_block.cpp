// The block scheduler of the emulated CUDA device (TEST HARNESS, see emulated_cuda.h). The
// grid's blocks run one after another. In a block, the threads run one after another on the
// launching thread until one reaches a barrier or warp operation; from then on the threads not
// yet run are fibers (emulated_fiber.h) on that same OS thread, and the block's threads take
// turns: a thread that must wait at a barrier switches to the next thread, in id order, that can
// go on. Also the device built-ins that need the scheduler: __syncthreads, __syncwarp, shuffles.
#include "emulated_block.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include "emulated_fiber.h"

namespace emulation::detail {
namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr int kMaxWarps = kMaxThreadsPerBlock / warpSize;
constexpr const char* kDeadlock =
    "deadlock: the block's remaining threads wait at barriers or warp operations that the others "
    "never reach (a __syncthreads, __syncwarp or shuffle not reached by all of them)";

// A barrier over the live threads of a block or warp. A thread that returns leaves it for good,
// as returned threads do not hold up barriers on the hardware. Only one thread runs at a time,
// so plain integers suffice.
struct Barrier {
  int expected = 0, arrived = 0;
  uint32_t phase = 0;  // phases completed so far

  void rearm(int participants) {
    expected = participants;
    arrived = 0;
  }
  bool arrive() {  // true when this arrival completes the phase
    if (++arrived < expected) return false;
    complete();
    return true;
  }
  void leave() {
    --expected;
    if (arrived > 0 && arrived == expected) complete();
  }

 private:
  void complete() {
    arrived = 0;
    ++phase;
  }
};

struct Warp {
  Barrier barrier;
  // A lane's value for its n-th exchange goes to slots[n % 2][lane], tagged n. Two buffers suffice:
  // before a lane writes a buffer again (exchange n + 2) every lane has passed the barrier of
  // exchange n + 1, so has read exchange n. A lane that returned leaves a stale tag behind.
  struct Slot {
    uint64_t bits = 0;
    uint64_t exchange = 0;
  };
  Slot slots[2][warpSize];
};

struct CudaThread {
  enum class State { not_started, running, waiting, joining, done };
  int id = 0;  // linear: x fastest, then y, then z
  uint3 index;
  State state = State::done;
  const Barrier* barrier = nullptr;  // while waiting: until barrier->phase moves past `phase`
  uint32_t phase = 0;
  uint64_t exchanges = 0;                // warp exchanges made so far
  ExecutionContext* context = nullptr;   // its fiber's, or the launching thread's
};

// The running block, and what the device keeps from one block to the next (fiber stacks).
struct Block {
  const KernelCall* call = nullptr;
  int threads = 0;
  void* dynamic_shared = nullptr;
  size_t dynamic_shared_bytes = 0;
  bool failed = false;
  bool parallel = false;    // the threads not run yet became fibers
  int first_parallel = 0;   // the thread that went parallel: it stays on the launching stack
  int live_fibers = 0;
  bool deadlocked = false;
  Barrier barrier;
  Warp warps[kMaxWarps];
  CudaThread cuda_threads[kMaxThreadsPerBlock];
  ExecutionContext launching_context;
  ExecutionContext fiber_contexts[kMaxThreadsPerBlock];
  std::unique_ptr<FiberStack> stacks[kMaxThreadsPerBlock];  // stacks[id] when thread id is a fiber
};

thread_local Block* current_block = nullptr;
thread_local CudaThread* current_thread = nullptr;

void become(CudaThread& thread) {
  current_thread = &thread;
  threadIdx = thread.index;
}

CudaThread& running_thread(const char* operation) {
  if (current_thread == nullptr) {
    throw std::logic_error(std::string("CUDA emulation: ") + operation + " called outside a kernel");
  }
  return *current_thread;
}

void fail(Block& block, const char* what) {
  if (!block.failed) {
    std::fprintf(stderr, "CUDA emulation: thread (%u,%u,%u) of block (%u,%u,%u) threw: %s\n", threadIdx.x,
                 threadIdx.y, threadIdx.z, blockIdx.x, blockIdx.y, blockIdx.z, what);
  }
  block.failed = true;
}

// Runs the kernel body as the current thread. A thread that throws fails the launch (the first
// failure is reported) and counts as returned.
void run_kernel(Block& block) {
  try {
    block.call->run(block.call->bound);
  } catch (const std::exception& error) {
    fail(block, error.what());
  } catch (...) {
    fail(block, "an exception not derived from std::exception");
  }
}

void leave(Block& block, CudaThread& thread) {
  block.barrier.leave();
  block.warps[thread.id / warpSize].barrier.leave();
  thread.state = CudaThread::State::done;
}

bool ready(const Block& block, const CudaThread& thread) {
  switch (thread.state) {
    case CudaThread::State::not_started: return true;
    case CudaThread::State::waiting: return thread.barrier->phase != thread.phase;
    case CudaThread::State::joining: return block.live_fibers == 0;
    default: return false;
  }
}

// Nobody can go on: every fiber is abandoned (never resumed) and the launching thread, told by
// `deadlocked`, fails the launch. Returns the launching thread's record, or null when it is the caller.
CudaThread* give_up(Block& block, CudaThread& caller) {
  block.deadlocked = true;
  for (int id = block.first_parallel + 1; id < block.threads; ++id) {
    if (block.cuda_threads[id].state == CudaThread::State::done) continue;
    block.cuda_threads[id].state = CudaThread::State::done;
    block.stacks[id]->forget_frames();
  }
  block.live_fibers = 0;
  return caller.id == block.first_parallel ? nullptr : &block.cuda_threads[block.first_parallel];
}

// Hands the OS thread to the next thread after `me` (in id order, wrapping) that can go on. `me`
// has recorded why it stops; returns when it is resumed (never, when it is done).
void switch_away(Block& block, CudaThread& me) {
  const int first = block.first_parallel, count = block.threads - first;
  CudaThread* next = nullptr;
  for (int step = 1; step < count && next == nullptr; ++step) {
    CudaThread& candidate = block.cuda_threads[first + (me.id - first + step) % count];
    if (ready(block, candidate)) next = &candidate;
  }
  if (next == nullptr && (next = give_up(block, me)) == nullptr) return;
  next->state = CudaThread::State::running;
  become(*next);
  switch_context(*me.context, *next->context, me.state == CudaThread::State::done);
}

void wait_at(Block& block, Barrier& barrier) {
  if (barrier.arrive()) return;
  CudaThread& me = *current_thread;
  me.state = CudaThread::State::waiting;
  me.barrier = &barrier;
  me.phase = barrier.phase;
  switch_away(block, me);
  if (block.deadlocked) throw std::runtime_error(kDeadlock);  // only the launching thread resumes
}

[[noreturn]] void fiber_main() {
  Block& block = *current_block;
  CudaThread& me = *current_thread;
  fiber_started(*me.context);
  run_kernel(block);
  leave(block, me);
  --block.live_fibers;
  switch_away(block, me);
  std::abort();  // a done thread is never resumed
}

// The current thread is the first to synchronise: the threads after it become fibers. Those
// before it have returned, so the barriers count the current thread and the ones after it.
void go_parallel(Block& block) {
  const int first = current_thread->id;
  for (int id = first + 1; id < block.threads; ++id) {  // first, as it may throw (out of memory)
    if (!block.stacks[id]) block.stacks[id] = std::make_unique<FiberStack>();
  }
  block.parallel = true;
  block.deadlocked = false;
  block.first_parallel = first;
  block.barrier.rearm(block.threads - first);
  for (int w = first / warpSize; w * warpSize < block.threads; ++w) {
    const int begin = std::max(first, w * warpSize), end = std::min(block.threads, (w + 1) * warpSize);
    block.warps[w].barrier.rearm(end - begin);
    for (auto& buffer : block.warps[w].slots) std::fill(std::begin(buffer), std::end(buffer), Warp::Slot{});
  }
  current_thread->context = &block.launching_context;
  for (int id = first + 1; id < block.threads; ++id) {
    block.stacks[id]->prepare(block.fiber_contexts[id], fiber_main);
    CudaThread& thread = block.cuda_threads[id];
    thread.context = &block.fiber_contexts[id];
    thread.state = CudaThread::State::not_started;
    thread.exchanges = 0;
  }
  block.live_fibers = block.threads - first - 1;
}

Block& synchronising_block(const char* operation) {
  running_thread(operation);
  Block& block = *current_block;
  if (!block.parallel) go_parallel(block);
  return block;
}

void run_block(Block& block) {
  block.parallel = false;
  if (block.dynamic_shared) std::memset(block.dynamic_shared, 0xff, block.dynamic_shared_bytes);
  for (int id = 0; id < block.threads && !block.failed; ++id) {
    CudaThread& thread = block.cuda_threads[id];
    thread.state = CudaThread::State::running;
    thread.exchanges = 0;
    become(thread);
    run_kernel(block);
    if (block.parallel) {  // this thread went parallel: wait until the fibers are done
      leave(block, thread);
      if (block.live_fibers > 0) {
        thread.state = CudaThread::State::joining;
        switch_away(block, thread);
      }
      if (block.deadlocked && !block.failed) {
        std::fprintf(stderr, "CUDA emulation: block (%u,%u,%u): %s\n", blockIdx.x, blockIdx.y, blockIdx.z, kDeadlock);
        block.failed = true;
      }
      return;
    }
  }
}

Block& the_block() {  // launches are one at a time (emulated_launch.cpp), so one Block serves all
  static Block block;
  return block;
}

}  // namespace

bool inside_kernel() { return current_block != nullptr; }

bool run_grid(const KernelCall& call, dim3 grid, dim3 shape, void* shared, size_t shared_bytes) {
  Block& block = the_block();
  block.call = &call;
  block.threads = static_cast<int>(shape.x * shape.y * shape.z);
  block.dynamic_shared = shared;
  block.dynamic_shared_bytes = shared_bytes;
  block.failed = false;
  for (unsigned id = 0; id < static_cast<unsigned>(block.threads); ++id) {
    block.cuda_threads[id].id = static_cast<int>(id);
    block.cuda_threads[id].index = {id % shape.x, id / shape.x % shape.y, id / (shape.x * shape.y)};
  }
  current_block = &block;
  blockDim = shape;
  gridDim = grid;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x && !block.failed; ++x) {
        blockIdx = {x, y, z};
        run_block(block);
      }
    }
  }
  current_block = nullptr;  // the launching thread is no CUDA thread any more
  current_thread = nullptr;
  return !block.failed;
}

uint64_t warp_exchange(uint64_t bits, int source) {
  Block& block = synchronising_block("a warp shuffle");
  CudaThread& me = *current_thread;
  Warp& warp = block.warps[me.id / warpSize];
  const uint64_t exchange = ++me.exchanges;
  Warp::Slot (&slots)[warpSize] = warp.slots[exchange % 2];
  slots[me.id % warpSize] = {bits, exchange};
  wait_at(block, warp.barrier);
  if (source < 0 || source >= warpSize || slots[source].exchange != exchange) return bits;
  return slots[source].bits;
}

int lane_id() { return running_thread("a warp shuffle").id % warpSize; }

}  // namespace emulation::detail

void* emulation::dynamic_shared_memory() {
  detail::running_thread("dynamic_shared_memory()");
  return detail::current_block->dynamic_shared;
}

void __syncthreads() {
  using namespace emulation::detail;
  Block& block = synchronising_block("__syncthreads()");
  wait_at(block, block.barrier);
}

void __syncwarp(unsigned /*mask*/) {
  using namespace emulation::detail;
  Block& block = synchronising_block("__syncwarp()");
  wait_at(block, block.warps[current_thread->id / warpSize].barrier);
}
