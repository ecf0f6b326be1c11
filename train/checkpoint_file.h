#pragma once
// Training checkpoints: one safetensors file holding the model's state_dict under PyTorch's names
// (so `model.load_state_dict({k: v for k, v in f.items() if not k.startswith("optimizer.")})`
// works in PyTorch), the optimizer state under "optimizer.", and in the metadata the training
// config, the data encoding (vocabulary, labels or normalisation), the step, the RNG state and
// the loss scaler's state.
#include <string>

#include <nlohmann/json.hpp>

#include "autograd/rng.h"
#include "nn/grad_scaler.h"
#include "nn/module.h"
#include "train/config.h"

namespace tg::train {

struct Checkpoint {
  TrainConfig config;
  nlohmann::json data_state;
  nn::NamedTensors model;
  nn::NamedTensors optimizer;  // names without the "optimizer." prefix; empty if none was saved
  int64_t step = 0;            // optimizer steps taken
  RngState rng;
  GradScalerState scaler;     // the loss scale (--amp fp16); defaults in older checkpoints
  int64_t skipped_steps = 0;  // optimizer steps the scaler skipped so far (inf/NaN gradients)
};

// Written atomically (temporary file, then rename): a failed save leaves `path` as it was.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
// Validates the file (safetensors rules, then tapegrad's metadata) with one clear tg::Error.
Checkpoint load_checkpoint(const std::string& path);

}  // namespace tg::train
