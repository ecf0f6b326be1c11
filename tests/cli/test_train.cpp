// `tapegrad train`, `eval` and `sample` on small data: each task end to end, determinism,
// --resume equivalence (saving back to its checkpoint, continuing its log, a finished run), the
// outputs checked before the data is read, a failed diagnostic output that still saves, one
// clear line + exit code 2 for every kind of bad input, and textcls's max_len: derived from the
// data when not typed, and --truncate.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "tapegrad/io/safetensors.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/datasets.h"
#include "tests/cli/cli_support.h"
#include "tests/support/skip.h"

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

namespace {

// A charlm run of 12 steps on dir/text.txt, and its checkpoint's step.
std::string resumable_run(const TempDir& dir) {
  write_bytes(dir.file("text.txt"), small_text());
  return "train --task charlm --context 8 --data " + dir.file("text.txt") +
         " --steps 12 --warmup 3" + kTiny;
}

int64_t checkpoint_step(const std::string& path) {
  return std::stoll(tg::load_safetensors(path).metadata.at("step"));
}

}  // namespace

TEST_CASE("train --resume saves back to its checkpoint, and --resume X --save X is allowed",
          "[cli][resume]") {
  TempDir dir;
  const std::string args = resumable_run(dir);
  REQUIRE(run_cli(args + " --save " + dir.file("whole.st"), dir).exit_code == 0);
  for (const std::string& save : {std::string(), " --save " + dir.file("half.st")}) {
    INFO("save:" << save);
    REQUIRE(run_cli(args + " --stop-after 5 --save " + dir.file("half.st"), dir).exit_code == 0);
    const CliResult resumed =
        run_cli("train --resume " + dir.file("half.st") + " --threads 1" + save, dir);
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    REQUIRE_THAT(resumed.out, Catch::Contains("trained 7 steps (12/12)"));
    REQUIRE(checkpoint_step(dir.file("half.st")) == 12);
    REQUIRE(read_bytes(dir.file("half.st")) == read_bytes(dir.file("whole.st")));
  }
  // --save-every writes the file --resume saves back to.
  REQUIRE(run_cli(args + " --stop-after 5 --save " + dir.file("half.st"), dir).exit_code == 0);
  REQUIRE(run_cli("train --resume " + dir.file("half.st") + " --save-every 4", dir).exit_code == 0);
  // Any other output is still not the --resume file, nor two outputs one file.
  require_one_line_error(run_cli("train --resume " + dir.file("half.st") + " --log " +
                                     dir.file("half.st"), dir), "is the --resume file");
  require_one_line_error(run_cli("train --resume " + dir.file("half.st") + " --save " +
                                     dir.file("x.st") + " --save-best " + dir.file("x.st"), dir),
                         "two outputs cannot share a file");
}

TEST_CASE("train --resume of a finished run says so, without NaN, or trains on a higher --steps",
          "[cli][resume]") {
  TempDir dir;
  const std::string args = resumable_run(dir), done = dir.file("done.st");
  REQUIRE(run_cli(args + " --save " + done + " --log " + dir.file("log.csv"), dir).exit_code == 0);
  const std::string trained = read_bytes(done), log = read_bytes(dir.file("log.csv"));
  const CliResult again = run_cli("train --resume " + done + " --log " + dir.file("log.csv") +
                                      " --json", dir);
  INFO(again.err);
  REQUIRE(again.exit_code == 0);
  REQUIRE(lines_of(again.out).size() == 2);
  REQUIRE(lines_of(again.out)[0] ==
          done + " already finished step 12 of 12; nothing to train (raise --steps or --epochs to "
                 "train more)");
  const auto json = nlohmann::json::parse(lines_of(again.out)[1]);
  REQUIRE(json["steps"] == 12);
  REQUIRE(json["train_loss"].is_null());
  REQUIRE(json["ms_per_step"].is_null());
  REQUIRE(again.out.find("NaN") == std::string::npos);
  REQUIRE(again.err.find("NaN") == std::string::npos);
  REQUIRE(read_bytes(done) == trained);             // nothing rewritten
  REQUIRE(read_bytes(dir.file("log.csv")) == log);  // nor the log emptied
  // Another --save gets the finished checkpoint.
  REQUIRE(run_cli("train --resume " + done + " --save " + dir.file("copy.st"), dir).exit_code == 0);
  REQUIRE(checkpoint_step(dir.file("copy.st")) == 12);
  // A higher --steps trains on.
  const CliResult more = run_cli("train --resume " + done + " --steps 14", dir);
  INFO(more.err);
  REQUIRE(more.exit_code == 0);
  REQUIRE_THAT(more.out, Catch::Contains("trained 2 steps (14/14): train loss "));
  REQUIRE(more.out.find("NaN") == std::string::npos);
  REQUIRE(checkpoint_step(done) == 14);
}

TEST_CASE("train --resume continues its --log: one header, the rows up to the checkpoint, then on",
          "[cli][resume]") {
  TempDir dir;
  const std::string args = resumable_run(dir), log = dir.file("log.csv");
  REQUIRE(run_cli(args + " --log " + dir.file("whole.csv"), dir).exit_code == 0);
  const std::vector<std::string> whole = log_without_ms(dir.file("whole.csv"));
  REQUIRE(whole.size() == 13);
  REQUIRE(run_cli(args + " --stop-after 5 --save " + dir.file("half.st") + " --log " + log, dir)
              .exit_code == 0);
  REQUIRE(run_cli("train --resume " + dir.file("half.st") + " --save " + dir.file("end.st") +
                      " --log " + log, dir).exit_code == 0);
  REQUIRE(log_without_ms(log) == whole);
  // A log that went past the checkpoint (a run killed after it) loses the rows after its step:
  // the resumed run writes those steps again.
  REQUIRE(run_cli(args + " --stop-after 5 --save " + dir.file("half.st") + " --log " + log, dir)
              .exit_code == 0);
  REQUIRE(run_cli("train --resume " + dir.file("half.st") + " --stop-after 3 --save " +
                      dir.file("other.st") + " --log " + log, dir).exit_code == 0);
  REQUIRE(log_without_ms(log).size() == 9);  // steps 1-8
  REQUIRE(run_cli("train --resume " + dir.file("half.st") + " --save " + dir.file("end.st") +
                      " --log " + log, dir).exit_code == 0);
  REQUIRE(log_without_ms(log) == whole);
  // A file that is not a log of this run's steps (here: no step 5 row) starts afresh.
  write_bytes(log, "step,epoch,loss,lr,ms,val_loss,val_accuracy,loss_scale,skipped\n9,0,1,1,1,,,1,0\n");
  REQUIRE(run_cli("train --resume " + dir.file("half.st") + " --save " + dir.file("end.st") +
                      " --log " + log, dir).exit_code == 0);
  std::vector<std::string> rest(whole.begin() + 6, whole.end());
  rest.insert(rest.begin(), whole[0]);
  REQUIRE(log_without_ms(log) == rest);
}

TEST_CASE("train checks every output's name and rename before reading the data",
          "[cli][reliability]") {
  TempDir dir;
  // Data that fails to parse: an error about it would mean the outputs were checked too late.
  write_bytes(dir.file("bad.csv"), "a,b\n1,x\n");
  const std::string train = "train --task timeseries --window 1 --data " + dir.file("bad.csv");
  const std::string long_name = std::string(300, 'n') + ".st";
  for (const std::string flag : {"--save", "--save-best", "--save-init", "--profile-trace"}) {
    INFO(flag);
    require_one_line_error(run_cli(train + " " + flag + " " + dir.file(long_name), dir),
                           flag + ": cannot write '" + dir.file(long_name) + "': its name is 303 "
                           "bytes, more than the 255 a file name may have");
  }
  std::string deep = dir.path.string();  // the directory itself, named the long way
  while (deep.size() < 4200) deep += "/.";
  require_one_line_error(run_cli(train + " --save " + deep + "/ck.st", dir), "more than the 4095");
}

TEST_CASE("train refuses, before training, a --save a sticky directory would not let it replace",
          "[cli][reliability]") {
  // Needs two users: root makes a file of another user in a sticky directory, and tapegrad runs
  // as `nobody` (setpriv), to whom the rename at the end would be refused (EPERM).
  TempDir dir;
  const bool can_switch_user =
      geteuid() == 0 &&
      std::system(("setpriv --reuid=65534 --regid=65534 --clear-groups test -x '" +
                   std::string(TAPEGRAD_BIN) + "' 2>/dev/null").c_str()) == 0;
  if (skip_unless(can_switch_user, "needs root and setpriv, and the binary runnable by nobody")) {
    return;
  }
  fs::permissions(dir.path, fs::perms::all, fs::perm_options::replace);
  write_bytes(dir.file("text.txt"), small_text());
  fs::create_directory(dir.file("sticky"));
  REQUIRE(::chmod(dir.file("sticky").c_str(), 01777) == 0);
  const std::string theirs = dir.file("sticky/ck.st");
  write_bytes(theirs, "another user's file");
  REQUIRE(::chmod(theirs.c_str(), 0666) == 0);  // writable by all: only the sticky bit refuses
  REQUIRE(::chown(theirs.c_str(), 4242, 4242) == 0);
  const CliResult run = run_cli("train --task charlm --context 8 --steps 2 --data " +
                                    dir.file("text.txt") + kTiny + " --save " + theirs, dir,
                                "setpriv --reuid=65534 --regid=65534 --clear-groups");
  require_one_line_error(run, "--save: cannot replace '" + theirs + "': it belongs to another "
                              "user (uid 4242) and its directory is sticky (mode 1777)");
  REQUIRE(read_bytes(theirs) == "another user's file");
}

TEST_CASE("train: a diagnostic output failing mid-run stops after the step, --save written first",
          "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string ck = dir.file("ck.st"), stats = dir.file("grads.csv");
  // Files of at most 64 KiB (a write past it fails with EFBIG): the checkpoint fits, the
  // --grad-stats rows of every step outgrow it after some steps.
  const CliResult run = run_cli("train --task charlm --context 8 --steps 400 --optimizer sgd --data " +
                                    dir.file("text.txt") + kTiny + " --grad-stats " + stats +
                                    " --grad-stats-every 1 --save " + ck, dir,
                                "trap '' XFSZ; ulimit -f 64;");
  INFO(run.err);
  REQUIRE(run.exit_code == 2);
  const std::string last = lines_of(run.err).back();
  REQUIRE_THAT(last, Catch::StartsWith("tapegrad train: error: --grad-stats: writing '" + stats +
                                       "' failed: File too large; stopped after step "));
  const int64_t step = std::stoll(last.substr(last.find("stopped after step ") + 19));
  REQUIRE(step < 400);
  REQUIRE_THAT(last, Catch::EndsWith(" of 400; saved " + ck +
                                     " (continue with: tapegrad train --resume " + ck + ")"));
  REQUIRE(checkpoint_step(ck) == step);
}

// ---- textcls's --max-len default and --truncate -------------------------------------------------

namespace {

const std::string kFortunes = std::string(TAPEGRAD_SOURCE_DIR) + "/data/fortunes.tsv";

// The texts of a TSV file's non-blank lines (what follows the first tab), "\r" dropped.
std::vector<std::string> tsv_texts(const std::string& path) {
  std::vector<std::string> texts;
  for (std::string line : lines_of(read_bytes(path))) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
    texts.push_back(line.substr(line.find('\t') + 1));
  }
  return texts;
}

// The longest text's tokens: characters counted by hand (UTF-8 bytes that do not continue a
// character), words and whitespace words by the library's tokenizer.
int64_t longest_line_tokens(const std::string& path, const std::string& tokenizer) {
  int64_t longest = 0;
  for (const std::string& text : tsv_texts(path)) {
    int64_t count = 0;
    if (tokenizer == "char") {
      for (const char byte : text) count += (static_cast<unsigned char>(byte) & 0xC0) != 0x80;
    } else {
      count = static_cast<int64_t>(tg::train::tokenize(text, tg::train::parse_tokenizer(tokenizer)).size());
    }
    longest = std::max(longest, count);
  }
  return longest;
}

// A run's exit code and its peak resident memory (wait4's ru_maxrss, KiB); stdout and stderr go
// to dir/.stdout and dir/.stderr.
struct PeakRun {
  int exit_code = -1;
  long peak_kib = 0;
};
PeakRun run_cli_peak(const std::string& arguments, const TempDir& dir) {
  // `exec`: the shell becomes tapegrad, so that the usage wait4 reports is tapegrad's own.
  const std::string command = "exec '" + std::string(TAPEGRAD_BIN) + "' " + arguments + " > '" +
                              dir.file(".stdout") + "' 2> '" + dir.file(".stderr") + "' < /dev/null";
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::execl("/bin/sh", "sh", "-c", command.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  REQUIRE(::wait4(pid, &status, 0, &usage) == pid);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, usage.ru_maxrss};
}

// Two lines of 40 and 25 characters (20 'q' then 20 'z', 25 'k': letters small_tsv() has not),
// then small_tsv()'s 30: the long lines train, the last 3 lines validate.
std::string tsv_with_long_lines() {
  return "pets\t" + std::string(20, 'q') + std::string(20, 'z') + "\nwild\t" + std::string(25, 'k') +
         "\n" + small_tsv();
}

}  // namespace

TEST_CASE("train --task textcls --data data/fortunes.tsv trains with its defaults, every "
          "tokenizer: max_len is the longest line's tokens", "[cli][max-len]") {
  TempDir dir;
  for (const std::string tokenizer : {"char", "word", "whitespace"}) {
    INFO("--tokenizer " << tokenizer);
    const std::string ck = dir.file(tokenizer + ".st");
    // char is the default tokenizer: no flag for it.
    const std::string flag = tokenizer == "char" ? "" : " --tokenizer " + tokenizer;
    const CliResult trained = run_cli("train --task textcls --data " + kFortunes + flag +
                                          " --steps 2 --threads 1 --save " + ck, dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    const int64_t longest = longest_line_tokens(kFortunes, tokenizer);
    const tg::train::TrainConfig config = tg::train::load_checkpoint(ck).config;
    REQUIRE(config.max_len == longest);
    REQUIRE_FALSE(config.truncate);
    REQUIRE_THAT(trained.err, Catch::Contains("max_len " + std::to_string(longest) +
                                              " (the longest line of " + kFortunes + ", " +
                                              tokenizer + " tokens)"));
  }
  // The lengths data/fortunes.tsv is known for (docs/cli.md): 300 characters, 123 and 58 words.
  REQUIRE(longest_line_tokens(kFortunes, "char") == 300);
  REQUIRE(longest_line_tokens(kFortunes, "word") == 123);
  REQUIRE(longest_line_tokens(kFortunes, "whitespace") == 58);
}

TEST_CASE("train --max-len: textcls derives it, timeseries and charlm keep 256, a typed one wins",
          "[cli][max-len]") {
  TempDir dir;
  write_bytes(dir.file("texts.tsv"), tsv_with_long_lines());
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("series.csv"), small_csv());
  const auto max_len_of = [&](const std::string& args) {
    const CliResult trained = run_cli("train " + args + " --steps 1" + kTiny + " --save " + dir.file("ck.st"), dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    return tg::train::load_checkpoint(dir.file("ck.st")).config.max_len;
  };
  REQUIRE(max_len_of("--task textcls --data " + dir.file("texts.tsv")) == 40);
  REQUIRE(max_len_of("--task textcls --max-len 64 --data " + dir.file("texts.tsv")) == 64);
  REQUIRE(max_len_of("--task charlm --context 8 --data " + dir.file("text.txt")) == 256);
  REQUIRE(max_len_of("--task timeseries --window 6 --data " + dir.file("series.csv")) == 256);
  // A resumed run keeps the checkpoint's max_len, whatever the data's longest line.
  REQUIRE(max_len_of("--task textcls --max-len 64 --data " + dir.file("texts.tsv")) == 64);
  const CliResult resumed = run_cli("train --resume " + dir.file("ck.st") + " --steps 2", dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(resumed.err.find("max_len 40") == std::string::npos);
  REQUIRE(tg::train::load_checkpoint(dir.file("ck.st")).config.max_len == 64);
  // ... and its truncation: --truncate cannot be switched on for it.
  require_one_line_error(run_cli("train --resume " + dir.file("ck.st") + " --truncate", dir),
                         "--truncate conflicts with the checkpoint's truncate false");
}

TEST_CASE("train --truncate cuts long lines to --max-len and says how many; the checkpoint makes "
          "eval, sample and plot attention cut the same", "[cli][max-len]") {
  TempDir dir;
  const std::string texts = dir.file("texts.tsv"), ck = dir.file("cut.st");
  write_bytes(texts, tsv_with_long_lines());
  // Without --truncate: today's error, with the hint that names it.
  const CliResult refused = run_cli("train --task textcls --max-len 20 --steps 1 --data " + texts + kTiny, dir);
  require_one_line_error(refused, "line 1 has 40 char tokens, past the model's max_len 20 (the "
                                  "longest of 2 lines past it; train with --max-len 40, or with "
                                  "--truncate to cut such lines to their first 20 tokens)");
  // With it: lines 1 and 2 cut, the count in one line.
  const CliResult trained = run_cli("train --task textcls --max-len 20 --truncate --steps 1 --data " +
                                        texts + kTiny + " --save " + ck, dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);
  REQUIRE_THAT(trained.err, Catch::Contains("truncated 2 of 32 lines to 20 tokens\n"));
  const tg::train::Checkpoint checkpoint = tg::train::load_checkpoint(ck);
  REQUIRE(checkpoint.config.truncate);
  REQUIRE(checkpoint.config.max_len == 20);
  // The vocabulary holds what was kept: line 1's 'q's, not the 'z's cut from its end.
  const std::vector<std::string> vocab = checkpoint.data_state.at("vocab").get<std::vector<std::string>>();
  REQUIRE(std::count(vocab.begin(), vocab.end(), "q") == 1);
  REQUIRE(std::count(vocab.begin(), vocab.end(), "z") == 0);

  // eval on a file with a longer line: cut as in training (whole file, every line evaluated).
  write_bytes(dir.file("longer.tsv"), small_tsv() + "pets\t" + std::string(600, 'a') + "\n");
  const CliResult evaluated = run_cli("eval --json --load " + ck + " --data " + dir.file("longer.tsv"), dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  REQUIRE(nlohmann::json::parse(evaluated.out)["examples"] == 31);
  REQUIRE_THAT(evaluated.err, Catch::Contains("truncated 1 of 31 lines to 20 tokens"));
  // sample and plot attention read a long text as its first 20 tokens.
  const std::string long_text = std::string(600, 'a');
  const CliResult classified = run_cli("sample --load " + ck + " --prompt " + long_text, dir);
  INFO(classified.err);
  REQUIRE(classified.exit_code == 0);
  REQUIRE(classified.out == run_cli("sample --load " + ck + " --prompt " + long_text.substr(0, 20), dir).out);
  REQUIRE(run_cli("plot attention --load " + ck + " --text " + long_text + " --out " + dir.file("a.png"), dir)
              .exit_code == 0);
  // A resumed run keeps cutting.
  const CliResult resumed = run_cli("train --resume " + ck + " --steps 2", dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  REQUIRE_THAT(resumed.err, Catch::Contains("truncated 2 of 32 lines to 20 tokens"));
  // --truncate is textcls's alone.
  write_bytes(dir.file("series.csv"), small_csv());
  require_one_line_error(run_cli("train --task timeseries --truncate --data " + dir.file("series.csv"), dir),
                         "--truncate does not apply to --task timeseries");
}

TEST_CASE("train --task textcls: a line past the default's cap is an error naming --truncate and "
          "--max-len", "[cli][max-len]") {
  TempDir dir;
  write_bytes(dir.file("texts.tsv"), small_tsv() + "pets\t" + std::string(5000, 'x') + "\n");
  const CliResult refused = run_cli("train --task textcls --steps 1 --data " + dir.file("texts.tsv") + kTiny, dir);
  require_one_line_error(refused, "line 31 has 5000 char tokens, more than the 4096 a default --max-len "
                                  "may be: train with --truncate to cut longer lines to their first "
                                  "4096 tokens, or with --max-len 5000");
}

TEST_CASE("train --max-len: an absurd value is one clear line and exit code 2, before any memory "
          "is spent on it", "[cli][max-len]") {
  TempDir dir;
  write_bytes(dir.file("texts.tsv"), small_tsv());
  const std::string textcls = "train --task textcls --steps 1 --data " + dir.file("texts.tsv") + kTiny;
  require_one_line_error(run_cli(textcls + " --max-len -5", dir), "--max-len must be in [1, 1048576], got -5");
  require_one_line_error(run_cli(textcls + " --max-len 0", dir), "--max-len must be in [1, 1048576], got 0");
  require_one_line_error(run_cli(textcls + " --max-len abc", dir), "--max-len");
  require_one_line_error(run_cli(textcls + " --max-len 1e9", dir), "--max-len");
  require_one_line_error(run_cli(textcls + " --max-len 99999999999999999999", dir), "--max-len");
  require_one_line_error(run_cli(textcls + " --max-len 1099511627776", dir),
                         "--max-len must be in [1, 1048576], got 1099511627776");
  // A size the limits refuse is refused before its memory is spent: --max-len 2^20 at --dim 128
  // would be a positional table of 512 MiB; the run that refuses it peaks no higher than one
  // refused for a missing file after the same checks (all that differs is the 16-row table).
  const std::string wide = "train --task textcls --steps 1 --dim 128 --heads 1 --data ";
  const PeakRun refused = run_cli_peak(wide + dir.file("texts.tsv") + " --max-len 1048576", dir);
  INFO(read_bytes(dir.file(".stderr")));
  REQUIRE(refused.exit_code == 2);
  REQUIRE_THAT(read_bytes(dir.file(".stderr")),
               Catch::Contains("--max-len 1048576 x --dim 128 is more than the 67108864 entries"));
  const PeakRun baseline = run_cli_peak(wide + dir.file("none.tsv") + " --max-len 16", dir);
  REQUIRE(baseline.exit_code == 2);
  REQUIRE_THAT(read_bytes(dir.file(".stderr")), Catch::Contains("none.tsv"));
  REQUIRE(refused.peak_kib < baseline.peak_kib + 64 * 1024);
}
