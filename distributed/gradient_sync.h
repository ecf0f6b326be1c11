#pragma once
// Averaging gradients over the ranks of a data-parallel job, in buckets, overlapped with backward.
//
// After backward, each rank holds the gradients of its own shard of the global batch. Every rank's
// loss is the mean over its shard and the shards are equal, so the mean of the ranks' gradients is
// the gradient of the global batch's mean loss: one allreduce per bucket of parameters, then / N.
// Buckets (about `bucket_bytes` of gradients each, parameters in reverse registration order,
// roughly the order backward finishes them) keep each message large enough to run at the link's
// bandwidth and small enough to start early.
//
// A bucket is one contiguous f32 tensor on the parameters' device (host memory for the CPU, device
// memory for a GPU). Packing and unpacking are the device's own kernels (Kernels::copy converts
// dtypes and strides, fill zeroes a missing gradient, mul_scalar scales by 1/N), never host loops
// over device data; the sum over the ranks is a BucketReducer's (distributed/bucket_reducer.h: MPI
// for CPU buckets, NCCL or host-staged MPI for GPU buckets).
//
// Overlap: begin_step() installs a TapeObserver (runtime/tape_observer.h, chained in front of any
// profiler or trace) for the step. During forward it counts, per parameter, the ops that take it as
// an input; during backward it counts those ops' backward runs down. When a parameter's count
// reaches zero its gradient is final; when all of a bucket's are, the bucket is packed and its
// allreduce starts (non-blocking) while backward continues with earlier layers. average(), after
// backward, starts any bucket still waiting (e.g. a parameter no op used), waits for all and
// unpacks.
// With `overlap` false (activation checkpointing, whose recomputation during backward records the
// parameters' ops a second time) every bucket starts in average().
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/distributed/bucket_reducer.h"
#include "tapegrad/distributed/communicator.h"
#include "tapegrad/runtime/tape_observer.h"

namespace tg::dist {

struct SyncStats {
  double seconds = 0;          // wall time in packing, starting, progressing and waiting, summed
  double exposed_seconds = 0;  // of which in average(): after backward, not hidden behind it
  int64_t bytes = 0;           // gradient bytes reduced per rank, summed over steps
  int64_t calls = 0;           // allreduce calls (buckets), summed over steps
  int64_t early_calls = 0;     // of which started during backward
};

class GradientSync : private TapeObserver {
 public:
  // The parameters all live on one device; the reducer is make_bucket_reducer's for it.
  GradientSync(Communicator& comm, std::vector<Tensor> params, bool overlap = true,
               int64_t bucket_bytes = 4 << 20);
  // With a given reducer (the tests pick the host-staged one for a device).
  GradientSync(Communicator& comm, std::unique_ptr<BucketReducer> reducer, std::vector<Tensor> params,
               bool overlap = true, int64_t bucket_bytes = 4 << 20);
  ~GradientSync() override;
  // Whether there is anything to average: not with a LocalCommunicator (one process, not started
  // by an MPI launcher). A job of one MPI process does reduce (an identity), which lets a single
  // GPU run the NCCL path.
  bool active() const { return active_; }
  // What carries the gradients: the reducer's name ("mpi", "mpi (host-staged)", "nccl").
  const char* carrier() const;  // "none" when not active()
  // Before the step's forward: start watching the tape (nothing to do when not active()).
  void begin_step();
  // After backward: every parameter's gradient becomes the average over the ranks. A parameter
  // without a gradient counts as a zero gradient (it gets one, so that every rank steps alike).
  void average();
  const SyncStats& stats() const { return stats_; }
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor buffer;               // f32 [elements], on the parameters' device
    std::vector<Tensor> slots;   // per parameter: its elements of `buffer`, viewed as its shape
    int64_t waiting = 0;         // parameters whose gradient is not final yet
    int64_t handle = -1;         // the running allreduce, -1: not started
  };
  void start(Bucket& bucket);
  void start_ready();
  // TapeObserver
  void op_recorded(const char* op, const std::vector<Tensor>& inputs) override;
  void backward_started() override;
  void backward_finished() override;
  void node_started(const Node& node) override;
  void node_finished(const Node& node) override;
  void region_started(std::string_view name, const char* suffix) override;
  void region_finished() override;

  Communicator& comm_;
  std::unique_ptr<BucketReducer> reducer_;
  std::vector<Tensor> params_;
  bool overlap_, active_;
  std::vector<Bucket> buckets_;
  std::unordered_map<const TensorImpl*, size_t> index_of_;  // parameter -> index into params_
  std::vector<size_t> bucket_of_;                           // parameter index -> bucket
  std::vector<int64_t> uses_;                               // per parameter: op uses not yet run back
  std::vector<size_t> finished_;  // parameters whose last use just ran back (accumulated after it)
  bool watching_ = false, in_backward_ = false;
  TapeObserver* next_ = nullptr;  // the observer this one passes every event on to
  SyncStats stats_;
};

}  // namespace tg::dist
