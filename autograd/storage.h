#pragma once
// Storage: one allocation on one device, shared by every tensor that views it.
// The allocator counts current and peak bytes and allocations per device; tests and the
// memory benchmarks read these counters (they are deterministic, unlike timings).
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "tapegrad/autograd/device.h"

namespace tg {

struct AllocatorStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t allocations = 0;  // allocations made since the last reset
  int64_t allocated_bytes = 0;  // bytes ever allocated (never reset): the profiler's deltas
};

AllocatorStats allocator_stats(Device device = kCPU);
// Starts a new measurement: peak = current, allocations = 0.
void reset_allocator_stats(Device device = kCPU);

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // The version counter (PyTorch's tensor._version): 0 for a new storage, raised by one by every
  // in-place write into it through the public API (Tensor::copy_ and fill_, optimizer steps,
  // Module::load_state_dict, ...). A tape node records the version of each tensor it saves, and
  // backward() refuses a node whose saved storage has moved on (autograd/tape.h). Atomic and
  // relaxed: a counter, not a synchronisation.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace tg
