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

#include "tapegrad/dist/communicator.h"

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

// Test hooks, read from the environment (for the tests of tests/dist/, never needed otherwise):
//   TAPEGRAD_TEST_RANK_DATA="R:PATH"  rank R reads its --data from PATH (one rank's bad input)
//   TAPEGRAD_TEST_RANK_DIES="R:K"     rank R aborts (SIGABRT) as training step K starts
std::string test_data_path(const Communicator& comm, const std::string& data);
void test_maybe_die(const Communicator& comm, long long step);

}  // namespace tg::dist
