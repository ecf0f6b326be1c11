// `tapegrad train`, `eval` and `sample` on small data: each task end to end, determinism,
// --resume equivalence, and one clear line + exit code 2 for every kind of bad input.
#include <cmath>

#include "tapegrad/train/checkpoint_file.h"
#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

std::string small_tsv() {
  std::string tsv;
  const char* texts[] = {"the cat sat", "a dog ran far", "cats and dogs", "the bird flew", "fish swim deep",
                         "dogs bark loud", "cats purr", "birds sing", "fish blow bubbles", "a cat naps"};
  for (int i = 0; i < 30; ++i) tsv += std::string(i % 2 ? "pets" : "wild") + "\t" + texts[i % 10] + "\n";
  return tsv;
}

const std::string kTinyModel = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0.1";
const std::string kTiny = kTinyModel + " --seed 3";

}  // namespace

TEST_CASE("train, eval and sample each task on small data", "[cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  write_bytes(dir.file("texts.tsv"), small_tsv());
  write_bytes(dir.file("text.txt"), small_text());

  SECTION("timeseries") {
    const CliResult trained = run_cli("train --task timeseries --data " + dir.file("series.csv") +
                                      " --window 6 --horizon 2 --epochs 2 --json --save " + dir.file("ts.st") + kTiny, dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    const auto json = nlohmann::json::parse(lines_of(trained.out).back());
    REQUIRE(json["task"] == "timeseries");
    REQUIRE(json["steps"].get<int>() > 0);
    REQUIRE(std::isfinite(json["val_loss"].get<double>()));
    REQUIRE(json["peak_bytes"].get<int64_t>() > 0);
    const CliResult evaluated = run_cli("eval --json --load " + dir.file("ts.st") + " --data " + dir.file("series.csv"), dir);
    REQUIRE(evaluated.exit_code == 0);
    const CliResult profiled = run_cli("train --task timeseries --data " + dir.file("series.csv") +
                                       " --window 6 --steps 2 --profile" + kTiny, dir);
    REQUIRE(profiled.exit_code == 0);
    // the model's self-attention: q, k, v on one stacked GEMM, attended in place
    REQUIRE_THAT(profiled.err, Catch::Contains("stacked_linear.backward") &&
                                   Catch::Contains("packed_self_attention"));
    // 40 rows, window 6, horizon 2: 33 windows.
    REQUIRE(nlohmann::json::parse(evaluated.out)["examples"] == 33);
  }
  SECTION("textcls") {
    const CliResult trained = run_cli("train --task textcls --tokenizer word --layers 0 --data " + dir.file("texts.tsv") +
                                      " --epochs 2 --json --save " + dir.file("cls.st") + kTiny, dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    const auto json = nlohmann::json::parse(lines_of(trained.out).back());
    REQUIRE(json["val_accuracy"].get<double>() >= 0.0);
    REQUIRE(json["val_accuracy"].get<double>() <= 1.0);
    const CliResult evaluated = run_cli("eval --json --load " + dir.file("cls.st") + " --data " + dir.file("texts.tsv"), dir);
    REQUIRE(evaluated.exit_code == 0);
    REQUIRE(nlohmann::json::parse(evaluated.out)["examples"] == 30);
    const CliResult classified = run_cli("sample --load " + dir.file("cls.st") + " --prompt 'the cat'", dir);
    REQUIRE(classified.exit_code == 0);
    REQUIRE_THAT(classified.out, Catch::Contains("pets:") && Catch::Contains("wild:"));
    const CliResult plotted = run_cli("plot attention --load " + dir.file("cls.st") + " --text 'the cat sat' --out " + dir.file("attn.png"), dir);
    INFO(plotted.err);
    REQUIRE(plotted.exit_code == 0);
    REQUIRE(read_bytes(dir.file("attn.png")).substr(1, 3) == "PNG");
    require_one_line_error(run_cli("plot attention --load " + dir.file("cls.st") + " --text 'the cat' --layer 3 --out " + dir.file("x.png"), dir), "--layer 3");
  }
  SECTION("charlm") {
    const CliResult trained = run_cli("train --task charlm --context 8 --layers 1 --data " + dir.file("text.txt") +
                                      " --steps 5 --save " + dir.file("lm.st") + kTiny, dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    const CliResult sampled = run_cli("sample --load " + dir.file("lm.st") + " --prompt 'the ' --tokens 20 --seed 1", dir);
    REQUIRE(sampled.exit_code == 0);
    REQUIRE(sampled.out.rfind("the ", 0) == 0);
    // 4 + 20 characters from the corpus's alphabet, all ASCII here.
    REQUIRE(lines_of(sampled.out)[0].size() == 24);
    const CliResult again = run_cli("sample --load " + dir.file("lm.st") + " --prompt 'the ' --tokens 20 --seed 1", dir);
    REQUIRE(again.out == sampled.out);
  }
}

TEST_CASE("train --task charlm defaults to --lr 1e-2 and --dropout 0; typed values and other "
          "tasks keep theirs", "[cli]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("texts.tsv"), small_tsv());
  const std::string tiny = " --steps 2 --dim 8 --heads 2 --batch 4 --threads 1 --schedule constant";
  const auto stored = [&](const std::string& args, const std::string& name) {
    const CliResult trained = run_cli("train " + args + tiny + " --save " + dir.file(name), dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    return tg::train::load_checkpoint(dir.file(name)).config;
  };
  const std::string lm = "--task charlm --context 8 --data " + dir.file("text.txt");
  const tg::train::TrainConfig defaults = stored(lm + " --log " + dir.file("lm.csv"), "lm.st");
  REQUIRE(defaults.lr == 1e-2);
  REQUIRE(defaults.dropout == 0.0);
  REQUIRE(defaults.warmup == 0);
  const std::string step_1 = lines_of(read_bytes(dir.file("lm.csv")))[1];
  REQUIRE(step_1.rfind("1,0,", 0) == 0);
  REQUIRE_THAT(step_1, Catch::Contains(",0.01,"));  // its lr
  const tg::train::TrainConfig typed = stored(lm + " --lr 0.003 --dropout 0.2", "typed.st");
  REQUIRE(typed.lr == 0.003);
  REQUIRE(typed.dropout == 0.2);
  // A resumed run keeps the checkpoint's, typed or not.
  const CliResult resumed = run_cli("train --resume " + dir.file("typed.st") +
                                    " --steps 3 --save " + dir.file("resumed.st"), dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  const tg::train::TrainConfig after = tg::train::load_checkpoint(dir.file("resumed.st")).config;
  REQUIRE(after.lr == 0.003);
  REQUIRE(after.dropout == 0.2);
  const tg::train::TrainConfig cls =
      stored("--task textcls --data " + dir.file("texts.tsv"), "cls.st");
  REQUIRE(cls.lr == 1e-3);
  REQUIRE(cls.dropout == 0.1);
}

TEST_CASE("same seed and threads give identical logs", "[cli]") {
  TempDir dir;
  write_bytes(dir.file("texts.tsv"), small_tsv());
  const std::string args = "train --task textcls --layers 1 --data " + dir.file("texts.tsv") + " --epochs 2" + kTinyModel;
  REQUIRE(run_cli(args + " --seed 3 --log " + dir.file("a.csv"), dir).exit_code == 0);
  REQUIRE(run_cli(args + " --seed 3 --log " + dir.file("b.csv"), dir).exit_code == 0);
  const auto a = log_without_ms(dir.file("a.csv"));
  REQUIRE(a.size() == 1 + 2 * (24 / 4));  // header + 2 epochs of 6 batches (24 training lines)
  REQUIRE(a[0] == "step,epoch,loss,lr,val_loss,val_accuracy,loss_scale,skipped,");
  REQUIRE(a == log_without_ms(dir.file("b.csv")));
  // Another seed trains differently.
  REQUIRE(run_cli(args + " --seed 4 --log " + dir.file("c.csv"), dir).exit_code == 0);
  REQUIRE(a != log_without_ms(dir.file("c.csv")));
}

TEST_CASE("train --resume gives the same losses as an uninterrupted run", "[cli]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string args = "train --task charlm --context 8 --layers 2 --data " + dir.file("text.txt") +
                           " --steps 12 --warmup 3" + kTiny;
  REQUIRE(run_cli(args + " --log " + dir.file("whole.csv"), dir).exit_code == 0);
  REQUIRE(run_cli(args + " --stop-after 5 --save " + dir.file("half.st") + " --log " + dir.file("first.csv"), dir).exit_code == 0);
  const CliResult resumed = run_cli("train --resume " + dir.file("half.st") + " --steps 12 --log " + dir.file("second.csv"), dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  const auto whole = log_without_ms(dir.file("whole.csv"));
  auto pieced = log_without_ms(dir.file("first.csv"));
  const auto second = log_without_ms(dir.file("second.csv"));
  pieced.insert(pieced.end(), second.begin() + 1, second.end());
  REQUIRE(whole.size() == 13);
  REQUIRE(pieced == whole);
}

TEST_CASE("bad input: one clear line on stderr and exit code 2", "[cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  write_bytes(dir.file("texts.tsv"), small_tsv());
  write_bytes(dir.file("text.txt"), small_text());
  const std::string series = " --data " + dir.file("series.csv");

  SECTION("missing and unreadable files") {
    require_one_line_error(run_cli("train --task timeseries --data " + dir.file("nope.csv"), dir), "nope.csv");
    require_one_line_error(run_cli("train --task textcls --data " + dir.path.string(), dir), dir.path.string());
    require_one_line_error(run_cli("eval --load " + dir.file("nope.st") + series, dir), "nope.st");
  }
  SECTION("malformed CSV") {
    write_bytes(dir.file("cell.csv"), "a,b\n1,2\n3,x\n");
    require_one_line_error(run_cli("train --task timeseries --window 1 --data " + dir.file("cell.csv"), dir), "x");
    write_bytes(dir.file("ragged.csv"), "a,b\n1,2\n3\n4,5\n");
    require_one_line_error(run_cli("train --task timeseries --window 1 --data " + dir.file("ragged.csv"), dir), "ragged.csv");
    write_bytes(dir.file("empty.csv"), "");
    require_one_line_error(run_cli("train --task timeseries --data " + dir.file("empty.csv"), dir), "empty");
  }
  SECTION("malformed TSV") {
    write_bytes(dir.file("nolabel.tsv"), "pets\tthe cat\nno tab here\n");
    require_one_line_error(run_cli("train --task textcls --data " + dir.file("nolabel.tsv"), dir), "line 2");
    write_bytes(dir.file("empty.tsv"), "");
    require_one_line_error(run_cli("train --task textcls --data " + dir.file("empty.tsv"), dir), "empty");
  }
  SECTION("impossible settings") {
    require_one_line_error(run_cli("train --task timeseries --dim 10 --heads 4" + series, dir), "--heads 4 does not divide --dim 10");
    require_one_line_error(run_cli("train --task timeseries --window 60" + series, dir), "window");
    require_one_line_error(run_cli("train --task timeseries --window 30 --max-len 16" + series, dir), "--max-len");
    require_one_line_error(run_cli("train --task charlm --context 40 --max-len 32 --data " + dir.file("text.txt"), dir), "--max-len");
    require_one_line_error(run_cli("train --task nonsense" + series, dir), "nonsense");
    require_one_line_error(run_cli("train --task timeseries --optimizer lbfgs" + series, dir), "lbfgs");
    require_one_line_error(run_cli("train --task timeseries --batch 1000" + series, dir), "--batch 1000");
    require_one_line_error(run_cli("train --task timeseries --bogus-flag" + series, dir), "bogus");
    require_one_line_error(run_cli("nonsense", dir), "nonsense");
  }
  SECTION("devices that are malformed or absent (this machine has no GPU)") {
    require_one_line_error(run_cli("train --task timeseries --device gpu" + series, dir), "'gpu'");
    require_one_line_error(run_cli("train --task timeseries --device cuda:99" + series, dir), "cuda:99");
    const CliResult absent = run_cli("train --task timeseries --device cuda" + series + kTiny, dir);
    if (absent.exit_code != 0) require_one_line_error(absent, "cuda:0");  // passes on a GPU
    require_one_line_error(run_cli("gradcheck --device cuda:3 --filter matmul", dir), "cuda:3");
    require_one_line_error(run_cli("bench --workload textcls-small --device tpu", dir), "'tpu'");
  }
  SECTION("corrupt or mismatched checkpoints, and no good checkpoint overwritten") {
    const std::string good = dir.file("good.st");
    REQUIRE(run_cli("train --task timeseries --window 6 --steps 2 --save " + good + series + kTiny, dir).exit_code == 0);
    const std::string bytes = read_bytes(good);
    write_bytes(dir.file("cut.st"), bytes.substr(0, bytes.size() / 2));
    require_one_line_error(run_cli("eval --load " + dir.file("cut.st") + series, dir), "cut.st");
    require_one_line_error(run_cli("train --resume " + dir.file("cut.st"), dir), "cut.st");
    write_bytes(dir.file("junk.st"), "not a checkpoint at all");
    require_one_line_error(run_cli("sample --load " + dir.file("junk.st") + " --prompt a", dir), "junk.st");
    // A timeseries checkpoint evaluated on text, and sampled: clear errors.
    require_one_line_error(run_cli("eval --load " + good + " --data " + dir.file("texts.tsv"), dir), "texts.tsv");
    require_one_line_error(run_cli("sample --load " + good + " --prompt a", dir), "timeseries");
    require_one_line_error(run_cli("plot attention --load " + good + " --text a --out " + dir.file("a.png"), dir), "timeseries");
    // A run that fails keeps its hands off the existing checkpoint.
    require_one_line_error(run_cli("train --task timeseries --heads 3 --save " + good + series, dir), "--heads 3");
    require_one_line_error(run_cli("train --task timeseries --window 6 --steps 1 --save " + dir.file("no/such/dir/x.st") + series + kTiny, dir), "no/such/dir");
    REQUIRE(read_bytes(good) == bytes);
  }
}
