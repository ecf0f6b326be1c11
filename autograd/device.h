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

inline std::string device_name(Device device) {
  return device.type == DeviceType::cpu ? "cpu" : "cuda:" + std::to_string(device.index);
}

}  // namespace tg
