#pragma once
// Failing together: how the ranks of a data-parallel job stop on an error that only some of them
// see (a data file one rank cannot read), instead of the others waiting forever in a collective.
//
// Setup (reading data and checkpoints, building the model) ends with a vote: every rank calls
// setup_succeeded() or, from its error handler, setup_failed(). The lowest failing rank reports
// its error once, naming its rank; every rank then throws JobStopped and exits with code 2.
// An error after the vote, on one rank, cannot be voted on: tapegrad's main() prints it and ends
// the job with Communicator::abort, and the launcher stops the others (each says so in one line).
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/distributed/communicator.h"

namespace tg::dist {

// Thrown on every rank of a job that stops together; main() prints what() when it is not empty
// (the one rank that reports) and exits with `code`.
class JobStopped : public std::runtime_error {
 public:
  JobStopped(const std::string& message, int code) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// This rank's setup went well; throws JobStopped (silent) when another rank's did not.
void setup_succeeded(Communicator& comm);
// This rank's setup failed with `what`: votes, then throws JobStopped, carrying the message
// "rank R of N: what" on the lowest failing rank and nothing on the others.
[[noreturn]] void setup_failed(Communicator& comm, const std::string& what);

// Agreeing on the run: after the vote, before anything that sizes a buffer or counts a step from
// the run's settings, every rank checks that it runs the job rank 0 runs. `definition` lists
// what defines this rank's run, one (name, value) pair a setting, in an order every rank uses
// (e.g. {"--dim", "32"}). Rank 0 broadcasts its list (the length, then the bytes) and every rank
// compares it with its own, line by line; when some rank differs, the lowest such rank reports
// the first differing setting once ("ranks disagree on --dim: rank 0 has 32, rank 1 has 64"),
// and every rank throws JobStopped (exit code 2). One process: nothing to compare.
using RunDefinition = std::vector<std::pair<std::string, std::string>>;
void check_ranks_agree(Communicator& comm, const RunDefinition& definition);

// The pieces of check_ranks_agree: the definition as text, one "name=value" line a setting
// (a newline inside a name or value is written as \n); and the sentence naming the first line
// where rank `rank`'s text differs from rank 0's, or "" when they are the same.
std::string definition_text(const RunDefinition& definition);
std::string first_disagreement(const std::string& rank0_text, const std::string& own_text,
                               int rank);

// A test hook, called on every rank as each training step starts. The installed tapegrad has
// none: only the tests' own build of the command line (tapegrad_hooked, made with
// tests/distributed/hooked_tapegrad.cpp) sets one, which makes a chosen rank die at a chosen step.
using StepHook = void (*)(int rank, long long step);
void set_step_hook(StepHook hook);
void run_step_hook(const Communicator& comm, long long step);

}  // namespace tg::dist
