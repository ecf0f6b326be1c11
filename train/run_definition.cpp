#include "tapegrad/train/run_definition.h"

#include <algorithm>

#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/io/sha256.h"

namespace tg::train {
namespace {

// A JSON value as the error message shows it: a plain string without its quotes.
std::string definition_value(const nlohmann::json& value) {
  const std::string dumped = value.dump();
  if (value.is_string() && dumped == "\"" + value.get<std::string>() + "\"") {
    return value.get<std::string>();
  }
  return dumped;
}

// The config's settings as their flags: --task first, then the rest by name; --no-shuffle for
// `shuffle`. The data's path and the thread count are the rank's own choice.
void definition_add_config(dist::RunDefinition& definition, const TrainConfig& config) {
  const nlohmann::json settings = to_json(config);
  definition.emplace_back("--task", config.task);
  for (const auto& [key, value] : settings.items()) {
    if (key == "task" || key == "data" || key == "threads") continue;
    if (key == "shuffle") {
      definition.emplace_back("--no-shuffle", value.get<bool>() ? "false" : "true");
      continue;
    }
    std::string flag = "--" + key;
    std::replace(flag.begin(), flag.end(), '_', '-');
    definition.emplace_back(flag, definition_value(value));
  }
}

// What the task derived from the data (vocabulary, labels, column statistics): each part's size
// and a hash of its contents, so that the message stays one short line.
void definition_add_data_state(dist::RunDefinition& definition, const nlohmann::json& data_state) {
  for (const auto& [key, value] : data_state.items()) {
    if (key == "sha256") continue;  // the data file's own hash: a line of its own
    const std::string digest = sha256_hex(value.dump()).substr(0, 16);
    const std::string size = value.is_array() ? std::to_string(value.size()) + " entries, " : "";
    definition.emplace_back("the data's " + key, size + "SHA-256 " + digest + "...");
  }
}

// The model's parameters: how many, then each one's name, shape and dtype.
void definition_add_parameters(dist::RunDefinition& definition,
                               const nn::NamedTensors& parameters) {
  int64_t values = 0;
  for (const auto& [name, tensor] : parameters) values += tensor.numel();
  definition.emplace_back("the model's parameters", std::to_string(parameters.size()) +
                                                        " tensors, " + std::to_string(values) +
                                                        " values");
  for (const auto& [name, tensor] : parameters) {
    definition.emplace_back("parameter " + name,
                            shape_str(tensor.shape()) + " " + dtype_name(tensor.dtype()));
  }
}

}  // namespace

dist::RunDefinition run_definition(const RunFacts& facts) {
  dist::RunDefinition definition;
  definition.emplace_back("--resume", facts.resumed);
  definition_add_config(definition, facts.config);
  const auto count_or_none = [](int64_t count) {
    return count > 0 ? std::to_string(count) : std::string("none");
  };
  definition.emplace_back("--stop-after", count_or_none(facts.stop_after));
  // (they decide when every rank saves or stops: the ranks check the weights of each checkpoint)
  definition.emplace_back("--save-every", count_or_none(facts.save_every));
  definition.emplace_back("--save-best", facts.save_best ? "given" : "none");
  definition.emplace_back("--patience", count_or_none(facts.patience));
  definition.emplace_back("--data (SHA-256 of its contents)", facts.data_sha256);
  definition_add_data_state(definition, facts.data_state);
  definition.emplace_back("training examples", std::to_string(facts.examples));
  definition.emplace_back("planned steps", std::to_string(facts.planned_steps));
  definition.emplace_back("first step", std::to_string(facts.first_step));
  definition.emplace_back("last step", std::to_string(facts.last_step));
  definition_add_parameters(definition, facts.parameters);
  return definition;
}

}  // namespace tg::train
