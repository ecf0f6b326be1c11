// Replacing OpenBLAS's generic kernel set on a CPU it does not recognise (cli/openblas_core.h).
#include "tapegrad/cli/openblas_core.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

#include "tapegrad/cpu/features.h"

extern "C" char* openblas_get_corename(void);

namespace tg::cli {
namespace {

constexpr const char* kFallbackVariable = "TAPEGRAD_OPENBLAS_FALLBACK";

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

// OpenBLAS 0.3's x86-64 kernel sets whose GEMMs use AVX2 and FMA (or AVX-512).
bool has_avx2_kernels(const std::string& core) {
  constexpr std::array<const char*, 5> kSets = {"haswell", "zen", "skylakex", "cooperlake",
                                                "sapphirerapids"};
  const std::string name = lower(core);
  return std::any_of(kSets.begin(), kSets.end(), [&](const char* set) { return name == set; });
}

bool variable_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

}  // namespace

CpuSimd cpu_simd() {
  CpuSimd simd;
  simd.avx2_fma = cpu::cpu_has_avx2_fma();
#if defined(__x86_64__)
  __builtin_cpu_init();
  simd.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd") &&
                __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                __builtin_cpu_supports("avx512vl");
#endif
  return simd;
}

std::string better_openblas_core(const std::string& loaded, CpuSimd simd) {
  if (!simd.avx2_fma || has_avx2_kernels(loaded)) return "";
  return simd.avx512 ? "SkylakeX" : "Haswell";
}

void rerun_with_better_openblas_core(char** argv) {
  if (variable_set("OPENBLAS_CORETYPE") || variable_set(kFallbackVariable)) return;
  const char* loaded = openblas_get_corename();
  const std::string better = better_openblas_core(loaded ? loaded : "", cpu_simd());
  if (better.empty()) return;
  // The second run sees both variables set, so it never comes back here.
  if (setenv(kFallbackVariable, loaded ? loaded : "unknown", 1) != 0 ||
      setenv("OPENBLAS_CORETYPE", better.c_str(), 1) != 0) {
    return;
  }
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with the set OpenBLAS loaded
  unsetenv(kFallbackVariable);
}

std::string openblas_core_note() {
  const char* fallback = std::getenv(kFallbackVariable);
  if (fallback == nullptr || *fallback == '\0' || !variable_set("OPENBLAS_CORETYPE")) return "";
  return std::string("chosen by tapegrad: OpenBLAS did not recognise this CPU and fell back to ") +
         fallback;
}

}  // namespace tg::cli
