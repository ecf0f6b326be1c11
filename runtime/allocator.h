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
// A cached block serves a request of its own size class: from kCpuCachedMinBytes on, a block is
// allocated rounded up to 2^e times 1, 1.25, 1.5 or 1.75 (cpu_block_bytes; at most a fifth more
// than asked), so that shapes which keep changing (generation without the cache, whose context
// grows by a position a token; batches of other lengths) reuse their neighbours' blocks instead of
// filling the cache with sizes never asked for again (docs/design-notes.md has the figures).
//
// Blocks of 2 MiB and more start on a 2 MiB boundary and are marked for transparent huge pages
// (madvise; Linux serves them where its setting is "madvise" or "always"). The attention kernel
// reads one head's rows of a [B, S, H, width] tensor, each row in another 4 KiB page: with 2 MiB
// pages a 6 MiB activation takes 3 TLB entries instead of 1536, and the misses go. The size is not
// rounded up, so a block's tail past its last whole huge page stays in 4 KiB pages and no memory
// is spent on it.
//
// Under AddressSanitizer (TG_ASAN_BUILD) a block's bytes past those asked for, and every idle block,
// are poisoned: reading past a tensor's end, or a tensor used after its block went back into the
// cache, is reported as with malloc's own blocks.
//
// The cache never changes what allocator_stats() reports (the bytes tensors hold); its idle bytes
// are counted here, at most kCpuCacheLimit. While a FastPathsOff scope is open
// (runtime/features.h) nothing is taken from or put into the cache.
#include <cstddef>
#include <cstdint>

// Defined in a build with AddressSanitizer (GCC's or Clang's -fsanitize=address), where the
// allocator poisons the bytes of a block past those asked for, and every idle block.
#if defined(__SANITIZE_ADDRESS__)
#define TG_ASAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TG_ASAN_BUILD 1
#endif
#endif

namespace tg::cpu {

inline constexpr size_t kCpuCachedMinBytes = size_t(1) << 8;  // 256 bytes
inline constexpr size_t kCpuCacheLimit = size_t(1) << 30;  // idle bytes kept at most
inline constexpr size_t kCpuHugePageBytes = size_t(2) << 20;

// The bytes a block of nbytes takes: a multiple of 64, and from kCpuCachedMinBytes on its size
// class (above). allocator_stats() counts the bytes asked for, not these.
size_t cpu_block_bytes(size_t nbytes);
void* allocate_block(size_t nbytes);             // tg::Error when out of memory
void free_block(void* ptr, size_t nbytes);        // nbytes as given to allocate_block

struct CpuCacheStats {
  int64_t idle_bytes = 0, idle_blocks = 0;
  int64_t hits = 0;  // allocations served from the cache (since the start)
};
CpuCacheStats cpu_cache_stats();
void cpu_empty_cache();  // frees every idle block

}  // namespace tg::cpu
