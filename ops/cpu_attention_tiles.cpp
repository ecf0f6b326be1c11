// Whether the attention kernel uses its AVX2 + FMA tile kernels (ops/cpu_attention_tiles.h): the
// CPU's answer, asked once, unless a test forces the baseline path.
#include "tapegrad/ops/cpu_attention_tiles.h"

#include <atomic>

namespace tg::cpu::tiles {
namespace {
std::atomic<bool> baseline_forced{false};
}

bool avx2_supported() {
  static const bool supported = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return supported;
}

bool use_avx2() { return avx2_supported() && !baseline_forced.load(std::memory_order_relaxed); }

void force_baseline(bool baseline) { baseline_forced.store(baseline, std::memory_order_relaxed); }

}  // namespace tg::cpu::tiles
