#pragma once
// The training loop behind `tapegrad train`.
#include <cstdint>
#include <string>

#include "train/config.h"

namespace tg::train {

struct TrainRun {
  TrainConfig config;
  std::string save;       // final checkpoint
  std::string save_init;  // the initial weights, before any step
  std::string resume;     // continue from this checkpoint (config, weights, optimizer, step, RNG)
  std::string log;        // CSV, one row per optimizer step
  bool json = false;      // last stdout line: one JSON object
  bool profile = false;   // per-op table after training
  int64_t stop_after = 0; // stop after this many steps of this run (then save), 0: run to the end
};

// Returns the exit code; bad data or settings throw tg::Error.
int train(const TrainRun& run);

}  // namespace tg::train
