// Hostile checkpoints on the command line: real checkpoints from `tapegrad train --save`, edited
// as an attacker would, refused by eval, sample and train --resume alike with exit code 2 and one
// line naming the problem (one shared loader checks everything before a model is built). And
// vocabularies and labels that are not valid UTF-8 survive a save and a load byte for byte.
#include <cmath>
#include <functional>
#include <stdexcept>

#include "tapegrad/io/safetensors.h"
#include "tests/support/safetensors_edit.h"
#include "tests/cli/cli_support.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/tasks.h"

using namespace tg;
using namespace tg::testing;
using Catch::Contains;

namespace {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 3";

// Small data and one checkpoint of each task, trained once for the whole file.
struct Trained {
  TempDir dir;
  std::string text = dir.file("text.txt"), texts = dir.file("texts.tsv"), series = dir.file("series.csv");
  std::string lm = dir.file("lm.st"), cls = dir.file("cls.st"), ts = dir.file("ts.st");

  Trained() {
    std::string tsv, csv = "t,value\n";
    for (int i = 0; i < 30; ++i) tsv += std::string(i % 2 ? "pets" : "wild") + "\tthe cat sat on a mat\n";
    for (int i = 0; i < 40; ++i) csv += std::to_string(i) + "," + std::to_string(i % 7) + "\n";
    write_bytes(text, small_text());
    write_bytes(texts, tsv);
    write_bytes(series, csv);
    train("--task charlm --context 8 --layers 1 --data " + text + " --steps 2 --save " + lm);
    train("--task textcls --tokenizer word --layers 1 --data " + texts + " --steps 2 --save " + cls);
    train("--task timeseries --window 6 --data " + series + " --steps 2 --save " + ts);
  }
  void train(const std::string& arguments) const {
    const CliResult result = run_cli("train " + arguments + kTiny, dir);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
  }
};

const Trained& trained() {
  static const Trained instance;
  return instance;
}


void edit_json(SafetensorsFile& file, const char* key, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json value = nlohmann::json::parse(file.metadata.at(key));
  edit(value);
  file.metadata[key] = value.dump();
}

void drop_optimizer(SafetensorsFile& file) {
  std::erase_if(file.tensors, [](const auto& entry) { return entry.first.rfind("optimizer.", 0) == 0; });
}

// The first rows of the tensors that have one row a vocabulary token (a charlm's embedding and head).
void keep_vocabulary_rows(SafetensorsFile& file, int64_t rows) {
  for (const char* name : {"embedding.weight", "head.weight", "head.bias"}) {
    tensor_named(file, name) = tensor_named(file, name).narrow(0, 0, rows).contiguous();
  }
}

void set_value(SafetensorsFile& file, const std::string& name, int64_t at, double value) {
  Tensor& t = tensor_named(file, name);
  std::vector<double> values = t.to_host_f64();
  values[at] = value;
  t = from_values(values, t.shape(), t.dtype());
}

// eval, sample and train --resume each refuse `path` with one line naming it and `expected`.
void require_all_refuse(const std::string& path, const std::string& data, const std::string& expected,
                        const TempDir& dir) {
  const std::string message = "checkpoint " + path + ": " + expected;
  require_one_line_error(run_cli("eval --load " + path + " --data " + data, dir), message);
  require_one_line_error(run_cli("sample --load " + path + " --prompt 'the ' --tokens 5", dir), message);
  require_one_line_error(run_cli("train --resume " + path + " --steps 4", dir), message);
}

}  // namespace

TEST_CASE("cli checkpoints: a one-symbol vocabulary is refused, not sampled past its end", "[cli][checkpoint]") {
  const Trained& t = trained();
  TempDir dir;
  const std::string path = dir.file("one.st");
  write_edited(t.lm, path, [](SafetensorsFile& file) {
    edit_json(file, "data", [](nlohmann::json& state) { state["vocab"] = {"<pad>"}; });
    keep_vocabulary_rows(file, 1);
    drop_optimizer(file);
  });
  require_all_refuse(path, t.text, "checkpoint data state: 'vocab' must start with", dir);
}

TEST_CASE("cli checkpoints: sample draws nothing from a model with only padding and unknown", "[cli][checkpoint]") {
  const Trained& t = trained();
  TempDir dir;
  const std::string path = dir.file("reserved.st");
  write_edited(t.lm, path, [](SafetensorsFile& file) {
    edit_json(file, "data", [](nlohmann::json& state) { state["vocab"] = {"<pad>", "<unk>"}; });
    keep_vocabulary_rows(file, 2);
    drop_optimizer(file);
  });
  // A consistent checkpoint (eval works: every character is unknown), but nothing to sample.
  const CliResult evaluated = run_cli("eval --load " + path + " --data " + t.text, dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  require_one_line_error(run_cli("sample --load " + path + " --prompt 'the ' --tokens 5", dir),
                         "the model has 2 output tokens, none to draw");
  // --top-k past the vocabulary samples among all of it.
  const CliResult sampled = run_cli("sample --load " + t.lm + " --prompt 'the ' --tokens 30 --top-k 1000", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  REQUIRE(lines_of(sampled.out).at(0).size() == 4 + 30);
}

TEST_CASE("cli checkpoints: declared shapes are checked against the config before a model is built", "[cli][checkpoint]") {
  const Trained& t = trained();
  TempDir dir;
  const std::string wide = dir.file("wide.st");
  write_edited(t.lm, wide, [](SafetensorsFile& file) {
    edit_json(file, "config", [](nlohmann::json& config) { config["dim"] = 8192; });
  });
  const int64_t vocab = train::load_checkpoint(t.lm).model.at(0).second.size(0);
  const std::string rows = "[" + std::to_string(vocab);
  require_all_refuse(wide, t.text, "tensor 'embedding.weight' has shape " + rows + ", 8] but the config and "
                     "data state imply " + rows + ", 8192]", dir);

  const std::string deeper = dir.file("deeper.st");
  write_edited(t.lm, deeper, [](SafetensorsFile& file) {
    edit_json(file, "config", [](nlohmann::json& config) { config["layers"] = 2; });
  });
  require_all_refuse(deeper, t.text, "tensor 'layers.1.norm1.weight' is missing", dir);

  // A textcls checkpoint claiming a third label its classifier has no row for.
  const std::string labels = dir.file("labels.st");
  write_edited(t.cls, labels, [](SafetensorsFile& file) {
    edit_json(file, "data", [](nlohmann::json& state) { state["labels"].push_back("fish"); });
  });
  require_one_line_error(run_cli("sample --load " + labels + " --prompt 'the cat'", dir),
                         "tensor 'fc.weight' has shape [2, 8] but the config and data state imply [3, 8]");
  require_one_line_error(run_cli("eval --load " + labels + " --data " + t.texts, dir), "'fc.weight'");

  // A timeseries checkpoint whose normalisation has a zero stddev.
  const std::string flat = dir.file("flat.st");
  write_edited(t.ts, flat, [](SafetensorsFile& file) {
    edit_json(file, "data", [](nlohmann::json& state) { state["stddev"][0] = 0; });
  });
  require_one_line_error(run_cli("eval --load " + flat + " --data " + t.series, dir), "stddev 0");
  require_one_line_error(run_cli("train --resume " + flat, dir), "stddev 0");
}

TEST_CASE("cli checkpoints: NaN or Inf in the weights or optimizer state is refused", "[cli][checkpoint]") {
  const Trained& t = trained();
  TempDir dir;
  const std::string weights = dir.file("nan.st");
  write_edited(t.lm, weights, [](SafetensorsFile& file) { set_value(file, "layers.0.mlp.linear1.weight", 3, NAN); });
  require_all_refuse(weights, t.text, "tensor 'layers.0.mlp.linear1.weight' holds NaN/Inf values", dir);

  const std::string moments = dir.file("inf.st");
  write_edited(t.lm, moments, [](SafetensorsFile& file) { set_value(file, "optimizer.5.exp_avg_sq", 0, INFINITY); });
  require_all_refuse(moments, t.text, "tensor 'optimizer.5.exp_avg_sq' holds NaN/Inf values", dir);
}

TEST_CASE("cli checkpoints: metadata numbers are strict", "[cli][checkpoint]") {
  const Trained& t = trained();
  TempDir dir;
  const std::pair<const char*, const char*> bad[] = {
      {"step", "12abc"}, {"rng_seed", "-1"}, {"rng_offset", " 5"}, {"skipped_steps", "1e3"},
      {"scaler_growth_tracker", "+4"}, {"scaler_scale", "nan"}};
  for (const auto& entry : bad) {
    // Plain names, not structured bindings: clang 14 cannot capture those in a lambda.
    const char* key = entry.first;
    const char* value = entry.second;
    INFO(key << " = " << value);
    const std::string path = dir.file(std::string(key) + ".st");
    write_edited(t.lm, path, [&](SafetensorsFile& file) { file.metadata[key] = value; });
    require_one_line_error(run_cli("train --resume " + path + " --steps 4", dir),
                           "checkpoint " + path + ": metadata '" + key + "'");
  }
}

TEST_CASE("cli checkpoints: a corpus with invalid UTF-8 trains, saves, samples and evaluates", "[cli][checkpoint]") {
  TempDir dir;
  std::string corpus;
  for (int i = 0; i < 60; ++i) corpus += "ab\xFF\xC3 ";  // 0xFF never starts UTF-8; 0xC3 needs a continuation
  write_bytes(dir.file("bytes.txt"), corpus);
  const std::string lm = dir.file("bytes.st");
  const CliResult trained_run = run_cli("train --task charlm --context 8 --layers 1 --data " + dir.file("bytes.txt") +
                                        " --steps 2 --save " + lm + kTiny, dir);
  INFO(trained_run.err);
  REQUIRE(trained_run.exit_code == 0);
  // The vocabulary comes back byte for byte, in order of first appearance.
  const train::Checkpoint checkpoint = train::load_checkpoint(lm);
  REQUIRE(train::vocabulary_from_json(checkpoint.data_state.at("vocab")).tokens ==
          std::vector<std::string>{"<pad>", "<unk>", "a", "b", "\xFF", "\xC3", " "});
  REQUIRE_THAT(load_safetensors(lm).metadata.at("data"), Contains("[255]") && Contains("[195]"));
  const CliResult sampled = run_cli("sample --load " + lm + " --prompt 'ab' --tokens 20 --seed 2", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  REQUIRE(sampled.out.rfind("ab", 0) == 0);
  const CliResult evaluated = run_cli("eval --json --load " + lm + " --data " + dir.file("bytes.txt"), dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  REQUIRE(nlohmann::json::parse(evaluated.out)["examples"].get<int64_t>() > 0);
}

TEST_CASE("cli checkpoints: labels and words with invalid UTF-8 survive a save and a load", "[cli][checkpoint]") {
  TempDir dir;
  std::string tsv;
  for (int i = 0; i < 20; ++i) tsv += std::string(i % 2 ? "p\xFFts" : "wild") + "\tthe caf\xC3 sat\n";
  write_bytes(dir.file("bytes.tsv"), tsv);
  const std::string cls = dir.file("cls.st");
  // whitespace: a word with a bad byte inside (word would split the byte off as a token)
  const CliResult trained_run = run_cli("train --task textcls --tokenizer whitespace --layers 1 "
                                        "--data " + dir.file("bytes.tsv") + " --steps 2 --save " +
                                        cls + kTiny, dir);
  INFO(trained_run.err);
  REQUIRE(trained_run.exit_code == 0);
  const train::Checkpoint checkpoint = train::load_checkpoint(cls);
  REQUIRE(train::labels_from_json(checkpoint.data_state.at("labels")) == std::vector<std::string>{"wild", "p\xFFts"});
  REQUIRE(train::vocabulary_from_json(checkpoint.data_state.at("vocab")).tokens ==
          std::vector<std::string>{"<pad>", "<unk>", "the", "caf\xC3", "sat"});
  const CliResult classified = run_cli("sample --load " + cls + " --prompt 'the sat'", dir);
  INFO(classified.err);
  REQUIRE(classified.exit_code == 0);
  REQUIRE_THAT(classified.out, Contains("  p\xFFts: ") && Contains("  wild: "));
  REQUIRE(run_cli("eval --load " + cls + " --data " + dir.file("bytes.tsv"), dir).exit_code == 0);
}
