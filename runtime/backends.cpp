// The backend registry: which kernels serve which device.
#include <array>
#include <mutex>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"

#ifdef TAPEGRAD_BUILTIN_CUDA
namespace tg::cuda {
Backend cuda_backend();  // cuda/info.cu
}
#endif

namespace tg {
namespace {

// The backends built into this library. With CUDA (the define comes from CMake, for this file
// only), the registry names the CUDA backend itself rather than waiting for a static registrar:
// this reference is what makes the linker take cuda/'s objects out of the static library.
Backend builtin_cuda_backend() {
#ifdef TAPEGRAD_BUILTIN_CUDA
  return cuda::cuda_backend();
#else
  return Backend{};  // none; a test harness may still register one (tests/cuda/emulation/)
#endif
}

struct Registry {
  std::mutex mutex;
  std::array<Backend, 2> backends{cpu_backend(), builtin_cuda_backend()};  // indexed by DeviceType
};

Registry& registry() {
  static Registry instance;  // built on first use, so registrars may run in any order
  return instance;
}

size_t slot(DeviceType type) { return static_cast<size_t>(type); }

}  // namespace

void register_backend(DeviceType type, const Backend& backend) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  r.backends[slot(type)] = backend;
}

const Backend* find_backend(DeviceType type) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const Backend& backend = r.backends[slot(type)];
  return backend.kernels_for != nullptr ? &backend : nullptr;
}

Kernels& kernels(Device device) {
  if (device.type == DeviceType::cpu) {
    static Kernels& cpu = cpu_backend().kernels_for(0);  // the hot path: no lock, no lookup
    return cpu;
  }
  const Backend* backend = find_backend(device.type);
  if (backend == nullptr) {
    fail("device ", device_name(device), ": this build of tapegrad has no CUDA kernels (built "
         "without CUDA)");
  }
  const int count = backend->device_count();
  if (device.index < 0 || device.index >= count) {
    if (count == 0) fail("device ", device_name(device), ": no CUDA device is present");
    fail("device ", device_name(device), ": only ", count, " CUDA device(s) present (cuda:0 to cuda:",
         count - 1, ")");
  }
  return backend->kernels_for(device.index);
}

MathModes& math_modes() {
  static MathModes modes;
  return modes;
}

}  // namespace tg
