// OpenBLAS's generic kernel set replaced on a CPU it does not recognise (cli/openblas_core.h).
#include "tapegrad/cli/openblas_core.h"

#include <string>

#include "tests/cli/cli_support.h"

using namespace tg::testing;
using tg::cli::better_openblas_core;
using tg::cli::CpuSimd;

namespace {

// The word after "kernels:" in `tapegrad info`'s output.
std::string kernel_set(const std::string& info) {
  const size_t at = info.find("kernels:");
  REQUIRE(at != std::string::npos);
  const size_t first = info.find_first_not_of(' ', at + 8);
  return info.substr(first, info.find(' ', first) - first);
}

bool is_avx2_set(const std::string& set) {
  return set == "Haswell" || set == "Zen" || set == "SkylakeX" || set == "Cooperlake" ||
         set == "SapphireRapids";
}

}  // namespace

TEST_CASE("better_openblas_core: only a set without AVX2 on a CPU with AVX2 is replaced",
          "[cli][openblas]") {
  const CpuSimd sse_only{false, false}, avx2{true, false}, avx512{true, true};
  CHECK(better_openblas_core("Prescott", avx2) == "Haswell");
  CHECK(better_openblas_core("Prescott", avx512) == "SkylakeX");
  CHECK(better_openblas_core("Sandybridge", avx2) == "Haswell");  // AVX without AVX2
  CHECK(better_openblas_core("", avx512) == "SkylakeX");           // no name at all
  CHECK(better_openblas_core("Prescott", sse_only).empty());       // nothing better to run
  // What OpenBLAS chose for a CPU it knows stays, in any spelling.
  for (const char* known : {"Haswell", "HASWELL", "Zen", "SkylakeX", "skylakex", "Cooperlake",
                            "SapphireRapids"}) {
    CHECK(better_openblas_core(known, avx512).empty());
    CHECK(better_openblas_core(known, avx2).empty());
  }
}

TEST_CASE("tapegrad without OPENBLAS_CORETYPE runs an AVX2 kernel set where the CPU has AVX2",
          "[cli][openblas]") {
  TempDir dir;
  const CliResult unset = run_cli("info", dir, "env -u OPENBLAS_CORETYPE -u TAPEGRAD_OPENBLAS_FALLBACK");
  INFO(unset.out << unset.err);
  REQUIRE(unset.exit_code == 0);
  if (tg::cli::cpu_simd().avx2_fma) CHECK(is_avx2_set(kernel_set(unset.out)));
  // Where tapegrad chose, info says so and names what OpenBLAS had fallen back to.
  if (unset.out.find("chosen by tapegrad") != std::string::npos) {
    CHECK_THAT(unset.out, Catch::Contains("did not recognise this CPU and fell back to "));
  }

  // A set the user names is the one that runs, without a note.
  const CliResult named = run_cli("info", dir, "env -u TAPEGRAD_OPENBLAS_FALLBACK OPENBLAS_CORETYPE=Haswell");
  REQUIRE(named.exit_code == 0);
  if (tg::cli::cpu_simd().avx2_fma) CHECK(kernel_set(named.out) == "Haswell");
  CHECK(named.out.find("chosen by tapegrad") == std::string::npos);
}

TEST_CASE("TAPEGRAD_OPENBLAS_FALLBACK set by hand changes nothing, and info says who chose the set",
          "[cli][openblas]") {
  TempDir dir;
  const CliResult unset = run_cli("info", dir, "env -u OPENBLAS_CORETYPE -u TAPEGRAD_OPENBLAS_FALLBACK");
  REQUIRE(unset.exit_code == 0);
  // The variable is the first run's message to the second, never a switch: the same set runs,
  // and a fallback is reported only when one happened, under its real name.
  const CliResult forged = run_cli("info", dir, "env -u OPENBLAS_CORETYPE TAPEGRAD_OPENBLAS_FALLBACK=Forged");
  INFO(forged.out << forged.err);
  REQUIRE(forged.exit_code == 0);
  CHECK(kernel_set(forged.out) == kernel_set(unset.out));
  CHECK(forged.out.find("Forged") == std::string::npos);
  CHECK((forged.out.find("chosen by tapegrad") != std::string::npos) ==
        (unset.out.find("chosen by tapegrad") != std::string::npos));
  // A set the user named, whatever the variable says: the user's choice, said so.
  const CliResult named = run_cli("info", dir, "env TAPEGRAD_OPENBLAS_FALLBACK=Forged OPENBLAS_CORETYPE=Haswell");
  INFO(named.out << named.err);
  REQUIRE(named.exit_code == 0);
  if (tg::cli::cpu_simd().avx2_fma) CHECK(kernel_set(named.out) == "Haswell");
  CHECK(named.out.find("chosen by tapegrad") == std::string::npos);
  CHECK_THAT(named.out, Catch::Contains("OPENBLAS_CORETYPE=Haswell chose it"));
}
