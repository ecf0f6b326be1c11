#include "tapegrad/train/checkpoint_file.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <sstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/json_bytes.h"
#include "tapegrad/io/quoted_text.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/nn/positional_encoding.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/train/legacy_names.h"
#include "tapegrad/train/tasks.h"

namespace tg::train {
namespace {

constexpr const char* kFormat = "tapegrad-checkpoint-1";
constexpr const char* kExportFormat = "tapegrad-export-1";  // save_export: weights only
constexpr const char* kPositionalTable = "pos_encoding.pe";  // the tutorial-form models' table
constexpr const char* kOptimizerPrefix = "optimizer.";

std::string exact(double value) {  // round-trips through std::from_chars
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

// A metadata value as one line of an error message (JSON escapes, or byte values).
std::string quoted(const std::string& text) { return bytes_to_json(text).dump(); }

// ---- strict metadata numbers --------------------------------------------------------------------
// A checkpoint's numbers must be exactly what save_checkpoint writes: digits only for the counters
// (io/strict_numbers.h), a finite positive number for the loss scale.

int64_t parse_count(const std::string& text, const char* key) {
  const std::string what = std::string("metadata '") + key + "'";
  const uint64_t value = parse_uint64(text, what.c_str());
  TG_CHECK(value <= static_cast<uint64_t>(INT64_MAX), what, ": ", value, " is out of range");
  return static_cast<int64_t>(value);
}

uint64_t parse_seed(const std::string& text, const char* key) {
  return parse_uint64(text, (std::string("metadata '") + key + "'").c_str());
}

double parse_positive(const std::string& text, const char* key) {
  const std::string what = std::string("metadata '") + key + "'";
  const double value = parse_finite_double(text, what.c_str());
  TG_CHECK(value > 0, what, " must be positive, got ", quoted(text));
  return value;
}

// ---- metadata -----------------------------------------------------------------------------------

const std::string& required(const std::map<std::string, std::string>& metadata, const char* key) {
  const auto found = metadata.find(key);
  TG_CHECK(found != metadata.end(), "not a tapegrad training checkpoint (no '", key, "' in its metadata)");
  return found->second;
}

const std::string* optional_field(const std::map<std::string, std::string>& metadata, const char* key) {
  const auto found = metadata.find(key);
  return found == metadata.end() ? nullptr : &found->second;
}

// The validation record: absent (no evaluation yet, or a checkpoint from before --patience) or
// all three fields, a finite loss measured after a step in [1, step], and fewer evaluations since
// than steps.
void read_validation_record(const std::map<std::string, std::string>& metadata,
                            Checkpoint& checkpoint) {
  const std::string* loss = optional_field(metadata, "best_val_loss");
  const std::string* step = optional_field(metadata, "best_val_step");
  const std::string* since = optional_field(metadata, "evals_since_best");
  if (loss == nullptr && step == nullptr && since == nullptr) return;
  TG_CHECK(loss != nullptr && step != nullptr && since != nullptr, "metadata: best_val_loss, ",
           "best_val_step and evals_since_best go together (one of them is missing)");
  ValidationRecord& record = checkpoint.validation;
  record.best_loss = parse_finite_double(*loss, "metadata 'best_val_loss'");
  record.best_step = parse_count(*step, "best_val_step");
  record.evaluations_since_best = parse_count(*since, "evals_since_best");
  TG_CHECK(record.best_step >= 1 && record.best_step <= checkpoint.step, "metadata ",
           "'best_val_step' ", record.best_step, " is outside [1, ", checkpoint.step,
           "] (the checkpoint's steps)");
  TG_CHECK(record.evaluations_since_best < checkpoint.step, "metadata 'evals_since_best' ",
           record.evaluations_since_best, " is not below the checkpoint's ", checkpoint.step,
           " steps");
}

// The config, data state, step, RNG and loss scaler fields, each parsed strictly.
void read_metadata(const std::map<std::string, std::string>& metadata, Checkpoint& checkpoint) {
  const std::string& format = required(metadata, "format");
  TG_CHECK(format == kFormat || format == kExportFormat, "unknown checkpoint format ",
           quoted(format));
  checkpoint.weights_only = format == kExportFormat;
  try {
    checkpoint.config = config_from_json(nlohmann::json::parse(required(metadata, "config")));
    checkpoint.data_state = nlohmann::json::parse(required(metadata, "data"));
  } catch (const nlohmann::json::exception& error) {
    fail("malformed JSON in the metadata (", error.what(), ")");
  }
  if (checkpoint.weights_only) return;  // an export: no step, RNG, scaler or validation state
  checkpoint.step = parse_count(required(metadata, "step"), "step");
  checkpoint.rng.seed = parse_seed(required(metadata, "rng_seed"), "rng_seed");
  checkpoint.rng.offset = parse_seed(required(metadata, "rng_offset"), "rng_offset");
  // The scaler's fields are optional: checkpoints from before mixed precision lack them.
  if (const std::string* scale = optional_field(metadata, "scaler_scale")) {
    checkpoint.scaler.scale = parse_positive(*scale, "scaler_scale");
  }
  if (const std::string* tracker = optional_field(metadata, "scaler_growth_tracker")) {
    checkpoint.scaler.growth_tracker = parse_count(*tracker, "scaler_growth_tracker");
  }
  if (const std::string* skipped = optional_field(metadata, "skipped_steps")) {
    checkpoint.skipped_steps = parse_count(*skipped, "skipped_steps");
  }
  read_validation_record(metadata, checkpoint);
}

// ---- tensors ------------------------------------------------------------------------------------

// Every expected tensor is declared with its shape, and nothing else is: the first problem found,
// in state_dict order, is the error.
void check_model_tensors(const nn::NamedTensors& model, const nn::StateShapes& expected,
                         const std::string& task) {
  std::map<std::string, const Tensor*> declared;
  for (const auto& [name, t] : model) declared.emplace(name, &t);
  for (const auto& [name, shape] : expected) {
    const auto found = declared.find(name);
    TG_CHECK(found != declared.end(), "tensor ", quoted_text(name),
             " is missing (the config and data state imply it, with shape ", shape_str(shape), ")");
    TG_CHECK(found->second->shape() == shape, "tensor ", quoted_text(name), " has shape ",
             shape_str(found->second->shape()), " but the config and data state imply ", shape_str(shape));
    declared.erase(found);
  }
  TG_CHECK(declared.empty(), "unexpected tensor ",
           quoted_text(declared.empty() ? "" : declared.begin()->first), " (a ", task,
           " model with this config and data state has none of that name)");
}

// pos_encoding.pe, in the state_dict of the tutorial-form models, is optional in a file (those
// from before it was stored lack it); a stored one has --max-len rows (a checkpoint) or the
// tutorial's 5000 (an export) and holds the sinusoid. Takes it out of `model` and `expected`
// (what check_model_tensors then compares) after checking it.
void check_positional_table(nn::NamedTensors& model, nn::StateShapes& expected,
                            const TrainConfig& config) {
  const auto named_table = [](const auto& entry) { return entry.first == kPositionalTable; };
  const auto implied = std::find_if(expected.begin(), expected.end(), named_table);
  if (implied == expected.end()) return;  // a stored one is then an unexpected tensor
  expected.erase(implied);
  const auto stored = std::find_if(model.begin(), model.end(), named_table);
  if (stored == model.end()) return;
  const Tensor table = stored->second;
  model.erase(stored);
  const int64_t rows = table.dim() == 3 ? table.size(1) : 0;
  TG_CHECK(table.dim() == 3 && (rows == config.max_len || rows == nn::kTutorialMaxLen),
           "tensor '", kPositionalTable, "' has shape ", shape_str(table.shape()),
           " but the config implies [1, ", config.max_len, ", ", config.dim, "] (its --max-len)",
           " or, in an export, [1, ", nn::kTutorialMaxLen, ", ", config.dim, "]");
  nn::check_sinusoidal_buffer(table, config.dim, kPositionalTable);
}

// "3.exp_avg" -> 3; nullopt unless the name is digits, a dot and a buffer name.
std::optional<uint64_t> parameter_index(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == 0 || dot == std::string::npos || dot + 1 == name.size()) return std::nullopt;
  uint64_t index = 0;
  const char* digits_end = name.data() + dot;
  const auto [stop, error] = std::from_chars(name.data(), digits_end, index);  // digits only
  return error == std::errc() && stop == digits_end ? std::optional<uint64_t>(index) : std::nullopt;
}

// Values no optimizer writes: a negative step count, or a negative exp_avg_sq (Adam's running
// mean of squared gradients, whose square root the next step takes: NaN, then "divergence").
// NaN and Inf are check_finite's.
void check_optimizer_values(const std::string& stored, const std::string& buffer, const Tensor& t) {
  if (buffer != "step" && buffer != "exp_avg_sq") return;
  const std::vector<double> values = t.to_host_f64();
  const auto negative = std::find_if(values.begin(), values.end(), [](double v) { return v < 0; });
  if (negative == values.end()) return;
  fail("tensor ", quoted_text(stored), " holds ", *negative, " at element ",
       negative - values.begin(), ": ", buffer == "step" ? "a step count" : "exp_avg_sq",
       " must be >= 0");
}

// Optimizer entries against the parameters they belong to (`parameters` in the optimizer's
// order: named_parameters(), the state_dict without its persistent buffers).
void check_optimizer_tensors(const nn::NamedTensors& optimizer, const nn::StateShapes& parameters) {
  for (const auto& [name, t] : optimizer) {
    const std::string stored = kOptimizerPrefix + name;
    if (name == "step") {
      TG_CHECK(t.dim() == 0, "tensor ", quoted_text(stored), " must be a scalar, got shape ",
               shape_str(t.shape()));
      check_optimizer_values(stored, name, t);
      continue;
    }
    const std::optional<uint64_t> index = parameter_index(name);
    TG_CHECK(index.has_value(), "unexpected tensor ", quoted_text(stored), " (expected '",
             kOptimizerPrefix, "step' or '", kOptimizerPrefix, "<parameter index>.<buffer>')");
    TG_CHECK(*index < parameters.size(), "tensor ", quoted_text(stored), " names parameter ",
             *index, " but the model has ", parameters.size());
    const std::string buffer = name.substr(name.find('.') + 1);
    if (buffer == "step") {
      TG_CHECK(t.dim() == 0, "tensor ", quoted_text(stored), " has shape ", shape_str(t.shape()),
               " but a step count is a scalar");
      check_optimizer_values(stored, buffer, t);
      continue;
    }
    const auto& [parameter, shape] = parameters[*index];
    TG_CHECK(t.shape() == shape, "tensor ", quoted_text(stored), " has shape ",
             shape_str(t.shape()), " but parameter ", *index, " ('", parameter, "') implies ",
             shape_str(shape));
    check_optimizer_values(stored, buffer, t);
  }
}

template <typename T>
bool all_finite(const T* values, size_t count) {
  return std::all_of(values, values + count, [](T v) { return std::isfinite(v); });
}

// Integers and bools always are; f32 and f64 are scanned in place, half types through to_host_f64().
bool all_finite(const Tensor& t) {
  if (!is_floating(t.dtype())) return true;
  const Tensor dense = t.cpu().contiguous();
  const size_t count = static_cast<size_t>(dense.numel());
  if (dense.dtype() == DType::f32) return all_finite(dense.data_as<float>(), count);
  if (dense.dtype() == DType::f64) return all_finite(dense.data_as<double>(), count);
  const std::vector<double> values = dense.to_host_f64();
  return all_finite(values.data(), values.size());
}

void check_finite(const nn::NamedTensors& tensors, const std::string& prefix) {
  const std::string bad = first_non_finite(tensors);
  TG_CHECK(bad.empty(), "tensor ", quoted_text(prefix + bad), " holds NaN/Inf values");
}

}  // namespace

std::string first_non_finite(const nn::NamedTensors& tensors) {
  for (const auto& [name, t] : tensors) {
    if (!all_finite(t)) return name;
  }
  return "";
}

namespace {

// "3e+38 in 'embedding.weight'": the largest |value| among the model's floating tensors.
std::string checkpoint_largest_weight(const nn::NamedTensors& model) {
  double largest = 0;
  std::string where;
  for (const auto& [name, t] : model) {
    if (!is_floating(t.dtype())) continue;
    for (const double v : t.to_host_f64()) {
      if (std::abs(v) > largest) largest = std::abs(v), where = name;
    }
  }
  std::ostringstream text;
  text << largest << " in " << quoted_text(where);
  return text.str();
}

}  // namespace

void check_finite_result(double value, const std::string& what, const Checkpoint& checkpoint) {
  TG_CHECK(std::isfinite(value), what, " is ", value, ", not a finite number: the model overflows ",
           "on this input (its largest weight is ", checkpoint_largest_weight(checkpoint.model),
           "; f32 holds up to 3.4e+38)");
}

void check_finite_results(const std::vector<double>& values, const std::string& what,
                          const Checkpoint& checkpoint) {
  const auto bad =
      std::find_if(values.begin(), values.end(), [](double v) { return !std::isfinite(v); });
  if (bad == values.end()) return;
  const std::string element = " (element " + std::to_string(bad - values.begin()) + ")";
  check_finite_result(*bad, what + element, checkpoint);
}

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  nn::NamedTensors tensors = checkpoint.model;
  for (const auto& [name, t] : checkpoint.optimizer) tensors.emplace_back(kOptimizerPrefix + name, t);
  std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"config", to_json(checkpoint.config).dump()},
      {"data", checkpoint.data_state.dump()},
      {"step", std::to_string(checkpoint.step)},
      {"rng_seed", std::to_string(checkpoint.rng.seed)},
      {"rng_offset", std::to_string(checkpoint.rng.offset)},
      {"scaler_scale", exact(checkpoint.scaler.scale)},
      {"scaler_growth_tracker", std::to_string(checkpoint.scaler.growth_tracker)},
      {"skipped_steps", std::to_string(checkpoint.skipped_steps)},
  };
  const ValidationRecord& record = checkpoint.validation;
  if (!record.empty()) {
    metadata["best_val_loss"] = exact(record.best_loss);
    metadata["best_val_step"] = std::to_string(record.best_step);
    metadata["evals_since_best"] = std::to_string(record.evaluations_since_best);
  }
  save_safetensors(path, tensors, metadata);
}

void validate_checkpoint(const Checkpoint& checkpoint) {
  const DataState data = data_state_from_json(checkpoint.config, checkpoint.data_state);
  const nn::ModelStateShapes f32 = model_state_shapes(checkpoint.config, data);
  const nn::QuantMode mode = nn::parse_quant_mode(checkpoint.config.quantization);
  const nn::ModelStateShapes expected = nn::quantized_state_shapes(f32, mode);
  nn::check_quantized_state(checkpoint.model, f32, mode);  // the mode, dtypes and scales
  nn::NamedTensors model = checkpoint.model;
  nn::StateShapes expected_model = expected.state_dict();
  check_positional_table(model, expected_model, checkpoint.config);
  check_model_tensors(model, expected_model, checkpoint.config.task);
  TG_CHECK(!checkpoint.weights_only || checkpoint.optimizer.empty(), "an export (weights only) ",
           "holds optimizer state ('", kOptimizerPrefix,
           checkpoint.optimizer.empty() ? "" : checkpoint.optimizer.front().first, "')");
  TG_CHECK(mode == nn::QuantMode::none || checkpoint.optimizer.empty(), "a ", checkpoint.config.quantization,
           "-quantized checkpoint holds optimizer state ('", kOptimizerPrefix,
           checkpoint.optimizer.empty() ? "" : checkpoint.optimizer.front().first,
           "'), but nothing of it can be trained");
  check_optimizer_tensors(checkpoint.optimizer, expected.parameters);
  check_finite(checkpoint.model, "");
  check_finite(checkpoint.optimizer, kOptimizerPrefix);
}

namespace {

// The model's pos_encoding.pe, when its state_dict has one: the table computed for the config's
// max_len (what the model builds), in place of the stored one (validate_checkpoint checked it) or
// added where the file has none.
void use_computed_positional_table(Checkpoint& checkpoint) {
  const DataState data = data_state_from_json(checkpoint.config, checkpoint.data_state);
  const nn::StateShapes buffers = model_state_shapes(checkpoint.config, data).buffers;
  const auto named_table = [](const auto& entry) { return entry.first == kPositionalTable; };
  if (std::none_of(buffers.begin(), buffers.end(), named_table)) return;
  const Tensor table = nn::sinusoidal_buffer(checkpoint.config.max_len, checkpoint.config.dim);
  const auto stored = std::find_if(checkpoint.model.begin(), checkpoint.model.end(), named_table);
  if (stored != checkpoint.model.end()) stored->second = table;
  else checkpoint.model.emplace_back(kPositionalTable, table);
}

}  // namespace

void save_export(const std::string& path, const Checkpoint& checkpoint) {
  const TrainConfig& config = checkpoint.config;
  TG_CHECK(config.quantization == "none", "the checkpoint is int8-quantized (",
           config.quantization, "): an export holds f32 weights for PyTorch's classes; export ",
           "the f32 checkpoint it was quantized from");
  TG_CHECK(nn::kTutorialMaxLen * config.dim <= Limits::positions, "the tutorial's positional ",
           "table [1, ", nn::kTutorialMaxLen, ", ", config.dim, "] would have more than the ",
           Limits::positions, " entries a table may have");
  nn::NamedTensors tensors = checkpoint.model;  // the state_dict; no optimizer state
  for (auto& [name, t] : tensors) {
    if (name == kPositionalTable) t = nn::sinusoidal_buffer(nn::kTutorialMaxLen, config.dim);
  }
  save_safetensors(path, tensors, {{"format", kExportFormat}, {"config", to_json(config).dump()},
                                   {"data", checkpoint.data_state.dump()}});
}

void load_model(nn::Module& model, const Checkpoint& checkpoint) {
  nn::quantize_structure(model, nn::parse_quant_mode(checkpoint.config.quantization));
  model.load_state_dict(checkpoint.model);
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  Checkpoint checkpoint;
  try {
    read_metadata(file.metadata, checkpoint);
    const std::string prefix = kOptimizerPrefix;
    for (auto& [name, t] : file.tensors) {
      if (name.rfind(prefix, 0) == 0) checkpoint.optimizer.emplace_back(name.substr(prefix.size()), t);
      else checkpoint.model.emplace_back(name, t);
    }
    rename_legacy_tensors(checkpoint.config.task, checkpoint.model);  // e.g. classifier.* -> fc.*
    validate_checkpoint(checkpoint);
    use_computed_positional_table(checkpoint);
  } catch (const Error& error) {
    fail("checkpoint ", path, ": ", error.what());
  } catch (const nlohmann::json::exception& error) {  // a JSON value of an unexpected type
    fail("checkpoint ", path, ": malformed metadata (", error.what(), ")");
  }
  return checkpoint;
}

}  // namespace tg::train
