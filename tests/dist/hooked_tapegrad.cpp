// tapegrad_hooked: the tests' own build of the command line, tapegrad's main() (cli/main.cpp)
// linked with this file, which installs a test hook before main() runs. Built only with the
// tests and never installed: the installed tapegrad has no such behaviour (dist/job.h's step hook
// stays empty there, and no environment variable changes what it does).
//
//   TAPEGRAD_TEST_RANK_DIES="R:K"   rank R aborts (SIGABRT) as training step K starts
//
// (One rank's bad input needs no hook: mpirun's `-np 1 A : -np 1 B` gives each rank its flags.)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tapegrad/dist/job.h"

namespace {

// Rank R aborts as step K starts, when TAPEGRAD_TEST_RANK_DIES is "R:K".
void hooked_rank_dies(int rank, long long step) {
  const char* asked = std::getenv("TAPEGRAD_TEST_RANK_DIES");
  if (asked == nullptr || std::string(asked) != std::to_string(rank) + ":" + std::to_string(step)) {
    return;
  }
  std::fprintf(stderr, "tapegrad: rank %d: TAPEGRAD_TEST_RANK_DIES: aborting at step %lld\n",
               rank, step);
  std::abort();
}

// Installed by a static object's initialiser, before main() (cli/main.cpp's, unchanged) runs.
[[maybe_unused]] const bool hooked_installed = [] {
  tg::dist::set_step_hook(hooked_rank_dies);
  return true;
}();

}  // namespace
