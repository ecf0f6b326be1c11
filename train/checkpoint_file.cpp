#include "train/checkpoint_file.h"

#include "autograd/error.h"
#include "nn/safetensors.h"

namespace tg::train {
namespace {

constexpr const char* kFormat = "tapegrad-checkpoint-1";
constexpr const char* kOptimizerPrefix = "optimizer.";

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
  };
  save_safetensors(path, tensors, metadata);
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsFile file = load_safetensors(path);
  auto field = [&](const char* key) -> const std::string& {
    const auto found = file.metadata.find(key);
    check(found != file.metadata.end(), path, " is not a tapegrad training checkpoint (no '", key,
          "' in its metadata)");
    return found->second;
  };
  check(field("format") == kFormat, path, ": unknown checkpoint format '", field("format"), "'");
  Checkpoint checkpoint;
  try {
    checkpoint.config = config_from_json(nlohmann::json::parse(field("config")));
    checkpoint.data_state = nlohmann::json::parse(field("data"));
    checkpoint.step = std::stoll(field("step"));
    checkpoint.rng.seed = std::stoull(field("rng_seed"));
    checkpoint.rng.offset = std::stoull(field("rng_offset"));
  } catch (const Error& error) {
    fail(path, ": ", error.what());
  } catch (const std::exception& error) {
    fail(path, ": malformed checkpoint metadata (", error.what(), ")");
  }
  check(checkpoint.step >= 0, path, ": negative step in the metadata");
  const std::string prefix = kOptimizerPrefix;
  for (auto& [name, t] : file.tensors) {
    if (name.rfind(prefix, 0) == 0) checkpoint.optimizer.emplace_back(name.substr(prefix.size()), t);
    else checkpoint.model.emplace_back(name, t);
  }
  return checkpoint;
}

}  // namespace tg::train
