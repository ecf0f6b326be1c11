// Tests of the emulated CUDA device (tests/cuda/emulation): its runtime API (memory, copies,
// device description, streams, events) and the device math helpers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "device_array.h"

namespace {

TEST_CASE("emulation: device memory and copies", "[cuda][emulation]") {
  size_t free_before = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  void* block = nullptr;
  REQUIRE(cudaMalloc(&block, 1000) == cudaSuccess);
  CHECK(reinterpret_cast<uintptr_t>(block) % 256 == 0);
  size_t free_after = 0;
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_before - free_after == 1000);

  std::vector<int> host(250);
  for (int i = 0; i < 250; ++i) host[i] = i * i;
  REQUIRE(cudaMemcpy(block, host.data(), 1000, cudaMemcpyHostToDevice) == cudaSuccess);
  DeviceArray<int> copy(250);
  REQUIRE(cudaMemcpy(copy.get(), block, 1000, cudaMemcpyDeviceToDevice) == cudaSuccess);
  CHECK(copy.to_host() == host);
  REQUIRE(cudaMemset(copy.get() + 10, 0xff, 8) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(copy.get() + 20, 0, 4) == cudaSuccess);
  host[10] = host[11] = -1;
  host[20] = 0;
  CHECK(copy.to_host() == host);

  // The side that `kind` calls device memory must be: a host pointer there fails, as on a GPU.
  std::vector<int> other(250);
  CHECK(cudaMemcpy(other.data(), host.data(), 1000, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(other.data(), host.data(), 1000, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpyAsync(block, host.data(), 1001, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);  // overruns
  CHECK(cudaMemset(other.data(), 0, 4) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(other.data(), host.data(), 1000, cudaMemcpyDefault) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaSuccess);

  REQUIRE(cudaFree(block) == cudaSuccess);
  CHECK(cudaFree(block) == cudaErrorInvalidValue);  // freed twice
  CHECK(cudaFree(nullptr) == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  CHECK(free_before - free_after == copy.bytes());  // only `copy` is left
  CHECK(cudaMalloc(&block, total + 1) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
}

TEST_CASE("emulation: device description", "[cuda][emulation]") {
  int count = 0, device = -1, version = 0;
  REQUIRE(cudaGetDeviceCount(&count) == cudaSuccess);
  CHECK(count == 1);
  CHECK(cudaSetDevice(0) == cudaSuccess);
  CHECK(cudaSetDevice(1) == cudaErrorInvalidDevice);
  CHECK(cudaGetLastError() == cudaErrorInvalidDevice);
  REQUIRE(cudaGetDevice(&device) == cudaSuccess);
  CHECK(device == 0);
  cudaDeviceProp properties;
  REQUIRE(cudaGetDeviceProperties(&properties, 0) == cudaSuccess);
  CHECK(std::string(properties.name) == "tapegrad emulated device");
  CHECK(properties.major == 9);
  CHECK(properties.minor == 0);
  CHECK(properties.warpSize == 32);
  CHECK(properties.maxThreadsPerBlock == 1024);
  CHECK(properties.sharedMemPerBlock == 49152);
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  CHECK(properties.totalGlobalMem == total);
  REQUIRE(cudaDriverGetVersion(&version) == cudaSuccess);
  CHECK(version >= 12000);
  REQUIRE(cudaRuntimeGetVersion(&version) == cudaSuccess);
  CHECK(version >= 12000);
  CHECK(std::string(cudaGetErrorString(cudaErrorLaunchFailure)) == "unspecified launch failure");
}

TEST_CASE("emulation: streams and events", "[cuda][emulation]") {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, end = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&end) == cudaSuccess);
  float milliseconds = -1;
  CHECK(cudaEventElapsedTime(&milliseconds, start, end) == cudaErrorInvalidResourceHandle);  // not recorded
  REQUIRE(cudaEventRecord(start, stream) == cudaSuccess);
  DeviceArray<double> data(1000, 1.0);
  REQUIRE(cudaEventRecord(end, stream) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(end) == cudaSuccess);
  REQUIRE(cudaEventElapsedTime(&milliseconds, start, end) == cudaSuccess);
  CHECK(milliseconds >= 0.0f);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(cudaEventDestroy(start) == cudaSuccess);
  CHECK(cudaEventDestroy(end) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
}

TEST_CASE("emulation: device math helpers", "[cuda][emulation]") {
  CHECK(rsqrtf(4.0f) == 0.5f);
  CHECK(rsqrt(16.0) == 0.25);
  CHECK(__expf(0.0f) == 1.0f);
  CHECK(__logf(1.0f) == 0.0f);
  CHECK(__fdividef(3.0f, 2.0f) == 1.5f);
  CHECK(__float_as_int(1.0f) == 0x3f800000);
  CHECK(__int_as_float(0x3f800000) == 1.0f);
  CHECK(__float_as_uint(-0.0f) == 0x80000000u);
  CHECK(__uint_as_float(0x80000000u) == -0.0f);
  CHECK(__double_as_longlong(1.0) == 0x3ff0000000000000LL);
  CHECK(__longlong_as_double(0x3ff0000000000000LL) == 1.0);
  // CUDA's unqualified min/max, including the int64_t and size_t types of this code base.
  CHECK(min(3, -5) == -5);
  CHECK(max(3u, 5u) == 5u);
  CHECK(max(int64_t{1} << 40, int64_t{7}) == int64_t{1} << 40);
  CHECK(min(size_t{4}, size_t{9}) == 4u);
  CHECK(min(2LL, 3LL) == 2LL);
  CHECK(max(1.5f, NAN) == 1.5f);  // fmaxf: a NaN operand gives the other
  CHECK(min(-1.0, 2.0) == -1.0);
  CHECK(std::isfinite(max(0.0f, 1.0f)));
}

}  // namespace
