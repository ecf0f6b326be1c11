#include "train/checkpoint_file.h"

#include <cmath>
#include <cstdio>

#include "autograd/error.h"
#include "nn/safetensors.h"

namespace tg::train {
namespace {

constexpr const char* kFormat = "tapegrad-checkpoint-1";
constexpr const char* kOptimizerPrefix = "optimizer.";

std::string exact(double value) {  // round-trips through std::stod
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  return text;
}

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint) {
  nn::NamedTensors tensors = checkpoint.model;
  for (const auto& [name, t] : checkpoint.optimizer) tensors.emplace_back(kOptimizerPrefix + name, t);
  const std::map<std::string, std::string> metadata = {
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
  save_safetensors(path, tensors, metadata);
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  auto field = [&](const char* key) -> const std::string& {
    const auto found = file.metadata.find(key);
    TG_CHECK(found != file.metadata.end(), path, " is not a tapegrad training checkpoint (no '", key,
             "' in its metadata)");
    return found->second;
  };
  TG_CHECK(field("format") == kFormat, path, ": unknown checkpoint format '", field("format"), "'");
  Checkpoint checkpoint;
  try {
    checkpoint.config = config_from_json(nlohmann::json::parse(field("config")));
    checkpoint.data_state = nlohmann::json::parse(field("data"));
    checkpoint.step = std::stoll(field("step"));
    checkpoint.rng.seed = std::stoull(field("rng_seed"));
    checkpoint.rng.offset = std::stoull(field("rng_offset"));
    // The scaler's fields are optional: checkpoints from before mixed precision lack them.
    const auto optional = [&](const char* key) -> const std::string* {
      const auto found = file.metadata.find(key);
      return found == file.metadata.end() ? nullptr : &found->second;
    };
    if (const std::string* scale = optional("scaler_scale")) checkpoint.scaler.scale = std::stod(*scale);
    if (const std::string* tracker = optional("scaler_growth_tracker")) {
      checkpoint.scaler.growth_tracker = std::stoll(*tracker);
    }
    if (const std::string* skipped = optional("skipped_steps")) checkpoint.skipped_steps = std::stoll(*skipped);
  } catch (const Error& error) {
    fail(path, ": ", error.what());
  } catch (const std::exception& error) {
    fail(path, ": malformed checkpoint metadata (", error.what(), ")");
  }
  TG_CHECK(checkpoint.step >= 0, path, ": negative step in the metadata");
  TG_CHECK(checkpoint.skipped_steps >= 0 && checkpoint.scaler.growth_tracker >= 0 &&
               checkpoint.scaler.scale > 0 && std::isfinite(checkpoint.scaler.scale),
           path, ": bad loss scaler state in the metadata");
  const std::string prefix = kOptimizerPrefix;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(prefix, 0) == 0) checkpoint.optimizer.emplace_back(name.substr(prefix.size()), t);
    else checkpoint.model.emplace_back(name, t);
  }
  return checkpoint;
}

}  // namespace tg::train
