// The CPU allocator and its cache of freed large blocks (cpu/allocator.h says why).
#include "tapegrad/cpu/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/features.h"

namespace tg::cpu {
namespace {

constexpr size_t kAlignment = 64;  // one cache line; aligned_alloc wants a multiple of it

struct BlockCache {
  std::mutex mutex;
  std::multimap<size_t, void*> idle;  // rounded size -> block
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

// A block of `size` bytes (a multiple of kAlignment); from kCpuHugePageBytes on it starts on a
// huge page boundary and asks for huge pages (cpu/allocator.h says why).
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

}  // namespace

void* allocate_block(size_t nbytes) {
  if (nbytes > kMaxBlockBytes) fail("allocate: out of memory asking for ", nbytes, " bytes");
  const size_t size = round_up(nbytes);
  if (cacheable(size)) {
    BlockCache& blocks = cache();
    std::lock_guard lock(blocks.mutex);
    const auto same_size = blocks.idle.find(size);
    if (same_size != blocks.idle.end()) {
      void* ptr = same_size->second;
      blocks.idle.erase(same_size);
      blocks.idle_bytes -= size;
      ++blocks.hits;
      return ptr;
    }
  }
  void* ptr = new_block(size);
  if (ptr == nullptr) {  // give the idle blocks back and try once more
    cpu_empty_cache();
    ptr = new_block(size);
  }
  TG_CHECK(ptr != nullptr, "allocate: out of memory asking for ", nbytes, " bytes");
  return ptr;
}

void free_block(void* ptr, size_t nbytes) {  // (nbytes was allocated: at most kMaxBlockBytes)
  const size_t size = round_up(nbytes);
  if (ptr != nullptr && cacheable(size)) {
    BlockCache& blocks = cache();
    std::lock_guard lock(blocks.mutex);
    if (blocks.idle_bytes + size <= kCpuCacheLimit) {
      blocks.idle.emplace(size, ptr);
      blocks.idle_bytes += size;
      return;
    }
  }
  std::free(ptr);
}

CpuCacheStats cpu_cache_stats() {
  BlockCache& blocks = cache();
  std::lock_guard lock(blocks.mutex);
  return {static_cast<int64_t>(blocks.idle_bytes), static_cast<int64_t>(blocks.idle.size()),
          blocks.hits};
}

void cpu_empty_cache() {
  BlockCache& blocks = cache();
  std::lock_guard lock(blocks.mutex);
  for (const auto& [size, ptr] : blocks.idle) std::free(ptr);
  blocks.idle.clear();
  blocks.idle_bytes = 0;
}

}  // namespace tg::cpu
