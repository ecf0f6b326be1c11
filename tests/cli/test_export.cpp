// `tapegrad export` end to end: every task's model exported from a trained checkpoint as its
// state_dict alone (no optimizer entries, metadata only config and data); the tutorial-form
// models' checkpoints and exports hold pos_encoding.pe, the sinusoid (computed here from the
// formula) at [1, max_len, dim] and [1, 5000, dim]; the export evaluates and samples as the
// checkpoint does and is refused by --resume; bad input is one line and exit code 2, and leaves
// --out as it was.
#include <cmath>
#include <map>
#include <set>

#include "tapegrad/io/safetensors.h"
#include "tapegrad/ops/ops.h"
#include "tests/cli/cli_support.h"

using namespace tg;
using namespace tg::testing;
using Catch::Contains;

namespace {

void export_test_require_ok(const CliResult& result) {
  INFO("stderr: " << result.err << "stdout: " << result.out);
  REQUIRE(result.exit_code == 0);
}

// The sinusoidal table [1, rows, dim] from its formula: sin(pos / 10000^(2i/dim)) in column 2i,
// the cos in column 2i + 1.
void require_export_test_sinusoid(const Tensor& table, int64_t rows, int64_t dim) {
  REQUIRE(table.shape() == Shape{1, rows, dim});
  const std::vector<double> stored = table.to_host_f64();
  for (int64_t pos = 0; pos < rows; ++pos) {
    for (int64_t i = 0; 2 * i < dim; ++i) {
      const double angle = static_cast<double>(pos) / std::pow(10000.0, 2.0 * i / dim);
      REQUIRE(stored[pos * dim + 2 * i] == Approx(std::sin(angle)).margin(1e-6));
      REQUIRE(stored[pos * dim + 2 * i + 1] == Approx(std::cos(angle)).margin(1e-6));
    }
  }
}

// A small data file for each task, in `dir`.
struct ExportTestData {
  TempDir dir;
  std::string texts = dir.file("texts.tsv"), series = dir.file("series.csv"),
              corpus = dir.file("corpus.txt");
  ExportTestData() {
    std::string tsv;
    for (int i = 0; i < 24; ++i) {
      tsv += std::string(i % 2 ? "pets" : "wild") + "\tthe cat sat on a mat\n";
    }
    write_bytes(texts, tsv);
    write_bytes(series, small_csv());
    write_bytes(corpus, small_text());
  }
};

// One model to export: the train flags, and whether it is a tutorial form (pos_encoding.pe).
struct ExportCase {
  const char* name;
  std::string train;
  bool tutorial_form;
};

std::vector<ExportCase> export_cases(const ExportTestData& data) {
  const std::string tiny =
      " --dim 8 --heads 2 --max-len 32 --batch 4 --steps 2 --warmup 0 --threads 1";
  const std::string textcls = "--task textcls --tokenizer word --data " + data.texts + tiny;
  const std::string timeseries = "--task timeseries --window 4 --data " + data.series + tiny;
  const std::string charlm = "--task charlm --context 8 --data " + data.corpus + tiny;
  return {
      {"textcls --layers 0", textcls + " --layers 0", true},
      {"textcls --layers 1", textcls + " --layers 1", false},
      {"timeseries --layers 1", timeseries + " --layers 1", true},
      {"timeseries --layers 2", timeseries + " --layers 2", false},
      {"charlm --layers 1", charlm + " --layers 1", false},
  };
}

std::set<std::string> metadata_keys(const SafetensorsFile& file) {
  std::set<std::string> keys;
  for (const auto& [key, value] : file.metadata) keys.insert(key);
  return keys;
}

// The checkpoint's model tensors (its "optimizer." entries left out), by name.
std::map<std::string, Tensor> model_tensors(const SafetensorsFile& checkpoint) {
  std::map<std::string, Tensor> model;
  for (const auto& [name, t] : checkpoint.tensors) {
    if (name.rfind("optimizer.", 0) != 0) model.emplace(name, t);
  }
  return model;
}

// The export against the checkpoint it came from: the same model tensors and values, the table
// (tutorial forms) at the tutorial's 5000 rows, nothing else.
void require_export_of(const SafetensorsFile& exported, const SafetensorsFile& checkpoint,
                       bool tutorial_form) {
  const std::map<std::string, Tensor> model = model_tensors(checkpoint);
  REQUIRE(exported.tensors.size() == model.size());
  for (const auto& [name, t] : exported.tensors) {
    INFO(name);
    REQUIRE(model.count(name) == 1);
    if (name == "pos_encoding.pe") continue;
    REQUIRE(t.shape() == model.at(name).shape());
    REQUIRE(t.to_host_f64() == model.at(name).to_host_f64());
  }
  REQUIRE(model.count("pos_encoding.pe") == (tutorial_form ? 1 : 0));
  if (tutorial_form) {
    require_export_test_sinusoid(model.at("pos_encoding.pe"), 32, 8);  // the checkpoint: --max-len
    for (const auto& [name, t] : exported.tensors) {
      if (name == "pos_encoding.pe") require_export_test_sinusoid(t, 5000, 8);
    }
  }
  REQUIRE(metadata_keys(exported) == std::set<std::string>{"config", "data", "format"});
  REQUIRE(exported.metadata.at("format") == "tapegrad-export-1");
}

}  // namespace

TEST_CASE("cli export: every task's model as its state_dict alone; the tutorial forms with pe",
          "[cli][export]") {
  const ExportTestData data;
  for (const ExportCase& c : export_cases(data)) {
    INFO(c.name);
    const std::string checkpoint = data.dir.file("ck.st"), out = data.dir.file("model.safetensors");
    export_test_require_ok(run_cli("train " + c.train + " --save " + checkpoint, data.dir));
    const CliResult exported = run_cli("export --load " + checkpoint + " --out " + out, data.dir);
    export_test_require_ok(exported);
    REQUIRE_THAT(exported.out, Contains("no optimizer state"));
    for (const auto& [name, t] : load_safetensors(out).tensors) {
      REQUIRE(name.rfind("optimizer.", 0) != 0);
    }
    require_export_of(load_safetensors(out), load_safetensors(checkpoint), c.tutorial_form);
  }
}

TEST_CASE("cli export: the export evaluates and samples as its checkpoint; --resume refuses it",
          "[cli][export]") {
  const ExportTestData data;
  const std::vector<ExportCase> cases = export_cases(data);
  const std::string ts = data.dir.file("ts.st"), ts_model = data.dir.file("ts-model.st");
  export_test_require_ok(run_cli("train " + cases[2].train + " --save " + ts, data.dir));
  export_test_require_ok(run_cli("export --load " + ts + " --out " + ts_model, data.dir));
  const std::string eval = "eval --json --threads 1 --data " + data.series + " --load ";
  const CliResult from_checkpoint = run_cli(eval + ts, data.dir);
  const CliResult from_export = run_cli(eval + ts_model, data.dir);
  export_test_require_ok(from_export);
  REQUIRE(from_export.out == from_checkpoint.out);

  const std::string cls = data.dir.file("cls.st"), cls_model = data.dir.file("cls-model.st");
  export_test_require_ok(run_cli("train " + cases[0].train + " --save " + cls, data.dir));
  export_test_require_ok(run_cli("export --load " + cls + " --out " + cls_model, data.dir));
  const std::string sample = "sample --prompt 'the cat sat' --load ";
  const CliResult sampled = run_cli(sample + cls_model, data.dir);
  export_test_require_ok(sampled);
  REQUIRE(sampled.out == run_cli(sample + cls, data.dir).out);

  require_one_line_error(
      run_cli("train --resume " + cls_model + " --steps 4 --threads 1", data.dir), "is an export");
}

TEST_CASE("cli export: bad input is one line, exit code 2, and --out stays as it was",
          "[cli][export]") {
  const ExportTestData data;
  const std::string checkpoint = data.dir.file("ck.st"), out = data.dir.file("out.st");
  const auto tapegrad = [&](const std::string& arguments) { return run_cli(arguments, data.dir); };
  const auto exporting = [&](const std::string& load) {
    return tapegrad("export --load " + load + " --out " + out);
  };
  const std::string train = "train " + export_cases(data)[0].train + " --save " + checkpoint;
  export_test_require_ok(tapegrad(train));
  write_bytes(out, "keep me");
  const std::string trained = read_bytes(checkpoint);
  require_one_line_error(tapegrad("export --out " + out), "--load and --out are required");
  require_one_line_error(tapegrad("export --load " + checkpoint), "--load and --out are required");
  const std::string onto_itself = "export --load " + checkpoint + " --out " + checkpoint;
  require_one_line_error(tapegrad(onto_itself), "--load");
  require_one_line_error(tapegrad("export --load " + checkpoint + " " + out),
                         "unexpected argument");
  require_one_line_error(exporting(data.texts), data.texts);  // not a safetensors file
  save_safetensors(data.dir.file("plain.st"), {{"w", zeros({2})}});  // no tapegrad metadata
  require_one_line_error(exporting(data.dir.file("plain.st")),
                         "not a tapegrad training checkpoint");
  const std::string int8 = data.dir.file("int8.st");
  export_test_require_ok(
      tapegrad("quantize --mode dynamic --load " + checkpoint + " --out " + int8));
  require_one_line_error(exporting(int8), "int8-quantized");
  REQUIRE(read_bytes(out) == "keep me");
  REQUIRE(read_bytes(checkpoint) == trained);
}

TEST_CASE("cli export: --help shows examples; the top-level help lists export", "[cli][export]") {
  TempDir dir;
  const CliResult help = run_cli("export --help", dir);
  REQUIRE(help.exit_code == 0);
  REQUIRE_THAT(help.out, Contains("--load") && Contains("--out") && Contains("examples:") &&
                             Contains("strict=True"));
  REQUIRE_THAT(run_cli("--help", dir).out, Contains("export"));
}
