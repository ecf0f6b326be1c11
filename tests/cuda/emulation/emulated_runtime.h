#pragma once
// The host side of the emulated CUDA device (TEST HARNESS, see emulated_cuda.h): the subset of the
// CUDA runtime API that the backend calls, and emulation::launch, which stands in for <<<...>>>.
// Enumerator values are CUDA's own, so logs and switches read the same on both builds.
#include <cstddef>
#include <tuple>
#include <type_traits>

#include "emulated_device.h"

// ---- Errors -------------------------------------------------------------------------------------
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
};
typedef enum cudaError cudaError_t;

const char* cudaGetErrorString(cudaError_t error);
// Each host thread has its own last error, as in CUDA. A launch failure (a kernel that threw) is
// also returned by the synchronising calls (cudaDeviceSynchronize, cudaStreamSynchronize,
// cudaEventSynchronize, cudaMemcpy) until cudaGetLastError clears it; unlike CUDA's it is not
// sticky beyond that, so the next launch works.
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

// ---- Device -------------------------------------------------------------------------------------
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;       // dynamic shared memory a launch gets without opting in
  size_t sharedMemPerBlockOptin;  // the most cudaFuncSetAttribute may allow
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major, minor;
  int multiProcessorCount;
};

cudaError_t cudaGetDeviceCount(int* count);  // 1
cudaError_t cudaSetDevice(int device);       // only device 0 exists
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDeviceSynchronize();

// ---- Memory -------------------------------------------------------------------------------------
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
typedef CUstream_st* cudaStream_t;  // 0 is the default stream

cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream = 0);
cudaError_t cudaMemset(void* pointer, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream = 0);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

template <typename T>
cudaError_t cudaMalloc(T** pointer, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}

// ---- Streams and events (all work is synchronous, so they only keep time) --------------------------
inline constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;

struct CUevent_st;
typedef CUevent_st* cudaEvent_t;

cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);  // stamps the host clock
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* milliseconds, cudaEvent_t start, cudaEvent_t end);

// ---- Kernel attributes --------------------------------------------------------------------------
// Dynamic shared memory beyond sharedMemPerBlock (48 KiB) needs an opt-in per kernel, up to
// sharedMemPerBlockOptin (227 KiB), exactly as on the GPU: a launch that forgets fails here too.
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value);

template <typename... Params>
cudaError_t cudaFuncSetAttribute(void (*kernel)(Params...), cudaFuncAttribute attribute, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}

// ---- Launches -----------------------------------------------------------------------------------
namespace emulation {

namespace detail {
// A kernel with its arguments bound, type-erased so that the launch machinery is not a template.
struct KernelCall {
  const void* kernel;  // identity, for cudaFuncSetAttribute's limits
  const void* bound;
  void (*run)(const void* bound);  // runs the kernel body once on the calling CUDA thread
};

void launch(const KernelCall& call, dim3 grid, dim3 block, size_t shared_bytes);
cudaError_t record_error(cudaError_t error);  // sets the calling host thread's last error
bool is_device_memory(const void* pointer, size_t bytes);  // inside one live cudaMalloc allocation
}  // namespace detail

// kernel<<<grid, block, shared_bytes>>>(args...). Returns when the whole grid has run; a bad
// configuration or a kernel that threw shows in cudaGetLastError. Each CUDA thread gets its own
// copy of the arguments, as kernel parameters are. One launch runs at a time (from any host thread).
template <typename... Params>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
            std::type_identity_t<Params>... args) {
  struct Bound {
    void (*kernel)(Params...);
    std::tuple<Params...> args;
  };
  const Bound bound{kernel, {args...}};
  const detail::KernelCall call{reinterpret_cast<const void*>(kernel), &bound, [](const void* erased) {
    const Bound& b = *static_cast<const Bound*>(erased);
    std::apply(b.kernel, b.args);  // by-value parameters: copies for this thread
  }};
  detail::launch(call, grid, block, shared_bytes);
}

// The running block's dynamic shared memory: shared_bytes of the launch, 16-byte aligned, an
// allocation of exactly that size (so AddressSanitizer sees overruns), filled with 0xff bytes
// (NaN as float or double, -1 as an integer) before each block, as real shared memory starts out
// as garbage. nullptr when the launch asked for none.
void* dynamic_shared_memory();

}  // namespace emulation
