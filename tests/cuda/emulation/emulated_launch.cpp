// Launches on the emulated CUDA device (TEST HARNESS, see emulated_cuda.h): checks a launch's
// configuration as CUDA does, gives it its dynamic shared memory and runs its grid
// (emulated_block.cpp), one launch at a time.
#include <cstdio>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "emulated_block.h"

namespace emulation::detail {
namespace {

constexpr size_t kDefaultSharedBytes = 48 * 1024;  // cudaDeviceProp::sharedMemPerBlock
constexpr size_t kOptInSharedBytes = 227 * 1024;   // cudaDeviceProp::sharedMemPerBlockOptin

bool valid_shape(dim3 grid, dim3 block) {
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  return block.x >= 1 && block.y >= 1 && block.z >= 1 && block.x <= 1024 && block.y <= 1024 &&
         block.z <= 64 && threads <= 1024 && grid.x >= 1 && grid.y >= 1 && grid.z >= 1 &&
         grid.x <= 2147483647u && grid.y <= 65535 && grid.z <= 65535;
}

struct AlignedDelete {
  void operator()(void* pointer) const { ::operator delete(pointer, std::align_val_t{16}); }
};

struct Launcher {
  std::mutex mutex;  // one launch at a time: the device has one block's state
  std::unordered_map<const void*, size_t> shared_limits;  // kernel -> opted-in dynamic shared bytes
};

Launcher& launcher() {
  static Launcher instance;
  return instance;
}

}  // namespace

void launch(const KernelCall& call, dim3 grid, dim3 shape, size_t shared_bytes) {
  if (inside_kernel()) {
    throw std::logic_error("CUDA emulation: a kernel cannot launch kernels (no dynamic parallelism)");
  }
  Launcher& state = launcher();
  std::lock_guard lock(state.mutex);
  if (!valid_shape(grid, shape)) {
    std::fprintf(stderr, "CUDA emulation: launch of grid (%u,%u,%u) x block (%u,%u,%u) is invalid "
                 "(at most 1024 threads a block; block z <= 64; grid y, z <= 65535; none 0)\n",
                 grid.x, grid.y, grid.z, shape.x, shape.y, shape.z);
    record_error(cudaErrorInvalidConfiguration);
    return;
  }
  const auto limit = state.shared_limits.find(call.kernel);
  const size_t shared_limit = limit == state.shared_limits.end() ? kDefaultSharedBytes : limit->second;
  if (shared_bytes > shared_limit) {
    std::fprintf(stderr, "CUDA emulation: launch asks for %zu bytes of dynamic shared memory, the "
                 "kernel's limit is %zu (raise it with cudaFuncSetAttribute, up to %zu)\n",
                 shared_bytes, shared_limit, kOptInSharedBytes);
    record_error(cudaErrorInvalidValue);
    return;
  }
  // Exactly the bytes asked, so that AddressSanitizer sees a kernel overrun them.
  const std::unique_ptr<void, AlignedDelete> shared(
      shared_bytes ? ::operator new(shared_bytes, std::align_val_t{16}) : nullptr);
  if (!run_grid(call, grid, shape, shared.get(), shared_bytes)) record_error(cudaErrorLaunchFailure);
}

}  // namespace emulation::detail

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  using namespace emulation::detail;
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > kOptInSharedBytes) {
    return record_error(cudaErrorInvalidValue);
  }
  Launcher& state = launcher();
  std::lock_guard lock(state.mutex);
  state.shared_limits[kernel] = static_cast<size_t>(value);
  return cudaSuccess;
}
