#pragma once
// `tapegrad bench` under mpirun: data-parallel timing. Each rank runs the workload's own batch
// (weak scaling: the global batch is ranks x the workload's batch) and averages its gradients
// over the ranks, overlapped with backward (distributed/gradient_sync.h), as `tapegrad train` does. Rank 0 reports
// every rank's throughput, their sum, and the time spent in the gradient allreduce.
#include <functional>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/distributed/gradient_sync.h"

namespace tg::train {

class BenchDataParallel {
 public:
  // Inactive (every call a no-op, reducer() empty) unless an MPI launcher started more than one
  // process and the workload has parameters to average.
  explicit BenchDataParallel(const std::vector<Tensor>& params);
  bool active() const { return sync_ != nullptr; }
  int rank() const;
  std::function<void()> step_beginner();  // before each step's forward (GradientSync::begin_step)
  std::function<void()> reducer();        // the train_step hook
  void start_timing();              // before the timed steps: the allreduce time counts from here
  // After them (a collective: every rank calls it): the report's fields (empty when inactive).
  nlohmann::json finish_timing(int steps, double ms_per_step, double tokens_per_step);
  static void print(const nlohmann::json& report);  // the text lines of finish_timing's fields

 private:
  std::unique_ptr<dist::GradientSync> sync_;
  dist::SyncStats at_start_;
};

}  // namespace tg::train
