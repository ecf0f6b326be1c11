// Numbers on the command line: what a checkpoint computes must be finite (huge but finite weights
// overflow f32: eval, analyze, plot attention and sample refuse the result with one line naming
// it, never print NaN with exit code 0); a negative exp_avg_sq in a resumed checkpoint is a
// checkpoint error, not a divergence; a CSV's bad bytes are quoted, not cut at a NUL.
#include <filesystem>

#include "tapegrad/io/safetensors.h"
#include "tests/cli/cli_support.h"
#include "tests/support/safetensors_edit.h"

using namespace tg;
using namespace tg::testing;

namespace {

const std::string kNumbersTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0 --seed 7";

// A charlm and a textcls checkpoint trained once for the file, and copies whose embedding holds
// 3e38 everywhere: finite (f32 holds up to 3.4e38), so they load, but the first LayerNorm sums
// past f32's range and every result is NaN.
struct HugeWeights {
  TempDir dir;
  std::string text = dir.file("text.txt"), texts = dir.file("texts.tsv");
  std::string lm = dir.file("lm.st"), cls = dir.file("cls.st");
  std::string huge_lm = dir.file("huge_lm.st"), huge_cls = dir.file("huge_cls.st");

  HugeWeights() {
    std::string tsv;
    for (int i = 0; i < 20; ++i) tsv += std::string(i % 2 ? "pets" : "wild") + "\tthe cat sat\n";
    write_bytes(text, small_text());
    write_bytes(texts, tsv);
    train("--task charlm --context 8 --layers 1 --data " + text + " --steps 2 --save " + lm);
    train("--task textcls --tokenizer word --layers 1 --data " + texts + " --steps 2 --save " + cls);
    for (const auto& [from, to] : {std::pair{lm, huge_lm}, std::pair{cls, huge_cls}}) {
      write_edited(from, to, [](SafetensorsFile& file) {
        Tensor& embedding = tensor_named(file, "embedding.weight");
        embedding = full(embedding.shape(), 3e38, embedding.dtype());
      });
    }
  }
  void train(const std::string& arguments) const {
    const CliResult result = run_cli("train " + arguments + kNumbersTiny, dir);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
  }
};

const HugeWeights& huge_weights() {
  static const HugeWeights instance;
  return instance;
}

// One line naming the result, saying it is not finite, and naming the largest weight.
void require_overflow_error(const CliResult& result, const std::string& what) {
  require_one_line_error(result, what);
  REQUIRE_THAT(result.err, Catch::Contains("not a finite number: the model overflows") &&
                               Catch::Contains("largest weight is 3e+38 in 'embedding.weight'"));
}

}  // namespace

TEST_CASE("numbers: a loss computed from huge finite weights is an error, not 'loss -nan'",
          "[cli][numbers]") {
  const HugeWeights& h = huge_weights();
  // The untouched checkpoints evaluate (the fixture is sound).
  REQUIRE(run_cli("eval --load " + h.lm + " --data " + h.text, h.dir).exit_code == 0);
  require_overflow_error(run_cli("eval --load " + h.huge_lm + " --data " + h.text, h.dir),
                         "tapegrad eval: error: the loss on " + h.text + " is ");
  require_overflow_error(run_cli("eval --json --load " + h.huge_cls + " --data " + h.texts, h.dir),
                         "the loss on " + h.texts);
}

TEST_CASE("numbers: analyze heads and plot attention refuse NaN attention from huge weights",
          "[cli][numbers]") {
  const HugeWeights& h = huge_weights();
  // Before: a table of zeros (softmax makes a row of NaN scores zeros), exit code 0.
  const std::string input = "the input of attention layer 0 (element 0) is ";
  require_overflow_error(
      run_cli("analyze heads --samples 3 --load " + h.huge_lm + " --data " + h.text, h.dir), input);
  require_overflow_error(
      run_cli("analyze heads --samples 3 --load " + h.huge_cls + " --data " + h.texts, h.dir), input);
  const std::string out = h.dir.file("attention.png");
  for (const std::string& load : {h.huge_cls, h.huge_lm}) {
    require_overflow_error(
        run_cli("plot attention --load " + load + " --text 'the cat' --out " + out, h.dir), input);
  }
  require_overflow_error(run_cli("plot attention --summary --samples 3 --load " + h.huge_lm +
                                     " --data " + h.text + " --out " + out, h.dir),
                         input);
  REQUIRE_FALSE(std::filesystem::exists(out));  // no PNG of grey panels
  // The untouched checkpoint draws.
  REQUIRE(run_cli("plot attention --load " + h.cls + " --text 'the cat' --out " + out, h.dir)
              .exit_code == 0);
}

TEST_CASE("numbers: sample refuses huge weights the same way, generating or classifying",
          "[cli][numbers]") {
  const HugeWeights& h = huge_weights();
  const CliResult lm = run_cli("sample --load " + h.huge_lm + " --prompt 'the ' --tokens 5", h.dir);
  require_overflow_error(lm, "the logits of character 1 (element 0) is ");
  const CliResult cls = run_cli("sample --load " + h.huge_cls + " --prompt 'the cat'", h.dir);
  require_overflow_error(cls, "the class logits of --prompt (element 0) is ");
}

TEST_CASE("numbers: a negative exp_avg_sq in --resume is a checkpoint error, not divergence",
          "[cli][numbers]") {
  const HugeWeights& h = huge_weights();
  TempDir dir;
  const std::string path = dir.file("negative.st");
  write_edited(h.lm, path, [](SafetensorsFile& file) {
    Tensor& second_moment = tensor_named(file, "optimizer.3.exp_avg_sq");
    std::vector<double> values = second_moment.to_host_f64();
    values[2] = -0.5;
    second_moment = from_values(values, second_moment.shape(), second_moment.dtype());
  });
  // Before: "training diverged at step 3: the training loss is nan", exit code 3.
  const std::string expected = "checkpoint " + path +
                               ": tensor 'optimizer.3.exp_avg_sq' holds -0.5 at element 2: "
                               "exp_avg_sq must be >= 0";
  require_one_line_error(run_cli("train --resume " + path + " --steps 4", dir), expected);
  require_one_line_error(run_cli("eval --load " + path + " --data " + h.text, dir), expected);
}

TEST_CASE("numbers: a CSV cell with a NUL byte is reported whole, on one line", "[cli][numbers]") {
  TempDir dir;
  std::string csv = small_csv();
  csv += std::string("40,1.5\0" "junk\n", 12);
  write_bytes(dir.file("nul.csv"), csv);
  const CliResult result = run_cli("train --task timeseries --window 4 --steps 1 --data " +
                                       dir.file("nul.csv") + kNumbersTiny, dir);
  // Before: the line ended at the NUL: "... column 2 ('value'): '1.5".
  require_one_line_error(result, "line 42, column 2 ('value'): '1.5\\x00junk' is not a decimal "
                                 "number");
  // 1e-320 is a finite (subnormal) number, and a hex cell is not decimal.
  write_bytes(dir.file("tiny.csv"), small_csv() + "40,1e-320\n");
  REQUIRE(run_cli("train --task timeseries --window 4 --steps 1 --data " + dir.file("tiny.csv") +
                      kNumbersTiny, dir).exit_code == 0);
  write_bytes(dir.file("hex.csv"), small_csv() + "40,0x10\n");
  require_one_line_error(run_cli("train --task timeseries --window 4 --steps 1 --data " +
                                     dir.file("hex.csv") + kNumbersTiny, dir),
                         "'0x10' is not a decimal number");
  write_bytes(dir.file("twice.csv"), "value,t,value\n1,2,3\n");
  require_one_line_error(run_cli("train --task timeseries --data " + dir.file("twice.csv"), dir),
                         "columns 1 and 3 are both named 'value'");
}
