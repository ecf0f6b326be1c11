#include "tapegrad/autograd/device.h"

#include <charconv>

#include "tapegrad/autograd/error.h"

namespace tg {

namespace {
thread_local Device current_default = kCPU;
}

Device default_device() { return current_default; }
DefaultDeviceScope::DefaultDeviceScope(Device device) : previous_(current_default) {
  current_default = device;
}
DefaultDeviceScope::~DefaultDeviceScope() { current_default = previous_; }

Device parse_device(const std::string& text) {
  if (text == "cpu") return kCPU;
  if (text == "cuda") return {DeviceType::cuda, 0};
  if (text.rfind("cuda:", 0) == 0) {
    const char* first = text.data() + 5;
    const char* last = text.data() + text.size();
    int index = -1;
    const auto [end, error] = std::from_chars(first, last, index);
    if (error == std::errc() && end == last && first != last && index >= 0 &&
        index < kMaxCudaDevices) {
      return {DeviceType::cuda, index};
    }
  }
  fail("device '", text, "' is not one of cpu, cuda, cuda:N (N from 0 to ", kMaxCudaDevices - 1,
       ")");
}

}  // namespace tg
