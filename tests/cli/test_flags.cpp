// The command line reads what it is told and nothing else: stray positional arguments, empty
// values, counts of zero and flags the setting ignores are each one error line (exit 2), never
// dropped; textcls never truncates a sequence; quantize calibrates only on the data the
// checkpoint was trained on.
#include <filesystem>

#include "tests/cli/cli_support.h"

using namespace tg::testing;
using Catch::Contains;

namespace {

const std::string kFlagsTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 3";

// A small textcls TSV: two labels, short lines.
std::string flags_small_tsv() {
  std::string tsv;
  for (int i = 0; i < 20; ++i) tsv += i % 2 ? "pets\tthe cat sat\n" : "wild\ta wolf ran\n";
  return tsv;
}

// The data files and the small checkpoints the cases share, trained once per test case.
struct FlagsFixture {
  TempDir dir;
  std::string text = dir.file("text.txt"), texts = dir.file("texts.tsv"),
              series = dir.file("series.csv");
  std::string charlm() const {
    return "train --task charlm --context 8 --data " + text + kFlagsTiny;
  }
  std::string textcls() const {
    return "train --task textcls --max-len 16 --data " + texts + kFlagsTiny;
  }
  std::string timeseries() const {
    return "train --task timeseries --window 4 --data " + series + kFlagsTiny;
  }
  FlagsFixture() {
    write_bytes(text, small_text());
    write_bytes(texts, flags_small_tsv());
    write_bytes(series, small_csv());
  }
  // Trains `arguments` for 2 steps into dir/name and returns its path.
  std::string trained(const std::string& arguments, const std::string& name) const {
    const std::string path = dir.file(name);
    const CliResult result = run_cli(arguments + " --steps 2 --save " + path, dir);
    INFO(result.err);
    REQUIRE(result.exit_code == 0);
    return path;
  }
};

}  // namespace

TEST_CASE("flags: every command refuses a stray positional argument, naming it", "[cli][flags]") {
  FlagsFixture f;
  const std::string model = f.trained(f.charlm(), "lm.st");
  // Before the fix `train ... pos.st` trained for nothing and saved nothing, exit 0.
  require_one_line_error(run_cli(f.charlm() + " --steps 1 pos.st", f.dir),
                         "unexpected argument 'pos.st'");
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("pos.st")));
  require_one_line_error(run_cli("sample --load " + model + " --prompt the --tokens 3 10", f.dir),
                         "unexpected argument '10'");
  const std::string commands[] = {
      "info",
      "gradcheck --list",
      "eval --load " + model + " --data " + f.text,
      "analyze heads --load " + model + " --data " + f.text,
      "plot pe --dim 4 --len 4 --out " + f.dir.file("pe.png"),
      "plot attention --load " + model + " --text the --out " + f.dir.file("a.png"),
      "quantize --load " + model + " --mode dynamic --out " + f.dir.file("q.st"),
      "bench --workload sgemm --steps 1",
  };
  for (const std::string& command : commands) {
    INFO(command);
    require_one_line_error(run_cli(command + " stray", f.dir), "unexpected argument 'stray'");
  }
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("q.st")));
  // After "--" every argument is positional, options too.
  require_one_line_error(run_cli(f.charlm() + " -- --steps 1", f.dir),
                         "unexpected argument '--steps'");
}

TEST_CASE("flags: a count of 0 is an error, not the default", "[cli][flags]") {
  FlagsFixture f;
  const std::string save = " --save " + f.dir.file("m.st");
  // Before the fix: one whole epoch, and every step of it.
  require_one_line_error(run_cli(f.charlm() + " --steps 0 --epochs 0" + save, f.dir),
                         "--steps must be in [1, 1099511627776], got 0");
  require_one_line_error(run_cli(f.charlm() + " --epochs 0" + save, f.dir),
                         "--epochs must be in [1, 1099511627776], got 0");
  require_one_line_error(run_cli(f.charlm() + " --steps 5 --stop-after 0" + save, f.dir),
                         "--stop-after must be >= 1, got 0");
  require_one_line_error(run_cli(f.charlm() + " --steps 5 --save-every 0" + save, f.dir),
                         "--save-every must be >= 1, got 0");
  require_one_line_error(run_cli(f.charlm() + " --steps 5 --patience 0" + save, f.dir),
                         "--patience must be >= 1, got 0");
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("m.st")));
  // 1 is the smallest count, and it is taken as said: one step.
  const CliResult one = run_cli(f.charlm() + " --steps 3 --stop-after 1 --json" + save, f.dir);
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  REQUIRE(nlohmann::json::parse(lines_of(one.out).back())["steps"] == 1);
}

TEST_CASE("flags: an empty value is an error, not \"not given\"", "[cli][flags]") {
  FlagsFixture f;
  const std::string model = f.trained(f.charlm(), "lm.st");
  // Before the fix --resume '' started afresh, --save '' saved nothing, --calib '' calibrated on
  // the training data, each with exit 0.
  for (const char* flag : {"--resume", "--save", "--save-init", "--save-best", "--log",
                           "--profile-trace", "--grad-stats", "--target", "--profile-schedule"}) {
    INFO(flag);
    require_one_line_error(run_cli(f.charlm() + " --steps 1 " + flag + " ''", f.dir),
                           std::string(flag) + ": empty value");
  }
  require_one_line_error(run_cli("train --task charlm --data ''" + kFlagsTiny, f.dir),
                         "--data: empty value");
  require_one_line_error(run_cli("eval --load " + model + " --data ''", f.dir),
                         "--data: empty value");
  require_one_line_error(run_cli("sample --load " + model + " --prompt ''", f.dir),
                         "--prompt: empty value");
  require_one_line_error(run_cli("quantize --load " + model + " --mode static --calib '' --out " +
                                     f.dir.file("q.st"), f.dir),
                         "--calib: empty value");
  require_one_line_error(run_cli("plot pe --dim 4 --len 4 --out ''", f.dir), "--out: empty value");
}

TEST_CASE("flags: a flag the task or model ignores is refused by the one rule", "[cli][flags]") {
  FlagsFixture f;
  const std::string steps = " --steps 1";
  require_one_line_error(run_cli(f.charlm() + steps + " --tokenizer word", f.dir),
                         "--tokenizer does not apply to --task charlm");
  require_one_line_error(run_cli(f.textcls() + steps + " --window 8", f.dir),
                         "--window does not apply to --task textcls");
  require_one_line_error(run_cli(f.textcls() + steps + " --normalize none", f.dir),
                         "--normalize does not apply to --task textcls");
  require_one_line_error(run_cli(f.timeseries() + steps + " --context 8", f.dir),
                         "--context does not apply to --task timeseries");
  require_one_line_error(run_cli(f.timeseries() + steps + " --tokenizer char", f.dir),
                         "--tokenizer does not apply to --task timeseries");
  // charlm --layers 0: an embedding and a head, no attention (so no --heads either).
  const std::string no_attention = "train --task charlm --context 8 --layers 0 --dim 8 --batch 4 "
                                   "--threads 1 --steps 1 --data " + f.text;
  require_one_line_error(run_cli(no_attention + " --heads 2", f.dir),
                         "--heads does not apply to a model without attention");
  require_one_line_error(run_cli(no_attention + " --attention local:4", f.dir),
                         "--attention does not apply to a model without attention");
  require_one_line_error(run_cli(no_attention + " --position rope", f.dir),
                         "--position does not apply to a model without attention");
  REQUIRE(run_cli(no_attention + " --position none", f.dir).exit_code == 0);  // no table added
  require_one_line_error(run_cli(f.charlm() + steps + " --tf32", f.dir),
                         "--tf32 does not apply to --device cpu");
  require_one_line_error(run_cli(f.charlm() + steps + " --val-frac 0 --eval-every 2", f.dir),
                         "--eval-every does not apply to --val-frac 0");
  require_one_line_error(run_cli(f.charlm() + steps + " --val-frac 0 --save-best " +
                                     f.dir.file("best.st"), f.dir),
                         "--save-best does not apply to --val-frac 0");
  require_one_line_error(run_cli(f.charlm() + steps + " --val-frac 0 --patience 2", f.dir),
                         "--patience does not apply to --val-frac 0");
  // A split too small for one example (2 of the text's characters, --context 8) is no split.
  require_one_line_error(run_cli(f.charlm() + steps + " --val-frac 0.001 --patience 2", f.dir),
                         "--patience needs validation examples, but the last --val-frac 0.001 "
                         "of " + f.text + " holds none");
  // --save-every writes the --save checkpoint: without a --save it has nowhere to write.
  require_one_line_error(run_cli(f.charlm() + steps + " --save-every 2", f.dir),
                         "--save-every needs --save");
  // A resumed run is checked against the checkpoint's task.
  const std::string model = f.trained(f.charlm(), "lm.st");
  require_one_line_error(run_cli("train --resume " + model + " --steps 4 --tokenizer char", f.dir),
                         "--tokenizer does not apply to --task charlm");
  require_one_line_error(run_cli("eval --tf32 --load " + model + " --data " + f.text, f.dir),
                         "--tf32 does not apply to --device cpu");
}

TEST_CASE("flags: sample, plot attention and bench refuse the flags their setting ignores",
          "[cli][flags]") {
  FlagsFixture f;
  const std::string classifier = f.trained(f.textcls(), "cls.st");
  const std::string sample = "sample --load " + classifier + " --prompt 'the cat'";
  require_one_line_error(run_cli(sample + " --temperature 0.5", f.dir),
                         "--temperature does not apply to a textcls checkpoint");
  require_one_line_error(run_cli(sample + " --tokens 3", f.dir),
                         "--tokens does not apply to a textcls checkpoint");
  REQUIRE(run_cli(sample, f.dir).exit_code == 0);

  const std::string out = " --out " + f.dir.file("a.png");
  const std::string summary =
      "plot attention --summary --load " + classifier + " --data " + f.texts;
  require_one_line_error(run_cli(summary + " --layer 3" + out, f.dir),
                         "--layer does not apply to --summary");
  const std::string one_text = "plot attention --load " + classifier + " --text 'the cat'";
  require_one_line_error(run_cli(one_text + " --data " + f.texts + out, f.dir),
                         "--data does not apply to a plot of one --text");
  require_one_line_error(run_cli(one_text + " --samples 4" + out, f.dir),
                         "--samples does not apply to a plot of one --text");
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("a.png")));

  require_one_line_error(run_cli("bench --workload sgemm --amp bf16 --path explicit", f.dir),
                         "--path does not apply to --workload sgemm");
  require_one_line_error(run_cli("bench --workload sgemm --amp bf16", f.dir),
                         "--amp does not apply to --workload sgemm");
  require_one_line_error(run_cli("bench --workload gemm-i8 --device cuda", f.dir),
                         "--device does not apply to --workload gemm-i8");
  require_one_line_error(run_cli("bench --workload timeseries --int8", f.dir),
                         "--int8 does not apply to --workload timeseries");
  require_one_line_error(run_cli("bench --workload attn-long --plain-kernels --device cuda", f.dir),
                         "--plain-kernels does not apply to --device cuda");
  require_one_line_error(run_cli("bench --workload textcls-small --tf32", f.dir),
                         "--tf32 does not apply to --device cpu");
}

TEST_CASE("flags: textcls refuses a sequence past --max-len in train, eval and sample",
          "[cli][flags]") {
  FlagsFixture f;
  const std::string classifier = f.trained(f.textcls(), "cls.st");  // --max-len 16
  const std::string long_line = std::string(600, 'a');
  const std::string long_tsv = f.dir.file("long.tsv");
  write_bytes(long_tsv, flags_small_tsv() + "pets\t" + long_line + "\n");  // line 21
  const std::string expected = "line 21 has 600 char tokens, past the model's max_len 16";
  // Before the fix each read the 600 characters as their first 16, exit 0.
  const CliResult trained = run_cli("train --task textcls --max-len 16 --steps 1 --data " +
                                        long_tsv + kFlagsTiny, f.dir);
  require_one_line_error(trained, expected);
  REQUIRE_THAT(trained.err, Contains(long_tsv) && Contains("--max-len 600"));
  require_one_line_error(run_cli("eval --load " + classifier + " --data " + long_tsv, f.dir),
                         expected);
  require_one_line_error(run_cli("sample --load " + classifier + " --prompt " + long_line, f.dir),
                         "--prompt has 600 tokens, past the model's max_len 16");
  REQUIRE(run_cli("sample --load " + classifier + " --prompt " + long_line.substr(0, 16), f.dir)
              .exit_code == 0);
}

TEST_CASE("flags: quantize --mode static refuses training data that changed since training",
          "[cli][flags]") {
  FlagsFixture f;
  const std::string classifier = f.trained(f.textcls(), "cls.st");
  const std::string quantize = "quantize --load " + classifier + " --mode static --out ";
  REQUIRE(run_cli(quantize + f.dir.file("q1.st"), f.dir).exit_code == 0);
  write_bytes(f.texts, flags_small_tsv() + "pets\tthe dog sat\n");  // same labels, new bytes
  // Before the fix the scales were calibrated on whatever the path now held, exit 0.
  require_one_line_error(run_cli(quantize + f.dir.file("q2.st"), f.dir),
                         f.texts + " is not the data the checkpoint was trained on");
  REQUIRE_FALSE(std::filesystem::exists(f.dir.file("q2.st")));
  // Named with --calib, any data in the task's format calibrates.
  REQUIRE(run_cli(quantize + f.dir.file("q3.st") + " --calib " + f.texts, f.dir).exit_code == 0);
}

TEST_CASE("flags: range and conflict messages say what is wrong", "[cli][flags]") {
  FlagsFixture f;
  const std::string model = f.trained(f.charlm(), "lm.st");
  // Before the fix: "--calib-batches must be >= 1, got 99999999999999".
  require_one_line_error(run_cli("quantize --load " + model + " --mode static --calib-batches "
                                 "99999999999999 --out " + f.dir.file("q.st"), f.dir),
                         "--calib-batches must be in [1, 1099511627776], got 99999999999999");
  // Before the fix: "--no-shuffle false conflicts with the checkpoint's shuffle true".
  const CliResult conflict =
      run_cli("train --resume " + model + " --steps 4 --no-shuffle", f.dir);
  require_one_line_error(conflict, "--resume: --no-shuffle conflicts with the checkpoint's "
                                   "shuffled batches");
  REQUIRE_THAT(conflict.err, !Contains("false") && !Contains("true"));
}
