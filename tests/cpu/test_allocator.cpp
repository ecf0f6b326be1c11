// The CPU allocator's cache of freed blocks (cpu/allocator.h): a freed block of the same size is
// handed out again (a token's rows of activations too), blocks under 256 bytes and FastPathsOff
// bypass it, the tensor counters are not changed by it, and empty_cache frees what it holds;
// blocks from 2 MiB on start on a huge page.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/cpu/allocator.h"
#include "tapegrad/cpu/features.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
using namespace tg::cpu;

TEST_CASE("CPU allocator: a freed large block is reused for the same size", "[allocator]") {
  if (!fast_paths_enabled()) return;  // (the cache is off where the fast paths are)
  cpu_empty_cache();
  const size_t size = 3 * kCpuCachedMinBytes + 8;  // rounded up to 64 bytes inside
  void* first = allocate_block(size);
  free_block(first, size);
  const CpuCacheStats idle = cpu_cache_stats();
  REQUIRE(idle.idle_blocks == 1);
  REQUIRE(idle.idle_bytes == static_cast<int64_t>((size + 63) / 64 * 64));
  void* second = allocate_block(size);
  REQUIRE(second == first);
  REQUIRE(cpu_cache_stats().hits == idle.hits + 1);
  REQUIRE(cpu_cache_stats().idle_blocks == 0);
  void* other = allocate_block(size + 4096);  // another size: not that block
  REQUIRE(other != first);
  free_block(second, size);
  free_block(other, size + 4096);
  REQUIRE(cpu_cache_stats().idle_blocks == 2);
  cpu_empty_cache();
  REQUIRE(cpu_cache_stats().idle_blocks == 0);
  REQUIRE(cpu_cache_stats().idle_bytes == 0);
}

TEST_CASE("CPU allocator: blocks from 2 MiB on start on a 2 MiB boundary, smaller ones on 64 bytes",
          "[allocator]") {
  cpu_empty_cache();
  const auto offset = [](void* ptr, size_t unit) { return reinterpret_cast<uintptr_t>(ptr) % unit; };
  for (const size_t size : {kCpuHugePageBytes, kCpuHugePageBytes + 64 * 3 + 5, 3 * kCpuHugePageBytes}) {
    INFO(size << " bytes");
    void* block = allocate_block(size);
    REQUIRE(offset(block, kCpuHugePageBytes) == 0);
    std::memset(block, 0x5a, size);  // every byte of it is there
    free_block(block, size);
  }
  for (const size_t size : {size_t(100), kCpuCachedMinBytes + 1, kCpuHugePageBytes - 64}) {
    INFO(size << " bytes");
    void* block = allocate_block(size);
    REQUIRE(offset(block, 64) == 0);
    std::memset(block, 0x5a, size);
    free_block(block, size);
  }
  cpu_empty_cache();
}

TEST_CASE("CPU allocator: a token's small tensors come back from the cache", "[allocator]") {
  if (!fast_paths_enabled()) return;
  // Incremental decoding allocates rows like these for every token: [1, 128] activations (512
  // bytes) and a head's [1, 1, 32] output (128 bytes, under kCpuCachedMinBytes: malloc's).
  cpu_empty_cache();
  { const Tensor row = zeros({1, 128}, DType::f32); }
  REQUIRE(cpu_cache_stats().idle_blocks == 1);
  const int64_t hits = cpu_cache_stats().hits;
  { const Tensor again = zeros({1, 128}, DType::f32); }
  REQUIRE(cpu_cache_stats().hits == hits + 1);
  { const Tensor head = zeros({1, 1, 32}, DType::f32); }
  REQUIRE(cpu_cache_stats().idle_blocks == 1);
  cpu_empty_cache();
}

TEST_CASE("CPU allocator: small blocks and FastPathsOff bypass the cache", "[allocator]") {
  cpu_empty_cache();
  void* small = allocate_block(kCpuCachedMinBytes / 2);
  free_block(small, kCpuCachedMinBytes / 2);
  REQUIRE(cpu_cache_stats().idle_blocks == 0);
  {
    const FastPathsOff plain;
    void* large = allocate_block(2 * kCpuCachedMinBytes);
    free_block(large, 2 * kCpuCachedMinBytes);
    REQUIRE(cpu_cache_stats().idle_blocks == 0);
  }
}

TEST_CASE("CPU allocator: the tensor byte counters do not see the cache", "[allocator]") {
  cpu_empty_cache();
  const AllocatorStats before = allocator_stats();
  { const Tensor big = zeros({1 << 16}, DType::f32); }  // 256 KiB, freed into the cache
  const AllocatorStats after_free = allocator_stats();
  REQUIRE(after_free.current_bytes == before.current_bytes);
  { const Tensor again = zeros({1 << 16}, DType::f32); REQUIRE(allocator_stats().current_bytes == before.current_bytes + (1 << 18)); }
  REQUIRE(allocator_stats().current_bytes == before.current_bytes);
  cpu_empty_cache();
}

TEST_CASE("CPU allocator: an impossible size is one clear error", "[allocator]") {
  REQUIRE_THROWS_AS(allocate_block(SIZE_MAX - 8), tg::Error);
  REQUIRE_THROWS_AS(allocate_block(size_t(1) << 62), tg::Error);
  REQUIRE_THROWS_WITH(allocate_block((size_t(1) << 47) + 1), Catch::Contains("out of memory"));
}
