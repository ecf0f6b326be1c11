// Fuzzes load_checkpoint (train/checkpoint_file.cpp): the safetensors rules, then tapegrad's
// metadata (the format, the config JSON through config_from_json, the data state, the step, RNG
// and loss scaler fields) and the checks of the tensors against the model the config describes.
//
// Raw bytes rarely get through a safetensors header to the metadata JSON inside it, so an input is
// one of two kinds:
//  - a recipe: text whose first line names a set of model tensors, `charlm`, `textcls`,
//    `timeseries` (the state_dict of a tiny model, see tiny_model_tensors) or `none`, and whose
//    other lines are metadata entries `key=value` (split at the first '='). The target writes them
//    to a file with save_safetensors, so the fuzzer mutates the config and data-state JSON as
//    plain text, with no lengths or string escapes of the file format in the way. The recipes in
//    the corpus are the metadata of checkpoints that `tapegrad train` saved for those tiny models.
//  - anything else: a whole checkpoint file, written as is (the corpus holds tiny checkpoints of
//    each task saved by `tapegrad train`, optimizer state included).
//
// load_checkpoint must return a checkpoint or throw tg::Error. A bug is anything else (a crash,
// an AddressSanitizer or UBSan report, another exception, a leak, a hang), and also a returned
// checkpoint that does not fit the model its config describes, which load_checkpoint promises:
// see check_model_fits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/nn/models.h"
#include "tests/fuzz/fuzz_support.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/tasks.h"

namespace {

using tg::nn::NamedTensors;

// The recipes' tensors: the models `tapegrad train --dim 8 --heads 2 --layers 1 --max-len 16`
// builds for the data files the corpus's checkpoints were trained on (a vocabulary of 6 tokens
// with 2 labels, or 2 CSV columns forecast 1 step ahead). Built once.
const NamedTensors* tiny_model_tensors(std::string_view name) {
  static const auto models = [] {
    tg::nn::ModelConfig config;
    config.dim = 8;
    config.heads = 2;
    config.layers = 1;
    config.max_len = 16;
    return std::map<std::string, NamedTensors, std::less<>>{
        {"charlm", tg::nn::CharLM(/*vocab=*/6, config).state_dict()},
        {"textcls", tg::nn::TextClassifier(/*vocab=*/6, /*classes=*/2, config).state_dict()},
        {"timeseries", tg::nn::TimeSeriesModel(/*inputs=*/2, /*horizon=*/1, config).state_dict()},
        {"none", NamedTensors{}},
    };
  }();
  const auto found = models.find(name);
  return found == models.end() ? nullptr : &found->second;
}

// The checkpoint file for an input: a recipe turned into a file, or the input itself.
const std::string& write_checkpoint(std::string_view input) {
  const size_t first_line_end = std::min(input.find('\n'), input.size());
  const NamedTensors* tensors = tiny_model_tensors(input.substr(0, first_line_end));
  if (tensors == nullptr) return tg::fuzz::scratch().write(input);
  std::map<std::string, std::string> metadata;
  for (size_t start = first_line_end + 1; start < input.size();) {
    const size_t end = std::min(input.find('\n', start), input.size());
    const std::string_view line = input.substr(start, end - start);
    const size_t equals = std::min(line.find('='), line.size());
    metadata[std::string(line.substr(0, equals))] =
        equals < line.size() ? std::string(line.substr(equals + 1)) : std::string();
    start = end + 1;
  }
  tg::save_safetensors(tg::fuzz::scratch().path(), *tensors, metadata);
  return tg::fuzz::scratch().path();
}

// What eval, sample and train --resume do next with a loaded checkpoint: build the model its
// config and data state describe, and load the tensors into it. load_checkpoint has validated
// both, so an error here is a bug in that validation. Only for small models: the positional
// encoding alone is max_len x dim floats, and the fuzzer must not allocate much per input.
void check_model_fits(const tg::train::Checkpoint& checkpoint) {
  using namespace tg::train;
  const TrainConfig& config = checkpoint.config;
  if (config.max_len * config.dim > (1 << 16) || config.layers > 4) return;
  try {
    const DataState data = data_state_from_json(config, checkpoint.data_state);
    std::unique_ptr<tg::nn::Module> model;
    const auto count = [](const auto& items) { return static_cast<int64_t>(items.size()); };
    if (config.task == "charlm") {
      model = std::make_unique<tg::nn::CharLM>(data.vocab.size(), config.model_config());
    } else if (config.task == "textcls") {
      model = std::make_unique<tg::nn::TextClassifier>(data.vocab.size(), count(data.labels),
                                                        config.model_config());
    } else {
      model = std::make_unique<tg::nn::TimeSeriesModel>(count(data.columns), config.horizon,
                                                         config.model_config());
    }
    model->load_state_dict(checkpoint.model);
  } catch (const tg::Error& error) {
    tg::fuzz::die(std::string("load_checkpoint accepted a checkpoint that does not fit its model: ") +
                  error.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  try {
    const tg::train::Checkpoint checkpoint = tg::train::load_checkpoint(write_checkpoint(input));
    check_model_fits(checkpoint);
  } catch (const tg::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
