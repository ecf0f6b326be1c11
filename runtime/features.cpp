// The fast-path switch of runtime/features.h, and the CPU's features as the kernels see them.
#include "tapegrad/runtime/features.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/textbook.h"

namespace tg::cpu {
namespace {
std::atomic<int> open_scopes{0};  // FastPathsOff objects alive
}  // namespace

bool avx512_hidden() {
  static const bool hidden = [] {
    const char* value = std::getenv(kMaxIsaVariable);
    const std::string name = value ? value : "";
    TG_CHECK(name.empty() || name == "avx2" || name == "avx512", kMaxIsaVariable, "='", name,
             "': expected avx2 or avx512 (or unset: what this CPU has)");
    return name == "avx2";
  }();  // a throw: asked again
  return hidden;
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
  return has && !avx512_hidden();
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
  return has && !avx512_hidden();
#else
  return false;
#endif
}

bool fast_paths_enabled() {
  return cpu_has_avx2_fma() && open_scopes.load(std::memory_order_relaxed) == 0 && !textbook_mode();
}

FastPathsOff::FastPathsOff() { open_scopes.fetch_add(1); }
FastPathsOff::~FastPathsOff() { open_scopes.fetch_sub(1); }

}  // namespace tg::cpu
