#include "tapegrad/dist/job.h"

#include <cstdio>
#include <cstdlib>

namespace tg::dist {
namespace {

// "R:VALUE" from the environment variable `name` when R is this rank, else nullopt-like "".
std::string hook_value(const Communicator& comm, const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr) return "";
  const std::string value = text;
  const size_t colon = value.find(':');
  if (colon == std::string::npos || value.substr(0, colon) != std::to_string(comm.rank())) return "";
  return value.substr(colon + 1);
}

}  // namespace

void setup_succeeded(Communicator& comm) {
  if (comm.size() == 1) return;
  if (comm.allreduce_min(comm.size()) < comm.size()) throw JobStopped("", 2);
}

void setup_failed(Communicator& comm, const std::string& what) {
  if (comm.size() == 1) throw JobStopped(what, 2);
  const int64_t first_failed = comm.allreduce_min(comm.rank());
  if (first_failed != comm.rank()) throw JobStopped("", 2);
  throw JobStopped("rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) + ": " + what, 2);
}

std::string test_data_path(const Communicator& comm, const std::string& data) {
  const std::string path = hook_value(comm, "TAPEGRAD_TEST_RANK_DATA");
  return path.empty() ? data : path;
}

void test_maybe_die(const Communicator& comm, long long step) {
  const std::string at = hook_value(comm, "TAPEGRAD_TEST_RANK_DIES");
  if (!at.empty() && std::to_string(step) == at) {
    std::fprintf(stderr, "tapegrad: rank %d: TAPEGRAD_TEST_RANK_DIES: aborting at step %lld\n", comm.rank(), step);
    std::abort();
  }
}

}  // namespace tg::dist
