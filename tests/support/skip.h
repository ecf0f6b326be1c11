#pragma once
// A test case that cannot run on this host (a kernel for an instruction set the CPU lacks, a tool
// that is not installed) is reported as skipped, not as passed: it prints kSkipMarker, and CTest,
// which registers every test case with SKIP_REGULAR_EXPRESSION set to it (CMakeLists.txt), counts
// the case as "Skipped" in its summary. Such a case must hold only the part that needs what is
// missing, so that the skip hides nothing else.
//
//   TEST_CASE("... on AVX-512", "[avx512]") {
//     if (tg::testing::skip_unless(tg::cpu::cpu_has_avx512f(), "this CPU has no AVX-512 F")) return;
//     ...
//   }
#include <cstdio>

namespace tg::testing {

// What CTest looks for in a test's output (CMakeLists.txt: catch_discover_tests).
inline constexpr const char* kSkipMarker = "[tapegrad: skipped]";

// True when the case must be skipped (`available` is false): then the marker and `why` are printed
// on stdout, and the caller returns.
inline bool skip_unless(bool available, const char* why) {
  if (available) return false;
  std::printf("%s %s\n", kSkipMarker, why);
  std::fflush(stdout);
  return true;
}

}  // namespace tg::testing
