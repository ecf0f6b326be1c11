// Tests of the emulated CUDA device (tests/cuda/emulation): shared memory, launch geometry, bad
// launches and kernels that throw. Kernels go through cuda/device_code.h as the backend's do.
#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "tapegrad/cuda/device_code.h"
#include "device_array.h"

using tg::cuda::LaunchShape;
using tg::cuda::launch;

namespace {

// ---- Shared memory ------------------------------------------------------------------------------
// Reverses each block's chunk of x through dynamic shared memory. Before writing it, each thread
// reads its word of the buffer (it must be the 0xff poison in every block) and thread 0 records
// the buffer's address.
__global__ void reverse_chunks(const float* x, int n, float* y, unsigned* first_words, uintptr_t* addresses) {
  float* chunk = tg::cuda::dynamic_shared<float>();
  const int t = threadIdx.x, start = blockIdx.x * blockDim.x;
  first_words[start + t] = __float_as_uint(chunk[t]);
  if (t == 0) addresses[blockIdx.x] = reinterpret_cast<uintptr_t>(chunk);
  __syncthreads();  // everyone has read the poison before anyone writes
  chunk[t] = start + t < n ? x[start + t] : 0.0f;
  __syncthreads();
  const int mirror = start + blockDim.x - 1 - t;
  if (mirror < n) y[mirror] = chunk[t];
}

TEST_CASE("emulation: dynamic shared memory", "[cuda][emulation]") {
  const int n = 1000, threads = 128;
  const unsigned blocks = tg::cuda::blocks_for(n, threads);
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<float>(i);
  const DeviceArray<float> device_x(x);
  DeviceArray<float> y(n);
  DeviceArray<unsigned> first_words(blocks * threads);
  DeviceArray<uintptr_t> addresses(blocks);
  launch("reverse_chunks", reverse_chunks, LaunchShape{blocks, threads, threads * sizeof(float)},
         device_x.get(), n, y.get(), first_words.get(), addresses.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<float> expected(n);
  for (int start = 0; start < n; start += threads) {
    for (int t = 0; t < threads; ++t) {
      const int mirror = start + threads - 1 - t;
      if (mirror < n) expected[mirror] = start + t < n ? x[start + t] : 0.0f;
    }
  }
  CHECK(y.to_host() == expected);
  CHECK(first_words.to_host() == std::vector<unsigned>(blocks * threads, 0xffffffffu));
  for (uintptr_t address : addresses.to_host()) CHECK(address % 16 == 0);
}

// Two kernels with a __shared__ array of the same name: each must get its own.
__global__ void mirror_tile_a(int* out, uintptr_t* address) {
  __shared__ int tile[64];
  tile[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[63 - threadIdx.x];
  if (threadIdx.x == 0) *address = reinterpret_cast<uintptr_t>(tile);
}

__global__ void mirror_tile_b(int* out, uintptr_t* address) {
  __shared__ int tile[64];
  tile[threadIdx.x] = 1000 + threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = tile[63 - threadIdx.x];
  if (threadIdx.x == 0) *address = reinterpret_cast<uintptr_t>(tile);
}

TEST_CASE("emulation: static shared arrays of two kernels do not interfere", "[cuda][emulation]") {
  DeviceArray<int> out_a(64), out_b(64);
  DeviceArray<uintptr_t> addresses(2);
  std::vector<int> expected_a(64), expected_b(64);
  for (int t = 0; t < 64; ++t) {
    expected_a[t] = 63 - t;
    expected_b[t] = 1000 + 63 - t;
  }
  for (int round = 0; round < 2; ++round) {
    launch("mirror_tile_a", mirror_tile_a, LaunchShape{1, 64}, out_a.get(), addresses.get());
    launch("mirror_tile_b", mirror_tile_b, LaunchShape{1, 64}, out_b.get(), addresses.get() + 1);
    REQUIRE(cudaGetLastError() == cudaSuccess);
    CHECK(out_a.to_host() == expected_a);
    CHECK(out_b.to_host() == expected_b);
  }
  const std::vector<uintptr_t> tiles = addresses.to_host();
  CHECK(tiles[0] != tiles[1]);
}

// ---- Geometry -----------------------------------------------------------------------------------
// out[row][col] = row * 1000 + col, a 2-D grid of 2-D blocks over a rows x cols matrix, guarded.
__global__ void fill_coordinates(int rows, int cols, int* out) {
  const unsigned col = blockIdx.x * blockDim.x + threadIdx.x, row = blockIdx.y * blockDim.y + threadIdx.y;
  if (row < static_cast<unsigned>(rows) && col < static_cast<unsigned>(cols)) out[row * cols + col] = row * 1000 + col;
}

// Counts every (block, thread) pair of a 3-D launch, and records which thread is lane 0 of each
// thread's warp (warps are made of consecutive linear thread ids, x fastest).
__global__ void visit_3d(int* visits, int* warp_leaders) {
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned thread = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned index = block * blockDim.x * blockDim.y * blockDim.z + thread;
  atomicAdd(&visits[index], 1);
  warp_leaders[index] = __shfl_sync(0xffffffffu, static_cast<int>(thread), 0);
}

TEST_CASE("emulation: 2-D and 3-D grid and block indexing", "[cuda][emulation]") {
  const int rows = 13, cols = 40;
  DeviceArray<int> out(rows * cols, -1);
  launch("fill_coordinates", fill_coordinates, LaunchShape{dim3(3, 2), dim3(16, 8)}, rows, cols, out.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<int> expected(rows * cols);
  for (int row = 0; row < rows; ++row) {
    for (int col = 0; col < cols; ++col) expected[row * cols + col] = row * 1000 + col;
  }
  CHECK(out.to_host() == expected);

  const dim3 grid(2, 3, 2), block(4, 4, 5);  // 80 threads: warps of 32, 32 and 16
  const int blocks = 12, threads = 80;
  DeviceArray<int> visits(blocks * threads, 0), leaders(blocks * threads);
  launch("visit_3d", visit_3d, LaunchShape{grid, block}, visits.get(), leaders.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  CHECK(visits.to_host() == std::vector<int>(blocks * threads, 1));
  std::vector<int> expected_leaders(blocks * threads);
  for (int i = 0; i < blocks * threads; ++i) expected_leaders[i] = i % threads / 32 * 32;
  CHECK(leaders.to_host() == expected_leaders);
}

// ---- Bad launches and failing kernels ------------------------------------------------------------
__global__ void mark(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

TEST_CASE("emulation: invalid launch configurations report errors", "[cuda][emulation]") {
  DeviceArray<int> out(2048, 0);
  for (const dim3 block : {dim3(1025), dim3(32, 33), dim3(1, 1, 65), dim3(0)}) {
    emulation::launch(mark, dim3(1), block, 0, out.get());
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  }
  emulation::launch(mark, dim3(1, 65536), dim3(1), 0, out.get());
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(out.to_host() == std::vector<int>(2048, 0));  // none of them ran

  // Dynamic shared memory beyond 48 KiB needs the kernel's opt-in, as on a GPU.
  const size_t large = 100 * 1024;
  emulation::launch(mark, dim3(1), dim3(1), large, out.get());
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(cudaFuncSetAttribute(mark, cudaFuncAttributeMaxDynamicSharedMemorySize, 300 * 1024) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  REQUIRE(cudaFuncSetAttribute(mark, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(large)) == cudaSuccess);
  emulation::launch(mark, dim3(1), dim3(1), large, out.get());
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(out.to_host()[0] == 1);
}

// In block 0, thread `thrower` throws: before any barrier, or between two when `after_barrier`.
__global__ void throw_in_block_zero(int thrower, bool after_barrier, int* out) {
  if (after_barrier) __syncthreads();
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) == thrower) throw std::runtime_error("deliberate failure");
  if (after_barrier) __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

TEST_CASE("emulation: an exception inside a kernel fails the launch, and the next one works", "[cuda][emulation]") {
  const int blocks = 3, threads = 64;
  for (const bool after_barrier : {false, true}) {
    INFO((after_barrier ? "thrown between barriers" : "thrown before any barrier"));
    DeviceArray<int> out(blocks * threads, 0);
    emulation::launch(throw_in_block_zero, dim3(blocks), dim3(threads), 0, 40, after_barrier, out.get());
    CHECK(cudaDeviceSynchronize() == cudaErrorLaunchFailure);
    CHECK(cudaPeekAtLastError() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
    CHECK(cudaGetLastError() == cudaSuccess);
    const std::vector<int> failed = out.to_host();
    for (int i = threads; i < blocks * threads; ++i) CHECK(failed[i] == 0);  // no block after the failure ran

    emulation::launch(throw_in_block_zero, dim3(blocks), dim3(threads), 0, -1, after_barrier, out.get());
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK(out.to_host() == std::vector<int>(blocks * threads, 1));
  }
}

// Even threads wait at __syncthreads, odd ones at __syncwarp: neither barrier can ever complete.
__global__ void divergent_barriers(int* out) {
  if (threadIdx.x % 2 == 0) __syncthreads();
  else __syncwarp();
  out[threadIdx.x] = 1;
}

TEST_CASE("emulation: a deadlocked block fails the launch instead of hanging", "[cuda][emulation]") {
  DeviceArray<int> out(64, 0);
  emulation::launch(divergent_barriers, dim3(1), dim3(64), 0, out.get());
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  emulation::launch(mark, dim3(1), dim3(64), 0, out.get());
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(out.to_host() == std::vector<int>(64, 1));
}

TEST_CASE("emulation: device built-ins outside a kernel are an error", "[cuda][emulation]") {
  CHECK_THROWS_AS(__syncthreads(), std::logic_error);
  CHECK_THROWS_AS(__shfl_sync(0xffffffffu, 1, 0), std::logic_error);
  CHECK_THROWS_AS(emulation::dynamic_shared_memory(), std::logic_error);
}

}  // namespace
