#pragma once
// Storage: one allocation on one device, shared by every tensor that views it.
// The allocator counts current and peak bytes and allocations per device; tests and the
// memory benchmarks read these counters (they are deterministic, unlike timings).
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

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace tg
