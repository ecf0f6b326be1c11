// When training writes checkpoints and stops early (train/checkpoint_policy.h), and how SIGINT and
// SIGTERM reach it (train/stop_signals.h): hand-computed sequences, and signals raised in a child
// process so that this one keeps its own actions.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <vector>

#include "tapegrad/train/checkpoint_policy.h"
#include "tapegrad/train/stop_signals.h"

using namespace tg::train;

namespace {

// Runs `body` in a child process and returns its wait status (`body` returns the exit code).
template <typename Body>
int policy_child_status(Body body) {
  const pid_t child = fork();
  if (child == 0) _exit(body());
  int status = 0;
  waitpid(child, &status, 0);
  return status;
}

// A handler that does nothing, to see that the guard puts it back.
extern "C" void policy_noop_handler(int) {}

}  // namespace

TEST_CASE("checkpoint policy: the best validation loss and the evaluations since", "[train]") {
  // Evaluations after steps 10, 20, ...: 3, 2, 2 (equal: no improvement), 2.5, 1, 1.5, 1.5.
  const std::vector<double> losses = {3, 2, 2, 2.5, 1, 1.5, 1.5};
  const std::vector<bool> improved = {true, true, false, false, true, false, false};
  const std::vector<int64_t> best_step = {10, 20, 20, 20, 50, 50, 50};
  const std::vector<int64_t> since = {0, 0, 1, 2, 0, 1, 2};
  ValidationRecord record;
  REQUIRE(record.empty());
  for (size_t i = 0; i < losses.size(); ++i) {
    INFO("evaluation " << i);
    REQUIRE(record_evaluation(record, losses[i], 10 * static_cast<int64_t>(i + 1)) == improved[i]);
    REQUIRE(record.best_step == best_step[i]);
    REQUIRE(record.evaluations_since_best == since[i]);
    // --patience 2 is exhausted after the 4th and the 7th evaluation; 3 never; 0 is none.
    REQUIRE(patience_exhausted(record, 2) == (since[i] >= 2));
    REQUIRE_FALSE(patience_exhausted(record, 3));
    REQUIRE_FALSE(patience_exhausted(record, 0));
  }
  REQUIRE(record.best_loss == 1);
}

TEST_CASE("checkpoint policy: --save-every counts the whole run's steps, not the last", "[train]") {
  std::vector<int64_t> due;
  for (int64_t step = 1; step <= 12; ++step) {
    if (periodic_save_due(step, 4, 12)) due.push_back(step);
  }
  REQUIRE(due == std::vector<int64_t>{4, 8});  // 12 is the last step: --save writes it anyway
  REQUIRE(periodic_save_due(8, 4, 10));         // a run stopped early (--stop-after) at 10
  REQUIRE_FALSE(periodic_save_due(8, 0, 10));   // no --save-every
}

TEST_CASE("stop signals: the first is recorded, the second has its default action", "[train]") {
  for (const int signal : {SIGINT, SIGTERM}) {
    INFO(stop_signal_name(signal));
    const int status = policy_child_status([signal] {
      std::signal(SIGINT, SIG_DFL);  // (a test run in a shell's background ignores SIGINT)
      std::signal(SIGTERM, SIG_DFL);
      const StopSignals guard;
      if (pending_stop_signal() != 0) return 10;
      std::raise(signal);
      if (pending_stop_signal() != signal) return 11;
      std::raise(signal);  // ends the process
      return 12;
    });
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == signal);
  }
}

TEST_CASE("stop signals: an ignored SIGINT stays ignored; the guard restores the actions",
          "[train]") {
  const int status = policy_child_status([] {
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, policy_noop_handler);
    const auto term_handler = [] {
      struct sigaction term {};
      sigaction(SIGTERM, nullptr, &term);
      return term.sa_handler;
    };
    {
      const StopSignals guard;
      if (term_handler() == policy_noop_handler) return 10;  // the guard's own handler
      std::raise(SIGINT);
      if (pending_stop_signal() != 0) return 11;  // ignored, as before the guard
    }
    return term_handler() == policy_noop_handler ? 0 : 12;
  });
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}
