// The CPU allocator and its cache of freed large blocks (runtime/allocator.h says why).
#include "tapegrad/runtime/allocator.h"

#include <sys/mman.h>

#include <bit>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/runtime/features.h"

#if defined(TG_ASAN_BUILD)
#include <sanitizer/asan_interface.h>
#endif

namespace tg::cpu {
namespace {

constexpr size_t kAlignment = 64;  // one cache line; aligned_alloc wants a multiple of it

struct BlockCache {
  std::mutex mutex;
  // block bytes (cpu_block_bytes) -> the idle blocks of that size, the last freed last. A vector a
  // size keeps its capacity when emptied, so that taking and returning blocks allocates nothing.
  std::map<size_t, std::vector<void*>> idle;
  size_t idle_bytes = 0;
  int64_t hits = 0;
};

BlockCache& cache() {
  static auto* blocks = new BlockCache;  // never destroyed: tensors in static objects die late
  return *blocks;
}

// More than a 64-bit process can address (2^47 bytes of user space on x86-64) is refused before
// malloc sees it: no allocator could serve it, and a sanitizer's would abort instead of failing.
constexpr size_t kMaxBlockBytes = size_t(1) << 47;

size_t round_up(size_t nbytes) { return (nbytes + kAlignment - 1) / kAlignment * kAlignment; }

// The bytes a block of `size` (a multiple of kAlignment) takes: from kCpuCachedMinBytes on, rounded
// up to its size class, 2^e times 1, 1.25, 1.5 or 1.75 (runtime/allocator.h says why); below, itself.
// Whether the cache is on or not: a block may go into the cache after a FastPathsOff scope ends.
size_t block_bytes(size_t size) {
  if (size < kCpuCachedMinBytes) return size;
  const size_t quarter = std::bit_floor(size) / 4;  // a multiple of kAlignment: size >= 256
  return (size + quarter - 1) / quarter * quarter;
}

// A block of `size` bytes (a multiple of kAlignment); from kCpuHugePageBytes on it starts on a
// huge page boundary and asks for huge pages (runtime/allocator.h says why).
void* new_block(size_t size) {
  if (size < kCpuHugePageBytes) return std::aligned_alloc(kAlignment, size);
  void* ptr = nullptr;  // (aligned_alloc wants the size a multiple of the alignment: not here)
  if (posix_memalign(&ptr, kCpuHugePageBytes, size) != 0) return nullptr;
#ifdef MADV_HUGEPAGE
  if (ptr != nullptr) madvise(ptr, size, MADV_HUGEPAGE);  // a hint: where refused, 4 KiB pages
#endif
  return ptr;
}

bool cacheable(size_t size) { return size >= kCpuCachedMinBytes && fast_paths_enabled(); }

// Under AddressSanitizer a block's bytes past those asked for, and the whole of an idle block, are
// poisoned: a kernel that reads past a tensor's end, or a tensor used after its block went back
// into the cache, is reported as with malloc's own blocks. Elsewhere these do nothing.
#if defined(TG_ASAN_BUILD)
void poison(const void* ptr, size_t bytes) { ASAN_POISON_MEMORY_REGION(ptr, bytes); }
void unpoison(const void* ptr, size_t bytes) { ASAN_UNPOISON_MEMORY_REGION(ptr, bytes); }
#else
void poison(const void*, size_t) {}
void unpoison(const void*, size_t) {}
#endif

// A block of `size` bytes handed out for `nbytes`: those usable, the rest poisoned.
void* hand_out(void* ptr, size_t nbytes, size_t size) {
  unpoison(ptr, nbytes);
  poison(static_cast<char*>(ptr) + nbytes, size - nbytes);
  return ptr;
}

}  // namespace

size_t cpu_block_bytes(size_t nbytes) { return block_bytes(round_up(nbytes)); }

void* allocate_block(size_t nbytes) {
  if (nbytes > kMaxBlockBytes) fail("allocate: out of memory asking for ", nbytes, " bytes");
  const size_t size = cpu_block_bytes(nbytes);
  if (cacheable(size)) {
    BlockCache& blocks = cache();
    std::lock_guard lock(blocks.mutex);
    const auto same_size = blocks.idle.find(size);
    if (same_size != blocks.idle.end() && !same_size->second.empty()) {
      void* ptr = same_size->second.back();  // the last freed: the likeliest still in cache
      same_size->second.pop_back();
      blocks.idle_bytes -= size;
      ++blocks.hits;
      return hand_out(ptr, nbytes, size);
    }
  }
  void* ptr = new_block(size);
  if (ptr == nullptr) {  // give the idle blocks back and try once more
    cpu_empty_cache();
    ptr = new_block(size);
  }
  TG_CHECK(ptr != nullptr, "allocate: out of memory asking for ", nbytes, " bytes");
  return hand_out(ptr, nbytes, size);
}

void free_block(void* ptr, size_t nbytes) {  // (nbytes was allocated: at most kMaxBlockBytes)
  const size_t size = cpu_block_bytes(nbytes);
  if (ptr != nullptr && cacheable(size)) {
    BlockCache& blocks = cache();
    std::lock_guard lock(blocks.mutex);
    if (blocks.idle_bytes + size <= kCpuCacheLimit) {
      poison(ptr, size);
      blocks.idle[size].push_back(ptr);
      blocks.idle_bytes += size;
      return;
    }
  }
  if (ptr != nullptr) unpoison(ptr, size);
  std::free(ptr);
}

CpuCacheStats cpu_cache_stats() {
  BlockCache& blocks = cache();
  std::lock_guard lock(blocks.mutex);
  int64_t idle_blocks = 0;
  for (const auto& [size, ptrs] : blocks.idle) idle_blocks += static_cast<int64_t>(ptrs.size());
  return {static_cast<int64_t>(blocks.idle_bytes), idle_blocks, blocks.hits};
}

void cpu_empty_cache() {
  BlockCache& blocks = cache();
  std::lock_guard lock(blocks.mutex);
  for (const auto& [size, ptrs] : blocks.idle) {
    for (void* ptr : ptrs) {
      unpoison(ptr, size);
      std::free(ptr);
    }
  }
  blocks.idle.clear();
  blocks.idle_bytes = 0;
}

}  // namespace tg::cpu
