// CUDA devices for the registry and `tapegrad info`: how many there are, one line describing
// each, one CudaKernels per device, the TF32 switch, synchronize(), and the backend's entry for
// the registry (cuda_backend()).
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cuda/device_code.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

// cudaGetDeviceCount, with any error (no driver, no device, a driver too old) read as 0 devices.
// The error is cleared so that it does not resurface from the next cudaGetLastError().
int query_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count < kMaxCudaDevices ? count : kMaxCudaDevices;
}

// A CUDA version number (1000 major + 10 minor) as "major.minor": 13000 -> "13.0".
std::string version_text(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

// The cuBLAS version of device `index` (from a handle made on it), or "unknown" when no handle can
// be made there.
std::string cublas_version_text(int index) {
  DeviceGuard guard(index);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    (void)cudaGetLastError();
    return "unknown";
  }
  int version = 0;
  const cublasStatus_t status = cublasGetVersion(handle, &version);
  cublasDestroy(handle);
  return status == CUBLAS_STATUS_SUCCESS ? std::to_string(version) : "unknown";
}

// The registry's entry point: kernels_for, returning the Kernels interface.
Kernels& backend_kernels(int device_index) { return kernels_for(device_index); }

}  // namespace

// Counted once: the devices present do not change while the process runs, and the registry asks
// on every kernels(device) lookup.
int device_count() {
  static const int count = query_device_count();
  return count;
}

// "cuda:0  NVIDIA H200, 139.8 GiB, compute capability 9.0, driver 13.0, runtime 13.0,
// cuBLAS 130000", one line a device, or "no CUDA device" when there is none.
std::vector<std::string> describe_devices() {
  const int count = device_count();
  if (count == 0) return {"no CUDA device"};
  int driver = 0, runtime = 0;
  check_cuda(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  check_cuda(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
  std::vector<std::string> lines;
  for (int index = 0; index < count; ++index) {
    cudaDeviceProp properties{};
    check_cuda(cudaGetDeviceProperties(&properties, index), "cudaGetDeviceProperties");
    char memory[32];
    std::snprintf(memory, sizeof memory, "%.1f GiB",
                  static_cast<double>(properties.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    lines.push_back("cuda:" + std::to_string(index) + "  " + properties.name + ", " + memory +
                    ", compute capability " + std::to_string(properties.major) + "." +
                    std::to_string(properties.minor) + ", driver " + version_text(driver) +
                    ", runtime " + version_text(runtime) + ", cuBLAS " +
                    cublas_version_text(index));
  }
  return lines;
}

// One CudaKernels per device index, made on first use. std::call_once makes the first use
// thread-safe and later ones lock-free. The instances are never destroyed: tensors released
// during static destruction may still return their memory through them.
CudaKernels& kernels_for(int device_index) {
  TG_CHECK(device_index >= 0 && device_index < kMaxCudaDevices, "device cuda:", device_index,
           ": CUDA device indices run from 0 to ", kMaxCudaDevices - 1);
  static std::once_flag made[kMaxCudaDevices];
  static CudaKernels* instances[kMaxCudaDevices] = {};
  std::call_once(made[device_index],
                 [device_index] { instances[device_index] = new CudaKernels(device_index); });
  return *instances[device_index];
}

void allow_tf32(bool allowed) { math_modes().allow_tf32 = allowed; }

// Waits for every kernel and copy queued on this device so far (timings; errors of earlier
// asynchronous work surface here).
void CudaKernels::synchronize() {
  DeviceGuard guard(device_index());
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

// The backend as the registry knows it. runtime/backends.cpp puts it in the registry when the
// library is built with CUDA (no static registrar: an unreferenced object of a static library
// would be dropped by the linker); the tests' emulated device registers it explicitly.
Backend cuda_backend() {
  return Backend{"cuda", &device_count, &backend_kernels, &describe_devices};
}

}  // namespace tg::cuda
