// The CPU allocator's cache of freed blocks (runtime/allocator.h): a freed block of the same size is
// handed out again (a token's rows of activations too, and sizes of one class), blocks under 256
// bytes and FastPathsOff bypass it, under AddressSanitizer what is not handed out is poisoned,
// the tensor counters are not changed by it, and empty_cache frees what it holds; blocks from
// 2 MiB on start on a huge page.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/allocator.h"
#include "tapegrad/runtime/features.h"
#include "tests/support/skip.h"

#if defined(TG_ASAN_BUILD)
#include <sanitizer/asan_interface.h>
#endif

using namespace tg;
using namespace tg::cpu;

TEST_CASE("CPU allocator: a freed large block is reused for the same size", "[allocator]") {
  // (The cache is off where the fast paths are.)
  if (tg::testing::skip_unless(fast_paths_enabled(), "this CPU has no AVX2 + FMA: no cache")) return;
  cpu_empty_cache();
  const size_t size = 3 * kCpuCachedMinBytes + 8;  // rounded up to its size class inside
  void* first = allocate_block(size);
  free_block(first, size);
  const CpuCacheStats idle = cpu_cache_stats();
  REQUIRE(idle.idle_blocks == 1);
  REQUIRE(idle.idle_bytes == static_cast<int64_t>(cpu_block_bytes(size)));
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

TEST_CASE("CPU allocator: size classes, 2^e times 1, 1.25, 1.5 or 1.75 from 256 bytes on",
          "[allocator]") {
  REQUIRE(cpu_block_bytes(1) == 64);  // below 256 bytes: a multiple of 64 only
  REQUIRE(cpu_block_bytes(200) == 256);
  REQUIRE(cpu_block_bytes(256) == 256);
  REQUIRE(cpu_block_bytes(257) == 320);  // 256 + 64
  REQUIRE(cpu_block_bytes(1000) == 1024);
  REQUIRE(cpu_block_bytes(1025) == 1280);
  REQUIRE(cpu_block_bytes(3 << 20) == 3 << 20);  // 1.5 x 2 MiB
  REQUIRE(cpu_block_bytes((3 << 20) + 1) == 7 << 19);  // 1.75 x 2 MiB
  for (size_t size = 1; size < (size_t(1) << 22); size = size * 5 / 4 + 7) {
    INFO(size << " bytes");
    const size_t block = cpu_block_bytes(size);
    REQUIRE(block >= size);
    REQUIRE(block % 64 == 0);
    REQUIRE(block <= std::max<size_t>(size * 5 / 4 + 64, 256));  // at most a quarter more
  }
}

TEST_CASE("CPU allocator: sizes that keep growing reuse their class's blocks", "[allocator]") {
  if (tg::testing::skip_unless(fast_paths_enabled(), "this CPU has no AVX2 + FMA: no cache")) return;
  // What generation without the cache asks for: a tensor a step, each a row of 128 floats longer
  // than the last (64 KiB to 1 MiB), freed before the next. With exact sizes every one stayed
  // idle, up to the cache's 1 GiB limit; with classes, one block a class.
  cpu_empty_cache();
  const CpuCacheStats before = cpu_cache_stats();
  int64_t steps = 0;
  for (size_t size = 64 << 10; size <= (1 << 20); size += 512, ++steps) {
    void* block = allocate_block(size);
    free_block(block, size);
  }
  const CpuCacheStats after = cpu_cache_stats();
  REQUIRE(after.idle_blocks <= 17);  // four classes an octave over four octaves, and 1 MiB
  REQUIRE(after.hits - before.hits >= steps - 17);
  cpu_empty_cache();
}

TEST_CASE("CPU allocator: a token's small tensors come back from the cache", "[allocator]") {
  if (tg::testing::skip_unless(fast_paths_enabled(), "this CPU has no AVX2 + FMA: no cache")) return;
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

#if defined(TG_ASAN_BUILD)
TEST_CASE("CPU allocator under AddressSanitizer: bytes past a request and idle blocks are poisoned",
          "[allocator]") {
  cpu_empty_cache();
  char* block = static_cast<char*>(allocate_block(300));  // a block of 320 bytes
  REQUIRE(__asan_region_is_poisoned(block, 300) == nullptr);
  REQUIRE(__asan_address_is_poisoned(block + 304));  // the first whole 8-byte granule past 300
  REQUIRE(__asan_address_is_poisoned(block + 319));
  free_block(block, 300);
  if (fast_paths_enabled()) REQUIRE(__asan_address_is_poisoned(block));  // idle in the cache
  char* again = static_cast<char*>(allocate_block(310));  // the same class: usable to 310 now
  REQUIRE(__asan_region_is_poisoned(again, 310) == nullptr);
  free_block(again, 310);
  cpu_empty_cache();
}
#endif

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
