#pragma once
// `tapegrad bench --workload textcls-mid --int8`: inference only. The workload's TextClassifier
// forward (under tg::NoGrad, in eval()) timed three ways: f32, int8 dynamic and int8 static (the
// static scales calibrated on a few random batches of the workload), with each model's bytes.
#include <string>

namespace tg::cli {

struct Int8BenchOptions {
  std::string workload = "textcls-mid";  // textcls-small | textcls-mid
  int steps = 20;                        // timed forwards per model (the median is reported)
  int warmup = 3;
  int calibration_batches = 4;           // static: random batches the observers see
  bool json = false;                     // one JSON line per model instead of the table
};

// Runs on the CPU; returns the exit code.
int bench_int8(const Int8BenchOptions& options);

}  // namespace tg::cli
