// Replacing OpenBLAS's generic kernel set on a CPU it does not recognise (cli/openblas_core.h).
#include "tapegrad/cli/openblas_core.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>

#include "tapegrad/runtime/features.h"

extern "C" char* openblas_get_corename(void);

namespace tg::cli {
namespace {

// The message from the first run to the second: "<set OpenBLAS chose>@<pid>". exec keeps the
// process id, so a value naming another process (one a user set, or one inherited from a parent
// tapegrad) is no message to this one and is ignored.
constexpr const char* kFallbackVariable = "TAPEGRAD_OPENBLAS_FALLBACK";

// The set OpenBLAS had fallen back to, when this process is the second run; else "".
std::string& fallen_back_to() {
  static std::string set;
  return set;
}

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

namespace {

// Reads the first run's message (kFallbackVariable) when it is addressed to this process, and
// removes the variable either way, so that it reaches no child and a user's value changes nothing.
void take_fallback_message() {
  const char* message = std::getenv(kFallbackVariable);
  if (message == nullptr) return;
  const std::string text = message;
  unsetenv(kFallbackVariable);
  const size_t at = text.rfind('@');
  if (at == std::string::npos || text.substr(at + 1) != std::to_string(getpid())) return;
  if (variable_set("OPENBLAS_CORETYPE")) fallen_back_to() = text.substr(0, at);
}

}  // namespace

void rerun_with_better_openblas_core(char** argv) {
  take_fallback_message();
  // A set named by the user, or the one the first run chose for this one: it stays.
  if (variable_set("OPENBLAS_CORETYPE")) return;
  const char* loaded = openblas_get_corename();
  const std::string better = better_openblas_core(loaded ? loaded : "", cpu_simd());
  if (better.empty()) return;
  const std::string message = std::string(loaded ? loaded : "unknown") + "@" + std::to_string(getpid());
  if (setenv(kFallbackVariable, message.c_str(), 1) != 0 ||
      setenv("OPENBLAS_CORETYPE", better.c_str(), 1) != 0) {
    return;
  }
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: carry on with the set OpenBLAS loaded
  unsetenv(kFallbackVariable);
}

std::string openblas_core_note() {
  if (!fallen_back_to().empty()) {
    return "chosen by tapegrad: OpenBLAS did not recognise this CPU and fell back to " +
           fallen_back_to();
  }
  const char* named = std::getenv("OPENBLAS_CORETYPE");
  return named != nullptr && *named != '\0' ? std::string("OPENBLAS_CORETYPE=") + named + " chose it"
                                             : "";
}

}  // namespace tg::cli
