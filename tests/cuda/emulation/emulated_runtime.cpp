// The runtime API of the emulated CUDA device (TEST HARNESS, see emulated_cuda.h): errors, device
// memory (host memory, tracked so that copies can check their device side), streams and events
// (everything is synchronous), and the device's description.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <utility>

#include "emulated_cuda.h"

namespace {

constexpr size_t kDeviceMemoryBytes = size_t{8} << 30;  // what cudaMemGetInfo reports as total
constexpr size_t kAllocationAlignment = 256;             // as cudaMalloc guarantees
constexpr int kVersion = 13000;                          // CUDA 13.0, driver and runtime alike

thread_local cudaError_t last_error = cudaSuccess;

// What synchronising calls report: a failed launch, until cudaGetLastError clears it.
cudaError_t pending_launch_failure() {
  return last_error == cudaErrorLaunchFailure ? cudaErrorLaunchFailure : cudaSuccess;
}

// Live cudaMalloc allocations by start address.
struct DeviceMemory {
  std::mutex mutex;
  std::map<const char*, size_t> allocations;
  size_t allocated_bytes = 0;
};

// Never destroyed: device memory that a program keeps to the end (a caching allocator's) stays
// reachable from here, so LeakSanitizer does not report it as leaked host memory.
DeviceMemory& device_memory() {
  static DeviceMemory& memory = *new DeviceMemory;
  return memory;
}

// A valid device range for a copy of `bytes`: none needed when nothing is copied.
bool device_range(const void* pointer, size_t bytes) {
  return bytes == 0 || emulation::detail::is_device_memory(pointer, bytes);
}

}  // namespace

struct CUstream_st {};

struct CUevent_st {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
};

cudaError_t emulation::detail::record_error(cudaError_t error) {
  if (error != cudaSuccess) last_error = error;
  return error;
}

bool emulation::detail::is_device_memory(const void* pointer, size_t bytes) {
  const auto* start = static_cast<const char*>(pointer);
  DeviceMemory& memory = device_memory();
  std::lock_guard lock(memory.mutex);
  auto after = memory.allocations.upper_bound(start);
  if (after == memory.allocations.begin()) return false;
  const auto& [base, size] = *std::prev(after);
  return start >= base && bytes <= size && static_cast<size_t>(start - base) <= size - bytes;
}

// ---- Errors -------------------------------------------------------------------------------------
const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unrecognized error code";
}

cudaError_t cudaGetLastError() { return std::exchange(last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return last_error; }

using emulation::detail::record_error;

// ---- Device -------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return record_error(cudaErrorInvalidValue);
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : record_error(cudaErrorInvalidDevice);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return record_error(cudaErrorInvalidValue);
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device) {
  if (properties == nullptr) return record_error(cudaErrorInvalidValue);
  if (device != 0) return record_error(cudaErrorInvalidDevice);
  cudaDeviceProp description{};
  std::snprintf(description.name, sizeof description.name, "tapegrad emulated device");
  description.totalGlobalMem = kDeviceMemoryBytes;
  description.sharedMemPerBlock = 48 * 1024;
  description.sharedMemPerBlockOptin = 227 * 1024;
  description.warpSize = warpSize;
  description.maxThreadsPerBlock = 1024;
  description.maxThreadsDim[0] = description.maxThreadsDim[1] = 1024;
  description.maxThreadsDim[2] = 64;
  description.maxGridSize[0] = 2147483647;
  description.maxGridSize[1] = description.maxGridSize[2] = 65535;
  description.major = 9;
  description.minor = 0;
  description.multiProcessorCount = 1;  // blocks run one at a time
  *properties = description;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return record_error(cudaErrorInvalidValue);
  *version = kVersion;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

cudaError_t cudaDeviceSynchronize() { return pending_launch_failure(); }

// ---- Memory -------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  if (pointer == nullptr) return record_error(cudaErrorInvalidValue);
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  DeviceMemory& memory = device_memory();
  std::lock_guard lock(memory.mutex);
  if (bytes > kDeviceMemoryBytes - memory.allocated_bytes) return record_error(cudaErrorMemoryAllocation);
  void* allocation = ::operator new(bytes, std::align_val_t{kAllocationAlignment}, std::nothrow);
  if (allocation == nullptr) return record_error(cudaErrorMemoryAllocation);
  memory.allocations.emplace(static_cast<const char*>(allocation), bytes);
  memory.allocated_bytes += bytes;
  *pointer = allocation;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (pointer == nullptr) return cudaSuccess;
  DeviceMemory& memory = device_memory();
  std::lock_guard lock(memory.mutex);
  const auto allocation = memory.allocations.find(static_cast<const char*>(pointer));
  if (allocation == memory.allocations.end()) return record_error(cudaErrorInvalidValue);
  memory.allocated_bytes -= allocation->second;
  memory.allocations.erase(allocation);
  ::operator delete(pointer, std::align_val_t{kAllocationAlignment});
  return cudaSuccess;
}

// The side named "device" by `kind` must be device memory, as on a GPU; cudaMemcpyDefault accepts
// any pointers (unified addressing).
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  bool valid = false;
  switch (kind) {
    case cudaMemcpyHostToHost: valid = true; break;
    case cudaMemcpyHostToDevice: valid = device_range(dst, bytes); break;
    case cudaMemcpyDeviceToHost: valid = device_range(src, bytes); break;
    case cudaMemcpyDeviceToDevice: valid = device_range(dst, bytes) && device_range(src, bytes); break;
    case cudaMemcpyDefault: valid = true; break;
  }
  if (!valid) return record_error(cudaErrorInvalidValue);
  if (bytes != 0) std::memcpy(dst, src, bytes);
  return pending_launch_failure();
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  if (!device_range(pointer, bytes)) return record_error(cudaErrorInvalidValue);
  if (bytes != 0) std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t) {
  return cudaMemset(pointer, value, bytes);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return record_error(cudaErrorInvalidValue);
  DeviceMemory& memory = device_memory();
  std::lock_guard lock(memory.mutex);
  *free_bytes = kDeviceMemoryBytes - memory.allocated_bytes;
  *total_bytes = kDeviceMemoryBytes;
  return cudaSuccess;
}

// ---- Streams and events -------------------------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || flags > cudaStreamNonBlocking) return record_error(cudaErrorInvalidValue);
  *stream = new CUstream_st;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return record_error(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return pending_launch_failure(); }

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  if (event == nullptr) return record_error(cudaErrorInvalidValue);
  *event = new CUevent_st;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return record_error(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  if (event == nullptr) return record_error(cudaErrorInvalidResourceHandle);
  event->time = std::chrono::steady_clock::now();
  event->recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return record_error(cudaErrorInvalidResourceHandle);
  return pending_launch_failure();
}

cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end) {
  if (milliseconds == nullptr) return record_error(cudaErrorInvalidValue);
  if (start == nullptr || end == nullptr || !start->recorded || !end->recorded) {
    return record_error(cudaErrorInvalidResourceHandle);
  }
  *milliseconds = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}
