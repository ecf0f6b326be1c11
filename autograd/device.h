#pragma once
// Where a tensor's storage lives. The CPU is always there; CUDA implements the same kernels.
#include <string>

namespace tg {

enum class DeviceType : unsigned char { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};

inline constexpr Device kCPU{DeviceType::cpu, 0};
inline constexpr int kMaxCudaDevices = 16;  // indices cuda:0 .. cuda:15

inline std::string device_name(Device device) {
  return device.type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(device.index);
}

// Where factories (empty, zeros, from_values, rand, ...) put a tensor when no device is given: the
// CPU unless a DefaultDeviceScope on this thread says otherwise (torch.set_default_device). The
// gradcheck registry runs on a GPU this way, tensors made inside its cases included.
Device default_device();
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device);
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  Device previous_;
};

// "cpu", "cuda" (= cuda:0) or "cuda:N"; anything else is a tg::Error. Whether the device exists
// is checked when it is first used.
Device parse_device(const std::string& text);

}  // namespace tg
