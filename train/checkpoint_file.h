#pragma once
// Training checkpoints: one safetensors file holding the model's state_dict under PyTorch's names
// (so `model.load_state_dict({k: v for k, v in f.items() if not k.startswith("optimizer.")})`
// works in PyTorch), the optimizer state under "optimizer.", and in the metadata the training
// config, the data encoding (vocabulary, labels or normalisation), the step, the RNG state and
// the loss scaler's state.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/module.h"
#include "tapegrad/train/checkpoint_policy.h"
#include "tapegrad/train/config.h"

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
  // The best validation loss so far and the evaluations since (--patience, --save-best); stored
  // once there was an evaluation (best_val_loss, best_val_step, evals_since_best), else empty.
  ValidationRecord validation;
  // An export (save_export, `tapegrad export`): the model's state_dict alone, with its config and
  // data state; no optimizer state, step, RNG or scaler state. It evaluates and samples as a
  // checkpoint does, but cannot be resumed.
  bool weights_only = false;
};

// Written atomically (temporary file, then rename): a failed save leaves `path` as it was.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);

// The file `tapegrad export` writes, atomically: the model's state_dict alone, under PyTorch's
// names, with pos_encoding.pe (the tutorial-form models) at the tutorial's max_len, 5000 rows, so
// that the tutorial's classes load it with strict=True; metadata: format "tapegrad-export-1",
// config and data (what load_checkpoint needs to rebuild the model and encode its data), nothing
// of the training's state. An int8 checkpoint is refused (tg::Error): its i8 weights and scales
// have no place in the tutorial's f32 classes.
void save_export(const std::string& path, const Checkpoint& checkpoint);

// Reads and validates the whole file before anything is built from it, with one tg::Error
// "checkpoint <path>: <problem>": the safetensors rules; tensors of older releases renamed to
// today's names (train/legacy_names.h); the metadata (strict decimal step, RNG
// and scaler fields, the config, the data state); then validate_checkpoint(). The one loader of
// eval, sample, plot and train --resume: what it returns fits the model its config describes.
// Also reads an export (save_export: weights_only, step 0). pos_encoding.pe, the tutorial-form
// models' sinusoidal table, comes back as the table computed for the config's max_len, whether
// the file held it (checked by validate_checkpoint) or not (files from before it was stored).
Checkpoint load_checkpoint(const std::string& path);

// The checks on a decoded checkpoint, cheap and before any model exists: the data state is
// well-formed (data_state_from_json); every model tensor is one the config and data state imply
// (model_state_shapes), none missing, none unexpected, each of the implied shape (except
// pos_encoding.pe, which may be missing, and may have --max-len rows or the tutorial's 5000, but
// must hold the sinusoid: nn::check_sinusoidal_buffer; a table that disagrees is refused, since
// tapegrad computes its own and would not compute what the file says); each optimizer
// entry is "step" or "<parameter index>.<buffer>" with the parameter's shape ("step" buffers are
// scalars); no step count and no Adam exp_avg_sq is negative ("exp_avg_sq must be >= 0": its
// square root would turn the next step into NaN); no floating tensor, model or optimizer, holds
// NaN or Inf. Throws tg::Error naming the
// tensor (and both shapes) or the field. The optimizer's own load_state still checks the buffer
// names its kind keeps and their dtypes, before it changes anything. A quantized checkpoint
// (config.quantization) must hold the quantized Linears' tensors (nn::quantized_state_shapes) with
// their dtypes and valid scales (nn::check_quantized_state), and no optimizer state.
void validate_checkpoint(const Checkpoint& checkpoint);

// Fills a model freshly built from checkpoint.config (make_task, or a model's constructor) with the
// checkpoint's tensors: for a quantized checkpoint (config.quantization dynamic or static) its
// Linears first become int8 Linears (nn::quantize_structure), then load_state_dict. What eval,
// sample, plot and analyze call, so that they load quantized checkpoints as any other.
void load_model(nn::Module& model, const Checkpoint& checkpoint);

// A number computed from a checkpoint's model (a loss, logits, attention weights, a head metric)
// that is not finite: finite weights can still overflow f32 in the forward pass (3e38 times 2 is
// Inf, and Inf - Inf is NaN). tg::Error naming `what`, the value and the checkpoint's largest
// weight, the usual cause. eval, analyze, plot attention and sample all refuse such a result with
// it (exit 2) rather than print NaN. check_finite_results names the first bad element.
void check_finite_result(double value, const std::string& what, const Checkpoint& checkpoint);
void check_finite_results(const std::vector<double>& values, const std::string& what,
                          const Checkpoint& checkpoint);

// The name of the first floating tensor holding a NaN or an infinity, or "" when all are finite.
// (train checks its weights with it before saving: it never writes what load_checkpoint refuses.)
std::string first_non_finite(const nn::NamedTensors& tensors);

}  // namespace tg::train
