// `tapegrad quantize` end to end: small models trained through the CLI on the bundled data,
// quantized dynamic and static, then evaluated, sampled, plotted and analyzed as any checkpoint;
// the int8 metric within 1% (relative) of f32; the command's refusals and corrupt int8
// checkpoints, each exit code 2 and one line.
#include <cmath>
#include <functional>

#include "tapegrad/io/safetensors.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tests/support/safetensors_edit.h"
#include "tests/cli/cli_support.h"

using namespace tg;
using namespace tg::testing;
using Catch::Contains;

namespace {

const std::string kData = std::string(TAPEGRAD_SOURCE_DIR) + "/data/";

void require_ok(const CliResult& result) {
  INFO("stderr: " << result.err << "stdout: " << result.out);
  REQUIRE(result.exit_code == 0);
}

nlohmann::json eval_json(const std::string& checkpoint, const std::string& data, const TempDir& dir) {
  const CliResult result = run_cli("eval --json --threads 2 --load " + checkpoint + " --data " + data, dir);
  require_ok(result);
  return nlohmann::json::parse(result.out);
}

// Trains `arguments` into f32.st, quantizes it both ways, and returns {f32, dynamic, static} of
// `metric` ("loss" or "accuracy") from eval on `data`.
std::vector<double> metrics_after_quantization(const std::string& arguments, const std::string& data,
                                               const char* metric, const TempDir& dir) {
  const std::string f32 = dir.file("f32.st");
  require_ok(run_cli("train --threads 2 --seed 1 " + arguments + " --data " + data + " --save " + f32, dir));
  std::vector<double> values = {eval_json(f32, data, dir)[metric].get<double>()};
  for (const char* mode : {"dynamic", "static"}) {
    const std::string out = dir.file(std::string(mode) + ".st");
    const CliResult quantized = run_cli("quantize --load " + f32 + " --mode " + mode + " --out " + out, dir);
    require_ok(quantized);
    REQUIRE_THAT(quantized.out, Contains(std::string("(") + mode + " int8)"));
    values.push_back(eval_json(out, data, dir)[metric].get<double>());
  }
  return values;
}

void require_within_one_percent(const std::vector<double>& m) {
  INFO("f32 " << m[0] << ", dynamic " << m[1] << ", static " << m[2]);
  REQUIRE(std::abs(m[1] - m[0]) <= 0.01 * std::abs(m[0]));
  REQUIRE(std::abs(m[2] - m[0]) <= 0.01 * std::abs(m[0]));
}

// A small f32 textcls checkpoint (and its data) for the error cases, trained once.
struct Trained {
  TempDir dir;
  std::string texts = dir.file("texts.tsv"), f32 = dir.file("cls.st"), dynamic = dir.file("cls-dyn.st"),
              fixed = dir.file("cls-static.st");
  Trained() {
    std::string tsv;
    for (int i = 0; i < 30; ++i) tsv += std::string(i % 2 ? "pets" : "wild") + "\tthe cat sat on a mat\n";
    write_bytes(texts, tsv);
    require_ok(run_cli("train --task textcls --tokenizer word --layers 1 --dim 8 --heads 2 --batch 4 --steps 2 "
                       "--threads 1 --data " + texts + " --save " + f32, dir));
    require_ok(run_cli("quantize --load " + f32 + " --mode dynamic --out " + dynamic, dir));
    require_ok(run_cli("quantize --load " + f32 + " --mode static --calib " + texts + " --out " + fixed, dir));
  }
};

const Trained& trained() {
  static const Trained instance;
  return instance;
}


}  // namespace

TEST_CASE("cli quantize: textcls accuracy within 1% of f32 (fortunes.tsv)", "[cli][quantize][accuracy]") {
  TempDir dir;
  const std::vector<double> accuracy = metrics_after_quantization(
      "--task textcls --tokenizer whitespace --layers 0 --dim 16 --heads 2 --max-len 64 --epochs 3 "
      "--batch 32 --lr 1e-2",
      kData + "fortunes.tsv", "accuracy", dir);
  REQUIRE(accuracy[0] > 0.45);  // learned something: the largest class is 822 / 2528 = 0.33
  require_within_one_percent(accuracy);
}

TEST_CASE("cli quantize: timeseries MSE within 1% of f32 (sunspots.csv)", "[cli][quantize][accuracy]") {
  TempDir dir;
  require_within_one_percent(metrics_after_quantization(
      "--task timeseries --window 24 --dim 16 --heads 2 --steps 80 --batch 16 --lr 3e-3", kData + "sunspots.csv",
      "loss", dir));
}

TEST_CASE("cli quantize: charlm cross-entropy within 1% of f32 (corpus.txt)", "[cli][quantize][accuracy]") {
  TempDir dir;
  // The first 40 kB of the corpus: evaluating all 427 kB three times would take most of a minute.
  const std::string corpus = read_bytes(kData + "corpus.txt").substr(0, 40000), text = dir.file("corpus.txt");
  write_bytes(text, corpus);
  require_within_one_percent(metrics_after_quantization(
      "--task charlm --context 32 --dim 16 --heads 2 --layers 1 --steps 40 --batch 16 --lr 3e-3", text, "loss",
      dir));
}

TEST_CASE("cli quantize: the summary, and eval, sample, plot attention, analyze heads load int8", "[cli][quantize]") {
  const Trained& t = trained();
  TempDir dir;
  const CliResult summary = run_cli("quantize --load " + t.f32 + " --mode static --observer percentile --out " +
                                    dir.file("p.st"), dir);
  require_ok(summary);
  REQUIRE_THAT(summary.out, Contains("quantized 7 Linear layers (static int8): layers.0.attn.q_proj"));
  REQUIRE_THAT(summary.out, Contains("Linear weights: "));
  REQUIRE_THAT(summary.out, Contains("percentile observer (p = 99.99)"));
  REQUIRE_THAT(summary.out, Contains("file: " + t.f32));

  const train::Checkpoint dynamic = train::load_checkpoint(t.dynamic);
  REQUIRE(dynamic.config.quantization == "dynamic");
  REQUIRE(dynamic.optimizer.empty());
  for (const auto& [name, tensor] : dynamic.model) {
    if (name == "layers.0.attn.q_proj.weight") REQUIRE(tensor.dtype() == DType::i8);
    if (name == "layers.0.attn.q_proj.weight_scale") REQUIRE(tensor.shape() == Shape{8});
    REQUIRE(name.find("input_scale") == std::string::npos);
  }
  const train::Checkpoint fixed = train::load_checkpoint(t.fixed);
  REQUIRE(fixed.config.quantization == "static");
  for (const auto& [name, tensor] : fixed.model) {
    if (name == "fc.input_scale") REQUIRE(tensor.item() > 0);
  }
  for (const std::string& file : {t.dynamic, t.fixed}) {
    require_ok(run_cli("eval --load " + file + " --data " + t.texts, dir));
    require_ok(run_cli("sample --load " + file + " --prompt 'the cat'", dir));
    require_ok(run_cli("plot attention --load " + file + " --text 'the cat sat' --out " + dir.file("a.png"), dir));
    require_ok(run_cli("analyze heads --samples 3 --load " + file + " --data " + t.texts, dir));
  }
  // An int8 checkpoint is not trained further.
  require_one_line_error(run_cli("train --resume " + t.dynamic + " --steps 4", dir),
                         "is an int8 (dynamic) quantized checkpoint, which cannot be trained");
}

TEST_CASE("cli quantize: denormal weights give a checkpoint that loads, dynamic and static",
          "[cli][quantize]") {
  // The Linear weights times 2^-140 (every one denormal: the per-channel scale used to underflow
  // to 0 and eval refused the file), or only the attention's (a mix of denormal and normal
  // layers). Quantized either way, the file loads in eval and sample, and eval's loss is the f32
  // one's: a denormal weight adds less than 2^-120 to any output, in f32 as in int8 (exactly so
  // when every Linear is denormal; within the usual 1% when the others are quantized too).
  const Trained& t = trained();
  TempDir dir;
  const auto is_linear_weight = [](const std::string& name, bool attention_only) {
    const bool attention = name.find("_proj.weight") != std::string::npos;
    const bool other = name == "fc.weight" || name.find("mlp.linear") != std::string::npos;
    return name.ends_with(".weight") && (attention || (!attention_only && other));
  };
  for (bool attention_only : {false, true}) {
    INFO((attention_only ? "attention weights denormal" : "every Linear weight denormal"));
    const std::string tiny = dir.file("tiny.st");
    write_edited(t.f32, tiny, [&](SafetensorsFile& f) {
      for (auto& [name, tensor] : f.tensors) {
        if (is_linear_weight(name, attention_only)) tensor = tensor * 0x1p-140;
      }
    });
    const double f32_loss = eval_json(tiny, t.texts, dir)["loss"].get<double>();
    for (const std::string mode : {"dynamic", "static"}) {
      INFO(mode);
      const std::string out = dir.file(mode + ".st");
      require_ok(run_cli("quantize --load " + tiny + " --mode " + mode + " --out " + out, dir));
      REQUIRE(eval_json(out, t.texts, dir)["loss"].get<double>() ==
              Approx(f32_loss).epsilon(attention_only ? 0.01 : 1e-5));
      require_ok(run_cli("sample --load " + out + " --prompt 'the cat'", dir));
    }
  }
}

TEST_CASE("cli quantize: bad arguments exit 2 with one line, and write nothing", "[cli][quantize]") {
  const Trained& t = trained();
  TempDir dir;
  const std::string out = dir.file("out.st");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --out " + out, dir), "--load, --mode and --out are required");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode int4 --out " + out, dir),
                         "unknown quantization 'int4' (none, dynamic, static)");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode none --out " + out, dir),
                         "--mode must be dynamic or static");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode dynamic --calib " + t.texts + " --out " + out, dir),
                         "--calib does not apply to --mode dynamic");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode static --observer median --out " + out, dir),
                         "unknown observer 'median' (minmax, percentile)");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode static --percentile 99 --out " + out, dir),
                         "--percentile does not apply to --observer minmax");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode static --observer percentile --percentile 0 "
                                 "--out " + out, dir),
                         "--percentile must be in (0, 100]");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode static --calib-batches 0 --out " + out, dir),
                         "--calib-batches must be in [1, 1099511627776], got 0");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode dynamic --out " + t.f32, dir),
                         "is the --load file");
  require_one_line_error(run_cli("quantize --load " + t.dynamic + " --mode dynamic --out " + out, dir),
                         "is already quantized (dynamic)");
  require_one_line_error(run_cli("quantize --load " + t.f32 + " --mode dynamic --out " + dir.file("no/such/dir.st"), dir),
                         "--out");
  REQUIRE_FALSE(std::filesystem::exists(out));
  // A failed run leaves a good file as it was: calibration data that does not parse.
  write_bytes(out, "keep me");
  const std::string bad = dir.file("bad.tsv");
  write_bytes(bad, "no tab here\n");
  const CliResult failed = run_cli("quantize --load " + t.f32 + " --mode static --calib " + bad + " --out " + out, dir);
  REQUIRE(failed.exit_code == 2);
  REQUIRE(lines_of(failed.err).size() == 1);
  REQUIRE(read_bytes(out) == "keep me");
}

TEST_CASE("cli quantize: corrupt int8 checkpoints are refused, naming the tensor", "[cli][quantize]") {
  const Trained& t = trained();
  TempDir dir;
  const auto refuse = [&](const std::string& source, const std::function<void(SafetensorsFile&)>& edit,
                          const std::string& expected) {
    const std::string path = dir.file("edited.st");
    write_edited(source, path, edit);
    require_one_line_error(run_cli("eval --load " + path + " --data " + t.texts, dir), "checkpoint " + path + ": " + expected);
  };
  refuse(t.dynamic, [](SafetensorsFile& f) {
    std::erase_if(f.tensors, [](const auto& e) { return e.first == "fc.weight_scale"; });
  }, "tensor 'fc.weight_scale' is missing");
  refuse(t.dynamic, [](SafetensorsFile& f) {
    Tensor& w = tensor_named(f, "layers.0.mlp.linear1.weight");
    w = w.to(DType::f32);
  }, "tensor 'layers.0.mlp.linear1.weight' must be I8 in a dynamic-quantized checkpoint, got f32");
  refuse(t.dynamic, [](SafetensorsFile& f) {
    Tensor& s = tensor_named(f, "fc.weight_scale");
    s = s.narrow(0, 0, 1).contiguous();
  }, "tensor 'fc.weight_scale' has shape [1] but the config and data state imply [2]");
  refuse(t.dynamic, [](SafetensorsFile& f) {
    Tensor& s = tensor_named(f, "layers.0.attn.o_proj.weight_scale");
    s = s * -1.0;
  }, "tensor 'layers.0.attn.o_proj.weight_scale' holds the scale -");
  refuse(t.fixed, [](SafetensorsFile& f) { tensor_named(f, "fc.input_scale") = scalar(0.0); },
         "tensor 'fc.input_scale' holds the scale 0");
  refuse(t.fixed, [](SafetensorsFile& f) { tensor_named(f, "fc.input_scale") = scalar(NAN); },
         "tensor 'fc.input_scale' holds the scale nan");
  // The config says one mode, the tensors another.
  refuse(t.fixed, [](SafetensorsFile& f) {
    nlohmann::json config = nlohmann::json::parse(f.metadata.at("config"));
    config["quantization"] = "dynamic";
    f.metadata["config"] = config.dump();
  }, "tensor 'layers.0.attn.q_proj.input_scale' is int8 quantization state but the config's quantization is "
     "'dynamic' (mode mismatch)");
  refuse(t.dynamic, [](SafetensorsFile& f) {
    nlohmann::json config = nlohmann::json::parse(f.metadata.at("config"));
    config.erase("quantization");  // read as an old, f32 checkpoint
    f.metadata["config"] = config.dump();
  }, "tensor 'layers.0.attn.q_proj.weight_scale' is int8 quantization state but the config's quantization is "
     "'none' (mode mismatch)");
  refuse(t.dynamic, [](SafetensorsFile& f) {
    nlohmann::json config = nlohmann::json::parse(f.metadata.at("config"));
    config["quantization"] = "int4";
    f.metadata["config"] = config.dump();
  }, "checkpoint config: unknown quantization 'int4'");
}
