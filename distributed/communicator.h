#pragma once
// The communicator: the few collectives data-parallel training needs, behind one small interface.
//
//   rank(), size()       this process's place in the job (0 .. size-1) and the job's size
//   allreduce(buffer)    every rank ends with the element-wise sum (or average) over all ranks
//   broadcast(bytes)     every rank ends with the root's bytes
//   barrier()            no rank leaves before every rank has entered
//   start_allreduce()    the same, non-blocking (sum): wait() for it, progress() meanwhile
//
// Three implementations: LocalCommunicator (one process: every collective is the identity),
// MpiCommunicator (distributed/mpi_communicator.cpp, built with TAPEGRAD_MPI) and NcclCommunicator
// (distributed/nccl_communicator.h, for device buffers, built with the CUDA backend and NCCL).
// The buffers here are host memory; every rank must call the same collectives in the same order
// (as MPI requires).
#include <cstdint>
#include <memory>
#include <string>

namespace tg::dist {

enum class Reduce { sum, average };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "local", "mpi"
  virtual void allreduce(float* data, int64_t count, Reduce op) = 0;
  virtual void allreduce(double* data, int64_t count, Reduce op) = 0;
  virtual int64_t allreduce_min(int64_t value) = 0;  // the smallest value any rank passed
  virtual void broadcast(void* bytes, int64_t size, int root) = 0;
  virtual void barrier() = 0;
  // Non-blocking allreduce (sum) of `data`, which must stay untouched until wait(handle) returns.
  // Between the two, progress() lets the operation advance (MPI moves data only inside its calls).
  virtual int64_t start_allreduce(float* data, int64_t count) = 0;
  virtual void progress() = 0;
  virtual void wait(int64_t handle) = 0;
  // Ends the whole job now with `code` (MPI_Abort): for a failure the other ranks cannot know of.
  [[noreturn]] virtual void abort(int code) = 0;
};

// One process: rank 0 of 1.
class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char* name() const override { return "local"; }
  void allreduce(float*, int64_t, Reduce) override {}
  void allreduce(double*, int64_t, Reduce) override {}
  int64_t allreduce_min(int64_t value) override { return value; }
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  int64_t start_allreduce(float*, int64_t) override { return 0; }
  void progress() override {}
  void wait(int64_t) override {}
  [[noreturn]] void abort(int code) override;
};

// True when an MPI launcher (mpirun, srun) started this process: its environment says so.
bool launched_by_mpi();

// The process's communicator, made on first use: MPI when this build has it and an MPI launcher
// started the process, else the local one. MPI is finalised at exit.
Communicator& world();

// Whether world() has been made and spans more than one process (without making it).
bool world_is_distributed();

}  // namespace tg::dist
