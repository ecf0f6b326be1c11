// The communicator on MPI (built only with TAPEGRAD_MPI): MPI_COMM_WORLD, with its error handler
// set to return codes, so that a failed collective becomes a tg::Error naming the call instead
// of MPI's default abort without a word from tapegrad.
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/distributed/communicator.h"

namespace tg::dist {
namespace {

void check(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(code, text, &length);
  fail(call, " failed: ", text, " (did another rank of the job fail?)");
}

// Set as the process leaves (MPI_Finalize at exit), after anything it had to report.
volatile std::sig_atomic_t mpi_leaving = 0;

// The launcher ends the surviving ranks with SIGTERM when one rank dies: say so in one line
// (write(2) only: this runs in a signal handler), then exit with 128 + SIGTERM as usual. A rank
// already leaving (every rank stopping together, distributed/job.h, each exits as soon as it can)
// has nothing to add: the launcher only ends it a little earlier.
char terminated_line[160];
void on_terminate(int) {
  if (!mpi_leaving) {
    const ssize_t written = write(STDERR_FILENO, terminated_line, std::strlen(terminated_line));
    (void)written;
  }
  _exit(128 + SIGTERM);
}

void finalize() {
  mpi_leaving = 1;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit(finalize);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    std::snprintf(terminated_line, sizeof terminated_line,
                  "tapegrad: error: rank %d of %d: stopped by the MPI launcher because another "
                  "rank failed (see above); the job did not finish\n", rank_, size_);
    std::signal(SIGTERM, on_terminate);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* name() const override { return "mpi"; }

  void allreduce(float* data, int64_t count, Reduce op) override { reduce(data, count, MPI_FLOAT, op); }
  void allreduce(double* data, int64_t count, Reduce op) override { reduce(data, count, MPI_DOUBLE, op); }

  int64_t allreduce_min(int64_t value) override {
    long long in = value, out = 0;
    check(MPI_Allreduce(&in, &out, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD), "MPI_Allreduce");
    return out;
  }
  void broadcast(void* bytes, int64_t size, int root) override {
    for (int64_t done = 0; done < size;) {  // MPI counts are int: large buffers go in pieces
      const int piece = static_cast<int>(std::min<int64_t>(size - done, 1 << 30));
      check(MPI_Bcast(static_cast<char*>(bytes) + done, piece, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
      done += piece;
    }
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  int64_t start_allreduce(float* data, int64_t count) override {
    TG_CHECK(count <= INT_MAX, "start_allreduce: ", count, " elements is more than MPI's int count allows");
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &request),
          "MPI_Iallreduce");
    requests_.push_back(request);
    return static_cast<int64_t>(requests_.size()) - 1;
  }
  void progress() override {
    for (MPI_Request& request : requests_) {
      if (request == MPI_REQUEST_NULL) continue;
      int done = 0;
      check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "MPI_Test");
    }
  }
  void wait(int64_t handle) override {
    check(MPI_Wait(&requests_.at(static_cast<size_t>(handle)), MPI_STATUS_IGNORE), "MPI_Wait");
    if (std::all_of(requests_.begin(), requests_.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
      requests_.clear();  // every handle waited for: the next ones start from 0 again
    }
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // not reached
  }

 private:
  template <typename T>
  void reduce(T* data, int64_t count, MPI_Datatype type, Reduce op) {
    for (int64_t done = 0; done < count;) {
      const int piece = static_cast<int>(std::min<int64_t>(count - done, 1 << 28));
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, piece, type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
      done += piece;
    }
    if (op == Reduce::average) {
      const T scale = T(1) / static_cast<T>(size_);
      for (int64_t i = 0; i < count; ++i) data[i] *= scale;
    }
  }
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> requests_;  // start_allreduce's, by handle; MPI_REQUEST_NULL once done
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace tg::dist
