// Checkpoints (train/checkpoint_file.cpp): a faithful round trip, and load_checkpoint refusing,
// with one tg::Error naming the problem and before any model is built, every way a hostile file
// can lie: metadata numbers, the data state's counts, tensor names and shapes, optimizer entries
// and non-finite values. Also the data state's byte-string encoding (train/tasks.cpp).
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <tuple>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/temp_files.h"
#include "tapegrad/io/json_bytes.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/tasks.h"

using namespace tg;
using namespace tg::train;
using Catch::Contains;

namespace {

TrainConfig small_config(const std::string& task, int64_t layers) {
  TrainConfig config;
  config.task = task;
  config.data = "unused.txt";
  config.dim = 8;
  config.heads = 2;
  config.layers = layers;
  config.max_len = 16;
  config.context = 8;
  config.window = 4;
  config.horizon = 2;
  return config;
}

Vocabulary small_vocabulary() {
  Vocabulary vocab;
  for (const char* token : {"a", "b", "\xFF", "\n"}) vocab.add(token);
  return vocab;
}

// One AdamW step on `model`, so that the optimizer state holds every per-parameter buffer.
nn::NamedTensors optimizer_state_after_one_step(nn::Module& model, const Tensor& loss) {
  AdamW optimizer(model.parameters());
  loss.backward();
  optimizer.step();
  return optimizer.state();
}

Checkpoint charlm_checkpoint(int64_t layers = 1) {
  manual_seed(5);
  const TrainConfig config = small_config("charlm", layers);
  const Vocabulary vocab = small_vocabulary();
  nn::CharLM model(vocab.size(), config.model_config());
  const Tensor loss = sum(model.forward(from_indices({2, 3, 4, 5}, {1, 4})));
  return {.config = config, .data_state = {{"vocab", vocabulary_to_json(vocab)}}, .model = model.state_dict(),
          .optimizer = optimizer_state_after_one_step(model, loss), .step = 1, .rng = {.seed = 7, .offset = 9},
          .scaler = {.scale = 1024.0, .growth_tracker = 3}, .skipped_steps = 2};
}

Checkpoint textcls_checkpoint(const std::vector<std::string>& labels) {
  manual_seed(6);
  const TrainConfig config = small_config("textcls", 1);
  const Vocabulary vocab = small_vocabulary();
  nn::TextClassifier model(vocab.size(), static_cast<int64_t>(labels.size()), config.model_config());
  nlohmann::json stored_labels = nlohmann::json::array();
  for (const std::string& label : labels) stored_labels.push_back(bytes_to_json(label));
  return {.config = config, .data_state = {{"vocab", vocabulary_to_json(vocab)}, {"labels", stored_labels}},
          .model = model.state_dict()};
}

Checkpoint timeseries_checkpoint() {
  manual_seed(7);
  TrainConfig config = small_config("timeseries", 1);
  config.target = "y";
  nn::TimeSeriesModel model(3, config.horizon, config.model_config());
  const nlohmann::json state = {{"columns", {"t", "y", "z"}}, {"target_column", 1},
                                {"mean", {0.5, 1.0, -2.0}}, {"stddev", {1.0, 2.0, 0.25}}};
  return {.config = config, .data_state = state, .model = model.state_dict()};
}

// Saves `checkpoint`, lets `edit` change the file's tensors and metadata as an attacker would,
// and returns the path of the edited file.
std::string edited(const testing::TempDir& dir, const Checkpoint& checkpoint,
                   const std::function<void(SafetensorsFile&)>& edit) {
  const std::string path = dir.file("edited.safetensors");
  save_checkpoint(path, checkpoint);
  SafetensorsFile file = load_safetensors(path);
  edit(file);
  save_safetensors(path, file.tensors, file.metadata);
  return path;
}

Tensor& tensor_named(SafetensorsFile& file, const std::string& name) {
  for (auto& [key, t] : file.tensors) {
    if (key == name) return t;
  }
  FAIL("no tensor " << name);
  throw std::logic_error("unreachable");
}

void edit_data_state(SafetensorsFile& file, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json state = nlohmann::json::parse(file.metadata.at("data"));
  edit(state);
  file.metadata["data"] = state.dump();
}

void edit_config(SafetensorsFile& file, const char* key, const nlohmann::json& value) {
  nlohmann::json config = nlohmann::json::parse(file.metadata.at("config"));
  config[key] = value;
  file.metadata["config"] = config.dump();
}

// load_checkpoint refuses the edited file with an error naming the file and saying `expected`.
void require_refused(const testing::TempDir& dir, const Checkpoint& checkpoint,
                     const std::function<void(SafetensorsFile&)>& edit, const std::string& expected) {
  const std::string path = edited(dir, checkpoint, edit);
  REQUIRE_THROWS_WITH(load_checkpoint(path), Contains("checkpoint " + path + ": ") && Contains(expected));
}

}  // namespace

TEST_CASE("checkpoint: save and load round-trip every field", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint saved = charlm_checkpoint();
  save_checkpoint(dir.file("lm.st"), saved);
  const Checkpoint loaded = load_checkpoint(dir.file("lm.st"));
  REQUIRE(to_json(loaded.config) == to_json(saved.config));
  REQUIRE(loaded.data_state == saved.data_state);
  REQUIRE(loaded.step == 1);
  REQUIRE(loaded.rng.seed == 7);
  REQUIRE(loaded.rng.offset == 9);
  REQUIRE(loaded.scaler.scale == 1024.0);
  REQUIRE(loaded.scaler.growth_tracker == 3);
  REQUIRE(loaded.skipped_steps == 2);
  REQUIRE(loaded.model.size() == saved.model.size());
  for (size_t i = 0; i < saved.model.size(); ++i) {
    REQUIRE(loaded.model[i].first == saved.model[i].first);
    REQUIRE(loaded.model[i].second.to_host_f64() == saved.model[i].second.to_host_f64());
  }
  REQUIRE(loaded.optimizer.size() == saved.optimizer.size());
  REQUIRE(loaded.optimizer.size() == 1 + 3 * saved.model.size());  // step, then 3 Adam buffers each
}

TEST_CASE("checkpoint: the validation record (--patience, --save-best) round-trips, checked",
          "[checkpoint]") {
  testing::TempDir dir;
  Checkpoint checkpoint = charlm_checkpoint();
  // No evaluation yet: nothing stored, an empty record read back.
  save_checkpoint(dir.file("none.st"), checkpoint);
  REQUIRE(load_safetensors(dir.file("none.st")).metadata.count("best_val_loss") == 0);
  REQUIRE(load_checkpoint(dir.file("none.st")).validation.empty());
  // Best 0.1 (no short decimal in binary: stored exactly) after step 6 of 10, 3 evaluations since.
  checkpoint.step = 10;
  checkpoint.validation = {.best_loss = 0.1, .best_step = 6, .evaluations_since_best = 3};
  save_checkpoint(dir.file("lm.st"), checkpoint);
  const ValidationRecord loaded = load_checkpoint(dir.file("lm.st")).validation;
  REQUIRE(loaded.best_loss == 0.1);
  REQUIRE(loaded.best_step == 6);
  REQUIRE(loaded.evaluations_since_best == 3);
  const auto with = [&](const std::string& key, const std::string& value) {
    return edited(dir, checkpoint, [&](SafetensorsFile& file) {
      if (value == "(none)") file.metadata.erase(key);
      else file.metadata[key] = value;
    });
  };
  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {"best_val_loss", "nan", "'best_val_loss'"},
      {"best_val_loss", "inf", "'best_val_loss'"},
      {"best_val_loss", "0.5x", "'best_val_loss'"},
      {"best_val_step", "0", "'best_val_step' 0 is outside [1, 10]"},
      {"best_val_step", "11", "'best_val_step' 11 is outside [1, 10]"},
      {"best_val_step", "-1", "'best_val_step'"},
      {"evals_since_best", "10", "'evals_since_best' 10 is not below the checkpoint's 10 steps"},
      {"evals_since_best", "(none)", "go together"},
      {"best_val_loss", "(none)", "go together"}};
  for (const auto& [key, value, expected] : bad) {
    INFO(key << " = '" << value << "'");
    REQUIRE_THROWS_WITH(load_checkpoint(with(key, value)), Contains(expected));
  }
}

TEST_CASE("checkpoint: metadata numbers are strict decimals", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  const auto with = [&](const std::string& key, const std::string& value) {
    return edited(dir, checkpoint, [&](SafetensorsFile& file) { file.metadata[key] = value; });
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"step", "12abc"}, {"step", "-1"}, {"step", "+4"}, {"step", "1e3"}, {"step", " 5"}, {"step", "5 "},
      {"step", ""}, {"step", "9223372036854775808"},  // INT64_MAX + 1
      {"rng_seed", "-1"}, {"rng_seed", "18446744073709551616"},  // UINT64_MAX + 1
      {"rng_seed", "0x10"}, {"rng_offset", " 5"}, {"rng_offset", "1.0"},
      {"scaler_growth_tracker", "-2"}, {"scaler_growth_tracker", "3 steps"},
      {"skipped_steps", "99999999999999999999999"}, {"skipped_steps", "-0"},
      {"scaler_scale", "inf"}, {"scaler_scale", "nan"}, {"scaler_scale", "0"}, {"scaler_scale", "-1"},
      {"scaler_scale", "1.5x"}, {"scaler_scale", " 2"}, {"scaler_scale", ""}, {"scaler_scale", "1e999"},
      {"scaler_scale", "0x1p4"}};
  for (const auto& [key, value] : bad) {
    INFO(key << " = '" << value << "'");
    REQUIRE_THROWS_WITH(load_checkpoint(with(key, value)), Contains("'" + key + "'"));
  }
  // The extremes that fit, and a float in exponent form (what %.17g writes for large scales).
  REQUIRE(load_checkpoint(with("rng_seed", "18446744073709551615")).rng.seed == UINT64_MAX);
  REQUIRE(load_checkpoint(with("step", "9223372036854775807")).step == std::numeric_limits<int64_t>::max());
  REQUIRE(load_checkpoint(with("scaler_scale", "1.5e+21")).scaler.scale == 1.5e21);
}

TEST_CASE("checkpoint: the vocabulary must fit the model", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  const auto vocab_edit = [](nlohmann::json vocab) {
    return [vocab](SafetensorsFile& file) {
      edit_data_state(file, [&](nlohmann::json& state) { state["vocab"] = vocab; });
    };
  };
  // One symbol, with the embedding and head cut to one row: what made `sample` write past a
  // vector's end.
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    edit_data_state(file, [](nlohmann::json& state) { state["vocab"] = {"<pad>"}; });
    for (const char* name : {"embedding.weight", "head.weight", "head.bias"}) {
      tensor_named(file, name) = tensor_named(file, name).narrow(0, 0, 1).contiguous();
    }
  }, "'vocab' must start with \"<pad>\", \"<unk>\"");
  require_refused(dir, checkpoint, vocab_edit({"<unk>", "<pad>", "a", "b", "c", "d"}), "must start with");
  require_refused(dir, checkpoint, vocab_edit({"<pad>", "<unk>", "a", "b", "a", "d"}), "'vocab' holds \"a\" twice");
  require_refused(dir, checkpoint, vocab_edit({"<pad>", "<unk>", "a", {255}, {255}, "d"}), "'vocab' holds [255] twice");
  require_refused(dir, checkpoint, vocab_edit("<pad><unk>ab"), "'vocab' must be an array");
  require_refused(dir, checkpoint, vocab_edit({"<pad>", "<unk>", "a", 7, "c", "d"}), "vocab");
  require_refused(dir, checkpoint, vocab_edit({"<pad>", "<unk>", "a", {256}, "c", "d"}), "vocab");
  // One token more than the embedding has rows: the embedding is named, with both shapes.
  require_refused(dir, checkpoint, vocab_edit({"<pad>", "<unk>", "a", "b", "c", "d", "e"}),
                  "tensor 'embedding.weight' has shape [6, 8] but the config and data state imply [7, 8]");
  // The embedding matches a shorter vocabulary, the head does not.
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    edit_data_state(file, [](nlohmann::json& state) { state["vocab"] = {"<pad>", "<unk>", "a", "b", "c"}; });
    tensor_named(file, "embedding.weight") = tensor_named(file, "embedding.weight").narrow(0, 0, 5).contiguous();
  }, "tensor 'head.weight' has shape [6, 8] but the config and data state imply [5, 8]");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) { file.metadata["data"] = "{}"; },
                  "the field 'vocab' is missing");
  // The training data's hash (train --resume compares it) is optional, but when there well-formed.
  const auto hash_edit = [](nlohmann::json hash) {
    return [hash](SafetensorsFile& file) {
      edit_data_state(file, [&](nlohmann::json& state) { state["sha256"] = hash; });
    };
  };
  require_refused(dir, checkpoint, hash_edit(5), "'sha256' must be 64 lowercase hex digits, got 5");
  require_refused(dir, checkpoint, hash_edit(std::string(64, 'A')), "'sha256' must be 64 lowercase hex digits");
  require_refused(dir, checkpoint, hash_edit(std::string(63, 'a')), "'sha256' must be 64 lowercase hex digits");
  REQUIRE_NOTHROW(load_checkpoint(edited(dir, checkpoint, hash_edit(std::string(64, 'a')))));
  require_refused(dir, checkpoint, [](SafetensorsFile& file) { file.metadata["data"] = "{\"vocab\": "; },
                  "malformed JSON");
}

TEST_CASE("checkpoint: labels must be distinct and fit the classifier; one label is allowed", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = textcls_checkpoint({"pets", "wild"});
  const auto labels_edit = [](nlohmann::json labels) {
    return [labels](SafetensorsFile& file) {
      edit_data_state(file, [&](nlohmann::json& state) { state["labels"] = labels; });
    };
  };
  require_refused(dir, checkpoint, labels_edit(nlohmann::json::array()), "'labels' is empty");
  require_refused(dir, checkpoint, labels_edit({"pets", "pets"}), "'labels' holds \"pets\" twice");
  require_refused(dir, checkpoint, labels_edit({"pets", "wild", "fish"}),
                  "tensor 'fc.weight' has shape [2, 8] but the config and data state imply [3, 8]");
  require_refused(dir, checkpoint, labels_edit({"pets"}), "tensor 'fc.weight' has shape [2, 8]");
  require_refused(dir, checkpoint, labels_edit(nullptr), "'labels' must be an array");
  // A one-label TSV trains (every loss is 0), so its checkpoint loads; so do byte labels.
  save_checkpoint(dir.file("one.st"), textcls_checkpoint({"only"}));
  REQUIRE(labels_from_json(load_checkpoint(dir.file("one.st")).data_state.at("labels")) ==
          std::vector<std::string>{"only"});
  save_checkpoint(dir.file("bytes.st"), textcls_checkpoint({"ok", "bad\xC3"}));
  REQUIRE(labels_from_json(load_checkpoint(dir.file("bytes.st")).data_state.at("labels")) ==
          std::vector<std::string>{"ok", "bad\xC3"});
}

TEST_CASE("checkpoint: timeseries columns and normalisation must fit the input width", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = timeseries_checkpoint();
  REQUIRE_NOTHROW(load_checkpoint(edited(dir, checkpoint, [](SafetensorsFile&) {})));
  const auto state_edit = [](const char* key, nlohmann::json value) {
    return [key, value](SafetensorsFile& file) {
      edit_data_state(file, [&](nlohmann::json& state) { state[key] = value; });
    };
  };
  require_refused(dir, checkpoint, state_edit("mean", {0.5, 1.0}), "3 columns but 2 means and 3 stddevs");
  require_refused(dir, checkpoint, state_edit("stddev", {1.0, 2.0, 3.0, 4.0}), "3 columns but 3 means and 4 stddevs");
  require_refused(dir, checkpoint, state_edit("stddev", {1.0, 0.0, 1.0}), "column \"y\" has mean 1 and stddev 0");
  require_refused(dir, checkpoint, state_edit("stddev", {1.0, 1.0, -3.0}), "stddev -3");
  require_refused(dir, checkpoint, state_edit("mean", {0.5, nullptr, 1.0}), "'mean' must hold numbers, got null");
  require_refused(dir, checkpoint, state_edit("columns", nlohmann::json::array()), "'columns' is empty");
  require_refused(dir, checkpoint, state_edit("target_column", 3), "'target_column' must be a column index in [0, 3), got 3");
  require_refused(dir, checkpoint, state_edit("target_column", -1), "got -1");
  require_refused(dir, checkpoint, state_edit("target_column", "1"), "got \"1\"");
  require_refused(dir, checkpoint, state_edit("target_column", 2), "'target_column' 2 is not the config's target \"y\"");
  // Four consistent columns, but the model was built for three inputs.
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    edit_data_state(file, [](nlohmann::json& state) {
      state["columns"] = {"t", "y", "z", "w"};
      state["mean"] = {0, 0, 0, 0};
      state["stddev"] = {1, 1, 1, 1};
    });
  }, "tensor 'input_proj.weight' has shape [8, 3] but the config and data state imply [8, 4]");
}

TEST_CASE("checkpoint: tensors are compared with the config before any model is built", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  // A 30000-wide model would need gigabytes; the check allocates only what the file holds.
  const std::string wide = edited(dir, checkpoint, [](SafetensorsFile& file) { edit_config(file, "dim", 30000); });
  reset_allocator_stats();
  REQUIRE_THROWS_WITH(load_checkpoint(wide), Contains("tensor 'embedding.weight' has shape [6, 8] but the config "
                                                      "and data state imply [6, 30000]"));
  REQUIRE(allocator_stats().peak_bytes < (1 << 20));
  require_refused(dir, checkpoint, [](SafetensorsFile& file) { edit_config(file, "layers", 2); },
                  "tensor 'layers.1.norm1.weight' is missing");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) { edit_config(file, "layers", 0); },
                  "unexpected tensor 'layers.0.");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) { file.tensors.emplace_back("extra.weight", zeros({2})); },
                  "unexpected tensor 'extra.weight'");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    tensor_named(file, "layers.0.mlp.linear1.weight") = zeros({8, 32});
  }, "tensor 'layers.0.mlp.linear1.weight' has shape [8, 32] but the config and data state imply [32, 8]");
}

TEST_CASE("checkpoint: optimizer entries must belong to a parameter and have its shape", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  const auto add = [](const std::string& name, const Tensor& t) {
    return [name, t](SafetensorsFile& file) { file.tensors.emplace_back(name, t); };
  };
  const int64_t parameters = static_cast<int64_t>(checkpoint.model.size());
  require_refused(dir, checkpoint, add("optimizer." + std::to_string(parameters) + ".exp_avg", zeros({6, 8})),
                  "names parameter " + std::to_string(parameters) + " but the model has " + std::to_string(parameters));
  require_refused(dir, checkpoint, add("optimizer.exp_avg", zeros({6, 8})), "unexpected tensor 'optimizer.exp_avg'");
  require_refused(dir, checkpoint, add("optimizer.-1.exp_avg", zeros({6, 8})), "unexpected tensor 'optimizer.-1.exp_avg'");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    tensor_named(file, "optimizer.0.exp_avg") = zeros({8, 6});
  }, "tensor 'optimizer.0.exp_avg' has shape [8, 6] but parameter 0 ('embedding.weight') implies [6, 8]");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    tensor_named(file, "optimizer.1.step") = zeros({1});
  }, "tensor 'optimizer.1.step' has shape [1] but a step count is a scalar");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) { tensor_named(file, "optimizer.step") = zeros({2}); },
                  "tensor 'optimizer.step' must be a scalar");
}

TEST_CASE("checkpoint: NaN or Inf in any tensor is refused, naming it", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  const auto poison = [](const std::string& name, double value, int64_t at) {
    return [name, value, at](SafetensorsFile& file) {
      Tensor& t = tensor_named(file, name);
      std::vector<double> values = t.to_host_f64();
      values[at] = value;
      t = from_values(values, t.shape(), t.dtype());
    };
  };
  require_refused(dir, checkpoint, poison("layers.0.mlp.linear1.weight", NAN, 17),
                  "tensor 'layers.0.mlp.linear1.weight' holds NaN/Inf values");
  require_refused(dir, checkpoint, poison("head.bias", -INFINITY, 5), "tensor 'head.bias' holds NaN/Inf values");
  require_refused(dir, checkpoint, poison("optimizer.3.exp_avg_sq", INFINITY, 0),
                  "tensor 'optimizer.3.exp_avg_sq' holds NaN/Inf values");
  // Half precision is scanned too (a model stored in f16: load_state_dict converts it).
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    Tensor& t = tensor_named(file, "norm.weight");
    std::vector<double> values = t.to_host_f64();
    values[2] = 1e6;  // past f16's largest finite value, 65504: rounds to Inf
    t = from_values(values, t.shape(), DType::f16);
  }, "tensor 'norm.weight' holds NaN/Inf values");
}

TEST_CASE("checkpoint: a negative exp_avg_sq or step count is refused, naming the tensor",
          "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  const auto set = [](const std::string& name, int64_t at, double value) {
    return [name, at, value](SafetensorsFile& file) {
      Tensor& t = tensor_named(file, name);
      std::vector<double> values = t.to_host_f64();
      values[at] = value;
      t = from_values(values, t.shape(), t.dtype());
    };
  };
  // Adam takes the square root of exp_avg_sq at the next step: -0.25 would be NaN, then
  // "training diverged" far from the cause.
  require_refused(dir, checkpoint, set("optimizer.3.exp_avg_sq", 5, -0.25),
                  "tensor 'optimizer.3.exp_avg_sq' holds -0.25 at element 5: exp_avg_sq must be >= 0");
  require_refused(dir, checkpoint, set("optimizer.0.step", 0, -1),
                  "tensor 'optimizer.0.step' holds -1 at element 0: a step count must be >= 0");
  require_refused(dir, checkpoint, set("optimizer.step", 0, -3), "a step count must be >= 0");
  // Zero is a second moment like any other (a parameter that never had a gradient), and
  // exp_avg, a running mean of gradients, may be negative.
  REQUIRE_NOTHROW(load_checkpoint(edited(dir, checkpoint, set("optimizer.3.exp_avg_sq", 5, 0.0))));
  REQUIRE_NOTHROW(load_checkpoint(edited(dir, checkpoint, set("optimizer.3.exp_avg", 5, -0.25))));
}

TEST_CASE("checkpoint: tensor names from the file are quoted safely in errors", "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = charlm_checkpoint();
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    file.tensors.emplace_back(std::string("extra\0\nname", 11), zeros({2}));
  }, "unexpected tensor 'extra\\x00\\x0aname' (a charlm model");
}

TEST_CASE("check_finite_result names what overflowed and the largest weight", "[checkpoint]") {
  Checkpoint checkpoint = charlm_checkpoint();
  REQUIRE_NOTHROW(check_finite_result(2.5, "the loss", checkpoint));
  REQUIRE_NOTHROW(check_finite_results({1.0, -1e38}, "the logits", checkpoint));
  for (auto& [name, t] : checkpoint.model) {
    if (name == "head.weight") t = full(t.shape(), -3e38);
  }
  REQUIRE_THROWS_WITH(check_finite_result(NAN, "the loss on x.txt", checkpoint),
                      Contains("the loss on x.txt is ") && Contains(", not a finite number") &&
                          Contains("largest weight is 3e+38 in 'head.weight'"));
  REQUIRE_THROWS_WITH(check_finite_results({0.5, 1.0, INFINITY}, "the logits", checkpoint),
                      Contains("the logits (element 2) is inf, not a finite number"));
}

TEST_CASE("data state: byte strings are stored losslessly, valid UTF-8 as JSON strings", "[checkpoint]") {
  const Vocabulary vocab = small_vocabulary();
  const nlohmann::json stored = vocabulary_to_json(vocab);
  REQUIRE(stored == nlohmann::json::parse(R"(["<pad>", "<unk>", "a", "b", [255], "\n"])"));
  REQUIRE(vocabulary_from_json(nlohmann::json::parse(stored.dump())).tokens == vocab.tokens);
  const Vocabulary read = vocabulary_from_json(nlohmann::json::parse(R"(["<pad>", "<unk>", [195, 169], [195]])"));
  REQUIRE(read.tokens == std::vector<std::string>{"<pad>", "<unk>", "\xC3\xA9", "\xC3"});
  REQUIRE(read.id("\xC3") == 3);
  REQUIRE(labels_from_json(nlohmann::json::parse(R"(["x", [120, 255]])")) == std::vector<std::string>{"x", "x\xFF"});
  // The same bytes written both ways are one token twice.
  REQUIRE_THROWS_WITH(vocabulary_from_json(nlohmann::json::parse(R"(["<pad>", "<unk>", "a", [97]])")),
                      Contains("'vocab' holds \"a\" twice"));
}

// ---- pos_encoding.pe (the tutorial-form models' table) and exports ------------------------------

namespace {

// The sinusoid of `rows` positions and `dim` columns, [1, rows, dim], from the formula.
std::vector<double> checkpoint_test_sinusoid(int64_t rows, int64_t dim) {
  std::vector<double> values;
  for (int64_t pos = 0; pos < rows; ++pos) {
    for (int64_t col = 0; col < dim; ++col) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, static_cast<double>(col - col % 2) / dim);
      values.push_back(col % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
  return values;
}

void require_sinusoid(const Tensor& table, int64_t rows, int64_t dim) {
  REQUIRE(table.shape() == Shape{1, rows, dim});
  const std::vector<double> stored = table.to_host_f64(), expected = checkpoint_test_sinusoid(rows, dim);
  for (size_t i = 0; i < expected.size(); ++i) REQUIRE(stored[i] == Approx(expected[i]).margin(1e-6));
}

}  // namespace

TEST_CASE("checkpoint: a tutorial-form model stores pos_encoding.pe [1, max_len, dim]", "[checkpoint]") {
  testing::TempDir dir;
  save_checkpoint(dir.file("ts.st"), timeseries_checkpoint());  // --layers 1, --max-len 16, --dim 8
  SafetensorsFile file = load_safetensors(dir.file("ts.st"));
  require_sinusoid(tensor_named(file, "pos_encoding.pe"), 16, 8);
  const Checkpoint loaded = load_checkpoint(dir.file("ts.st"));
  REQUIRE(loaded.model.back().first == "pos_encoding.pe");
  require_sinusoid(loaded.model.back().second, 16, 8);
}

TEST_CASE("checkpoint: pos_encoding.pe may be missing (older files) or the tutorial's 5000 rows",
          "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = timeseries_checkpoint();
  const std::string older = edited(dir, checkpoint, [](SafetensorsFile& file) {
    std::erase_if(file.tensors, [](const auto& entry) { return entry.first == "pos_encoding.pe"; });
  });
  const Checkpoint loaded = load_checkpoint(older);  // the table computed for --max-len 16
  REQUIRE(loaded.model.back().first == "pos_encoding.pe");
  require_sinusoid(loaded.model.back().second, 16, 8);
  const std::string tutorial = edited(dir, checkpoint, [](SafetensorsFile& file) {
    tensor_named(file, "pos_encoding.pe") = from_values(checkpoint_test_sinusoid(5000, 8), {1, 5000, 8});
  });
  require_sinusoid(load_checkpoint(tutorial).model.back().second, 16, 8);
}

TEST_CASE("checkpoint: a pos_encoding.pe that is not the sinusoid, or of another shape, is refused",
          "[checkpoint]") {
  testing::TempDir dir;
  const Checkpoint checkpoint = timeseries_checkpoint();
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    std::vector<double> values = checkpoint_test_sinusoid(16, 8);
    values[3 * 8 + 5] *= 1.5;  // a table trained or edited in PyTorch
    tensor_named(file, "pos_encoding.pe") = from_values(values, {1, 16, 8});
  }, "tensor 'pos_encoding.pe' is not the sinusoidal table: at position 3, column 5");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    tensor_named(file, "pos_encoding.pe") = from_values(checkpoint_test_sinusoid(20, 8), {1, 20, 8});
  }, "tensor 'pos_encoding.pe' has shape [1, 20, 8] but the config implies [1, 16, 8]");
  require_refused(dir, checkpoint, [](SafetensorsFile& file) {
    tensor_named(file, "pos_encoding.pe") = from_values(checkpoint_test_sinusoid(16, 8), {16, 8});
  }, "tensor 'pos_encoding.pe' has shape [16, 8]");
  // The encoder-layer forms keep the table out of the state_dict: a stored one is unexpected.
  require_refused(dir, textcls_checkpoint({"x", "y"}), [](SafetensorsFile& file) {
    file.tensors.emplace_back("pos_encoding.pe", from_values(checkpoint_test_sinusoid(16, 8), {1, 16, 8}));
  }, "unexpected tensor 'pos_encoding.pe'");
}

TEST_CASE("save_export: the state_dict alone, the table at 5000 rows, loadable as weights only",
          "[checkpoint]") {
  testing::TempDir dir;
  Checkpoint checkpoint = timeseries_checkpoint();
  checkpoint.optimizer = {{"step", zeros({})}};
  checkpoint.step = 4;
  save_export(dir.file("export.st"), checkpoint);
  SafetensorsFile file = load_safetensors(dir.file("export.st"));
  REQUIRE(file.tensors.size() == checkpoint.model.size());  // no optimizer entry
  require_sinusoid(tensor_named(file, "pos_encoding.pe"), 5000, 8);
  REQUIRE(file.metadata.size() == 3);  // format, config, data: no step, RNG or scaler state
  REQUIRE(file.metadata.at("format") == "tapegrad-export-1");
  const Checkpoint loaded = load_checkpoint(dir.file("export.st"));
  REQUIRE(loaded.weights_only);
  REQUIRE(loaded.step == 0);
  REQUIRE(loaded.optimizer.empty());
  require_sinusoid(loaded.model.back().second, 16, 8);  // the model's own --max-len
  REQUIRE(loaded.model.front().second.to_host_f64() == checkpoint.model.front().second.to_host_f64());
  require_refused(dir, checkpoint, [](SafetensorsFile& edited_file) {  // optimizer.step kept
    edited_file.metadata["format"] = "tapegrad-export-1";
  }, "an export (weights only) holds optimizer state");
}
