// The fast-path switch of cpu/features.h.
#include "tapegrad/cpu/features.h"

#include <atomic>

namespace tg::cpu {
namespace {
std::atomic<int> open_scopes{0};  // FastPathsOff objects alive
}

bool cpu_has_avx2_fma() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();  // (needed when asked before the runtime's own initialisation)
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;  // the fast paths are x86-64 code; elsewhere every kernel runs its plain loop
#endif
}

bool cpu_has_avx512_vnni() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512f() {
#if defined(__x86_64__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") != 0;
  }();
  return has;
#else
  return false;
#endif
}

bool fast_paths_enabled() {
  return cpu_has_avx2_fma() && open_scopes.load(std::memory_order_relaxed) == 0;
}

FastPathsOff::FastPathsOff() { open_scopes.fetch_add(1); }
FastPathsOff::~FastPathsOff() { open_scopes.fetch_sub(1); }

}  // namespace tg::cpu
