#pragma once
// Averaging gradients over the ranks of a data-parallel job, in buckets.
//
// After backward, each rank holds the gradients of its own shard of the global batch. Every rank's
// loss is the mean over its shard and the shards are equal, so the mean of the ranks' gradients is
// the gradient of the global batch's mean loss: one allreduce (average) per bucket of parameters.
// Buckets (about `bucket_bytes` of gradients each, parameters taken in reverse registration order,
// roughly the order backward finishes them) keep each message large enough to run at the
// network's bandwidth and small enough to bound the staging buffer.
//
// Not overlapped with backward: the buckets are reduced one after another once backward has
// returned (docs/distributed.md says why, and what overlapping would take).
#include <cstdint>
#include <vector>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/dist/communicator.h"

namespace tg::dist {

struct SyncStats {
  double seconds = 0;  // wall time inside allreduce (and packing), summed over calls
  int64_t bytes = 0;   // gradient bytes reduced per rank, summed over calls
  int64_t calls = 0;   // allreduce calls (buckets)
};

class GradientSync {
 public:
  GradientSync(Communicator& comm, std::vector<Tensor> params, int64_t bucket_bytes = 4 << 20);
  // Replaces every parameter's gradient with the average over the ranks. A parameter without a
  // gradient counts as a zero gradient (it gets one, so that every rank steps the same way).
  void average();
  const SyncStats& stats() const { return stats_; }
  int64_t buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  Communicator& comm_;
  std::vector<Tensor> params_;
  std::vector<std::vector<size_t>> buckets_;  // indices into params_
  std::vector<float> staging_;
  SyncStats stats_;
};

}  // namespace tg::dist
