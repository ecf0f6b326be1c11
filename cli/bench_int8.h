#pragma once
// `tapegrad bench --workload textcls-mid --int8` (or textcls-small, charlm): inference only. The
// workload's model forward (TextClassifier, CharLM; under tg::NoGrad, in eval()) timed three ways,
// interleaved: f32, int8 dynamic and int8 static (the static scales calibrated on a few random
// batches of the workload), with each model's loss on the batch and its bytes, and which int8
// kernels ran (cpu/fast/quantize.h: TAPEGRAD_INT8_KERNEL chooses).
#include <string>

namespace tg::cli {

struct Int8BenchOptions {
  std::string workload = "textcls-mid";  // textcls-small | textcls-mid | charlm
  int steps = 20;                        // timed forwards per model (the median is reported)
  int warmup = 3;
  int calibration_batches = 4;           // static: random batches the observers see
  bool json = false;                     // one JSON line per model instead of the table
};

// Runs on the CPU; returns the exit code.
int bench_int8(const Int8BenchOptions& options);

}  // namespace tg::cli
