#pragma once
// The CPU allocator behind CpuKernels::allocate / deallocate: 64-byte aligned blocks from
// aligned_alloc, and a cache of freed large blocks. A training step frees and allocates the same
// sizes every step; handing back a cached block of the same size saves the page faults and zeroing
// of fresh pages that malloc's large blocks cost (it returns them to the system when freed).
// Generation allocates the same small tensors for every token (a row of activations, a head's
// scores), and a 64-byte aligned block from glibc takes its slow path (it cuts the alignment's
// slack off and frees it again, and the heap's free lists fill with the pieces): so blocks from
// kCpuCachedMinBytes (256 bytes) on are cached too. Below that, malloc's own bins serve them.
//
// Blocks of 2 MiB and more start on a 2 MiB boundary and are marked for transparent huge pages
// (madvise; Linux serves them where its setting is "madvise" or "always"). The attention kernel
// reads one head's rows of a [B, S, H, width] tensor, each row in another 4 KiB page: with 2 MiB
// pages a 6 MiB activation takes 3 TLB entries instead of 1536, and the misses go. Measured at one
// thread, best of 8 alternated runs: timeseries 24.48 to 23.44 ms a step, textcls-mid 47.09 to
// 45.81. The size is not rounded up, so a block's tail past its last whole huge page stays in
// 4 KiB pages and no memory is spent on it.
//
// The cache never changes what allocator_stats() reports (the bytes tensors hold); its idle bytes
// are counted here, at most kCpuCacheLimit. While a FastPathsOff scope is open
// (cpu/features.h) nothing is taken from or put into the cache.
#include <cstddef>
#include <cstdint>

namespace tg::cpu {

inline constexpr size_t kCpuCachedMinBytes = size_t(1) << 8;  // 256 bytes
inline constexpr size_t kCpuCacheLimit = size_t(1) << 30;  // idle bytes kept at most
inline constexpr size_t kCpuHugePageBytes = size_t(2) << 20;

void* allocate_block(size_t nbytes);             // tg::Error when out of memory
void free_block(void* ptr, size_t nbytes);        // nbytes as given to allocate_block

struct CpuCacheStats {
  int64_t idle_bytes = 0, idle_blocks = 0;
  int64_t hits = 0;  // allocations served from the cache (since the start)
};
CpuCacheStats cpu_cache_stats();
void cpu_empty_cache();  // frees every idle block

}  // namespace tg::cpu
