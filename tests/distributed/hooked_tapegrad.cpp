// tapegrad_hooked: the tests' own build of the command line, tapegrad's main() (cli/main.cpp)
// linked with this file, which installs a test hook before main() runs. Built only with the tests
// and never installed: the installed tapegrad has no such behaviour (distributed/job.h's step hook
// stays empty there, and no environment variable changes what it does).
//
//   TAPEGRAD_TEST_RANK_DIES="R:K"   rank R aborts (SIGABRT) as training step K starts
//   TAPEGRAD_TEST_WAIT_AT="K"       as training step K starts, every rank prints
//                                   "tapegrad_hooked: rank R (pid P): waiting at step K" on
//                                   stderr and waits (up to 60 s) for a stop signal
//                                   (train/stop_signals.h), then prints "tapegrad_hooked: ...
//                                   signal seen at step K" and goes on: a test sends SIGINT or
//                                   SIGTERM (or SIGKILL) at a step it knows
//   TAPEGRAD_TEST_WAIT_AT="K:twice" the same, then waits (up to 60 s) for a second signal, which
//                                   ends the process (its default action)
//   TAPEGRAD_TEST_WAIT_AT="K@R"     the same, on rank R alone (the others go on into the step)
//
// (One rank's bad input needs no hook: mpirun's `-np 1 A : -np 1 B` gives each rank its flags.)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tapegrad/distributed/job.h"
#include "tapegrad/train/stop_signals.h"

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

// As step K starts, when TAPEGRAD_TEST_WAIT_AT is "K" (or "K@R" on rank R): says so, and waits
// for a stop signal (":twice": then for the second signal).
void hooked_wait_for_signal(int rank, long long step) {
  const char* asked = std::getenv("TAPEGRAD_TEST_WAIT_AT");
  const std::string at = std::to_string(step);
  if (asked == nullptr || (asked != at && asked != at + ":twice" &&
                           asked != at + "@" + std::to_string(rank))) {
    return;
  }
  std::fprintf(stderr, "tapegrad_hooked: rank %d (pid %ld): waiting at step %lld\n", rank,
               static_cast<long>(getpid()), step);
  std::fflush(stderr);
  for (int waited_ms = 0; waited_ms < 60000 && tg::train::pending_stop_signal() == 0;
       waited_ms += 5) {
    usleep(5000);
  }
  if (tg::train::pending_stop_signal() == 0) return;
  std::fprintf(stderr, "tapegrad_hooked: signal seen at step %lld\n", step);
  std::fflush(stderr);
  if (asked == at + ":twice") sleep(60);  // the second signal ends the process here
}

// The hooks of this file, as each training step starts.
void hooked_step(int rank, long long step) {
  hooked_rank_dies(rank, step);
  hooked_wait_for_signal(rank, step);
}

// Installed by a static object's initialiser, before main() (cli/main.cpp's, unchanged) runs.
[[maybe_unused]] const bool hooked_installed = [] {
  tg::dist::set_step_hook(hooked_step);
  return true;
}();

}  // namespace
