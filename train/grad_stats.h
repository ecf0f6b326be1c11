#pragma once
// Gradient health (--grad-stats FILE.csv on `tapegrad train`): on the first step and every N-th
// after it, one CSV row per parameter, named as PyTorch names it (Module::named_parameters):
//
//   step,name,mean_abs_grad,grad_norm,update_ratio
//   10,mha.q_proj.weight,0.00132,0.0845,0.00097
//
//   mean_abs_grad   mean |g| over the parameter's elements
//   grad_norm       ||g||_2
//   update_ratio    ||w_after - w_before|| / ||w_before||: how far the optimizer's update (learning
//                   rate, momentum and weight decay included) moved the weights, relative to them.
//                   About 1e-3 is the usual healthy order; much larger or much smaller is worth a look.
//
// The gradients are measured as backward left them: unscaled when the fp16 loss scaler is on, and
// before --clip clips them (so an exploding gradient shows). A parameter whose gradient is
// undefined after backward (it does not reach the loss) gets empty gradient cells; it and any
// parameter with an all-zero gradient are named in a warning, once each per run -- except a key
// projection's bias, whose gradient is zero by construction (train/grad_health.h notes it).
// Each record's norms are kept for train/grad_health.h's judge (recorded()).
//
// Cost: on the steps that get rows, the gradients and weights are copied to the host (f64) twice;
// the first copy runs inside the step (its ms in --log and its trace slice "grad_stats" show it).
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "tapegrad/io/file_io.h"
#include "tapegrad/nn/module.h"
#include "tapegrad/train/grad_health.h"

namespace tg::train {

// Steps between rows when --grad-stats-every is not given.
inline constexpr int64_t kDefaultGradStatsEvery = 10;

// One parameter's gradient, as backward left it.
struct GradientHealth {
  std::string name;
  bool has_grad = false;     // false: undefined after backward
  double mean_abs = 0;       // mean |g|
  double norm = 0;           // ||g||_2
  bool all_zero() const { return has_grad && norm == 0; }
};

GradientHealth measure_gradient(const std::string& name, const Tensor& parameter);

// Every parameter's gradient norm now (weight_norm left 0), for a finding that names the largest
// (train/grad_health.h). Copies each gradient to the host.
std::vector<ParameterNorms> gradient_norms(const nn::NamedTensors& parameters);

// The warning for the parameters without a gradient or with an all-zero one, one line (no
// newline); empty when every parameter got a non-zero gradient.
std::string dead_gradient_warning(const std::vector<GradientHealth>& gradients);

class GradStatsLog {
 public:
  // Opens the log (the pre-flight check: io/file_io.h) and writes the header. `every` >= 1.
  GradStatsLog(const std::string& path, int64_t every, const std::string& flag = "--grad-stats");

  // Whether step `step` (1-based) gets rows: the first step of the run and every N-th.
  bool due(int64_t step, int64_t first_step) const;
  // With the gradients in place and the weights not yet updated: measures the gradients and
  // keeps a copy of the weights.
  void measure(const nn::NamedTensors& parameters);
  // After the update: writes the rows of `step`. Returns the warning for parameters not warned
  // about before (see dead_gradient_warning), or an empty string.
  std::string write_rows(int64_t step, const nn::NamedTensors& parameters);
  void close() { log_.close(); }
  // The norms of the rows write_rows wrote last: every parameter's gradient and weights (before
  // the update).
  const std::vector<ParameterNorms>& recorded() const { return recorded_; }

 private:
  int64_t every_;  // checked before the log is opened (and truncated)
  LogFile log_;
  std::vector<GradientHealth> gradients_;         // of the step in progress
  std::vector<std::vector<double>> weights_before_;
  std::set<std::string> warned_;                  // named in a warning already
  std::vector<ParameterNorms> recorded_;          // of the last rows written
};

}  // namespace tg::train
