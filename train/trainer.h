#pragma once
// The training loop behind `tapegrad train`.
#include <cstdint>
#include <set>
#include <string>

#include "tapegrad/train/config.h"
#include "tapegrad/train/grad_stats.h"
#include "tapegrad/runtime/profile_schedule.h"

namespace tg::train {

struct TrainRun {
  TrainConfig config;
  std::string save;       // final checkpoint (empty with --resume: the --resume file, saved back)
  std::string save_init;  // the initial weights, before any step
  std::string resume;     // continue from this checkpoint (config, weights, optimizer, step, RNG)
  std::string log;        // CSV, one row per optimizer step
  bool json = false;      // last stdout line: one JSON object
  bool profile = false;   // per-op table after training
  std::string profile_trace;         // Chrome trace of the steps (runtime/trace.h), written at the end
  ProfileSchedule profile_schedule;  // which steps the trace keeps (default: all, up to its cap)
  std::string grad_stats;            // CSV of per-parameter gradient health (train/grad_stats.h)
  int64_t grad_stats_every = kDefaultGradStatsEvery;  // rows on the first step and every N-th
  int64_t stop_after = 0; // stop after this many steps of this run (then save), 0: run to the end
  // Checkpoints during training (train/checkpoint_policy.h): the --save checkpoint also every N
  // steps (0: never), the best-by-validation checkpoint, and the evaluations without improvement
  // after which the run ends (0: none).
  int64_t save_every = 0;
  std::string save_best;
  int64_t patience = 0;
  std::set<std::string> given;  // the options typed on the command line (--resume checks them)
};

// The exit code of a run that diverged (a NaN or infinite loss): no checkpoint was written.
inline constexpr int kExitDiverged = 3;

// A run stopped by SIGINT, SIGTERM or SIGHUP (train/stop_signals.h) exits with 128 + the
// signal's number: 130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP.
inline constexpr int kExitSignalBase = 128;
// A run stopped because a diagnostic output (--log, --grad-stats, --save-best) failed mid-run:
// --save was written first, then the failure reported, as any error is (exit code 2).
inline constexpr int kExitOutputFailed = 2;
// In a data-parallel job, how long a signalled step may take before the signal ends the process
// without a save (a rank that died leaves the others waiting; the launcher's SIGKILL follows its
// SIGTERM within about a second): train/stop_signals.h.
inline constexpr int kStopGraceMs = 500;

// Returns the exit code (0, kExitDiverged, kExitOutputFailed, or kExitSignalBase + a signal); bad
// data or settings throw tg::Error.
int train(const TrainRun& run);

}  // namespace tg::train
