#include "tapegrad/autograd/storage.h"

#include <algorithm>
#include <atomic>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"

namespace tg {
namespace {

struct Counters {
  std::atomic<int64_t> current{0}, peak{0}, allocations{0}, allocated{0};
};

// Slot 0 is the CPU, slots 1.. the CUDA devices by index (parse_device bounds the index).
Counters& counters(Device device) {
  static Counters per_device[1 + kMaxCudaDevices];
  if (device.type == DeviceType::cpu) return per_device[0];
  if (device.index < 0 || device.index >= kMaxCudaDevices) {  // (the message only on failure)
    fail("allocator: no counters for device ", device_name(device));
  }
  return per_device[1 + device.index];
}

}  // namespace

AllocatorStats allocator_stats(Device device) {
  Counters& c = counters(device);
  return {c.current.load(), c.peak.load(), c.allocations.load(), c.allocated.load()};
}

void reset_allocator_stats(Device device) {
  Counters& c = counters(device);
  c.peak = c.current.load();
  c.allocations = 0;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = kernels(device).allocate(std::max<size_t>(nbytes, 1));
  Counters& c = counters(device);
  const int64_t now = c.current += static_cast<int64_t>(nbytes);
  int64_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {}
  ++c.allocations;
  c.allocated += static_cast<int64_t>(nbytes);
}

Storage::~Storage() {
  kernels(device_).deallocate(data_, std::max<size_t>(nbytes_, 1));
  counters(device_).current -= static_cast<int64_t>(nbytes_);
}

}  // namespace tg
