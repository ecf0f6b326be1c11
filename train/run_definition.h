#pragma once
// What defines a data-parallel training run: the settings every rank of a job must share, which the
// trainer compares across the ranks before the first step (distributed/job.h, check_ranks_agree).
//
// In this order, one (name, value) pair each:
//   --resume                   "none", or the checkpoint's step and the SHA-256 of its file
//   --task, then every other setting of the config, by name: the model (--dim, --layers,
//                              --heads, --attention, ...), the optimisation (--optimizer, --lr,
//                              --seed, --batch, --steps, --amp, --no-shuffle, ...) and the data
//                              pipeline (--context, --tokenizer, ...); not --data's path nor
//                              --threads, which may differ between ranks
//   --stop-after               "none" or the count
//   --save-every, --save-best, --patience
//                              "none", or the count; whether --save-best was given (its path is
//                              rank 0's alone)
//   --data (SHA-256 ...)       the data file's content hash, then what the task derived from
//                              it (the vocabulary, labels, statistics: their sizes and a hash)
//   training examples, planned/first/last step, and every parameter's name, shape and dtype
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "tapegrad/distributed/job.h"
#include "tapegrad/nn/module.h"
#include "tapegrad/train/config.h"

namespace tg::train {

// The facts a rank's run is defined by, once its setup is done.
struct RunFacts {
  const TrainConfig& config;
  int64_t stop_after = 0;        // 0: none
  int64_t save_every = 0;        // 0: none
  bool save_best = false;        // --save-best given
  int64_t patience = 0;          // 0: none
  std::string resumed;           // "none", or "step N, SHA-256 H" of the --resume checkpoint
  std::string data_sha256;       // the data file's
  const nlohmann::json& data_state;  // the task's (Task::data_state)
  int64_t examples = 0, planned_steps = 0, first_step = 0, last_step = 0;
  const nn::NamedTensors& parameters;
};

dist::RunDefinition run_definition(const RunFacts& facts);

}  // namespace tg::train
