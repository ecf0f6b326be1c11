// The one rule for a command's files (io/file_io.h check_distinct_files): an output is never an
// input or another output; the checkpoint is written before the diagnostics; a long name saves.
#include <sys/stat.h>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kPathsTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 3";

// A small charlm checkpoint at dir/ck.st, trained on dir/text.txt; the training command's start.
std::string train_small_charlm(const TempDir& dir) {
  write_bytes(dir.file("text.txt"), small_text());
  const std::string train = "train --task charlm --context 8 --data " + dir.file("text.txt") +
                            kPathsTiny;
  const CliResult trained = run_cli(train + " --steps 2 --save " + dir.file("ck.st"), dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);
  return train;
}

}  // namespace

TEST_CASE("no output of train may name the --resume checkpoint", "[cli][reliability][paths]") {
  TempDir dir;
  const std::string train = train_small_charlm(dir);
  const std::string checkpoint = dir.file("ck.st"), trained = read_bytes(checkpoint);
  const std::string resume = train + " --steps 4 --resume " + checkpoint;
  for (const std::string flag :
       {"--log", "--grad-stats", "--profile-trace", "--save-init", "--save-best"}) {
    INFO(flag);
    require_one_line_error(run_cli(resume + " " + flag + " " + checkpoint, dir),
                           flag + ": '" + checkpoint + "' is the --resume file");
    REQUIRE(read_bytes(checkpoint) == trained);
  }
}

TEST_CASE("two outputs of train may not share a file", "[cli][reliability][paths]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string train = "train --task charlm --context 8 --steps 2 --data " +
                            dir.file("text.txt") + kPathsTiny;
  const std::string shared = dir.file("out");
  const std::pair<std::string, std::string> pairs[] = {{"--log", "--grad-stats"},
                                                       {"--log", "--profile-trace"},
                                                       {"--save-init", "--profile-trace"},
                                                       {"--save-init", "--grad-stats"},
                                                       {"--save", "--log"},
                                                       {"--save", "--save-best"}};
  for (const auto& [first, second] : pairs) {
    INFO(first << " " << second);
    require_one_line_error(run_cli(train + " " + first + " " + shared + " " + second + " " +
                                       shared, dir), "two outputs cannot share a file");
    REQUIRE_FALSE(fs::exists(shared));
  }
  // The same file under another name (a symbolic link) counts.
  REQUIRE(::symlink(shared.c_str(), dir.file("alias").c_str()) == 0);
  require_one_line_error(run_cli(train + " --log " + shared + " --grad-stats " + dir.file("alias"),
                                 dir), "two outputs cannot share a file");
}

TEST_CASE("plot attention never writes its PNG over the checkpoint or the data",
          "[cli][reliability][paths]") {
  TempDir dir;
  train_small_charlm(dir);
  const std::string checkpoint = dir.file("ck.st"), trained = read_bytes(checkpoint);
  require_one_line_error(run_cli("plot attention --load " + checkpoint + " --text 'the' --out " +
                                     checkpoint, dir),
                         "--out: '" + checkpoint + "' is the --load file");
  require_one_line_error(run_cli("plot attention --summary --load " + checkpoint + " --data " +
                                     dir.file("text.txt") + " --out " + dir.file("text.txt"), dir),
                         "is the --data file");
  REQUIRE(read_bytes(checkpoint) == trained);
  REQUIRE(read_bytes(dir.file("text.txt")) == small_text());
}

TEST_CASE("a trace that cannot be written does not cost the trained checkpoint",
          "[cli][reliability][paths]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  // Files of at most 64 KiB (tapegrad ignores SIGXFSZ: a write past it fails with EFBIG): the
  // checkpoint fits, a trace of 40 steps (the default schedule keeps every one) does not.
  const std::string limited = "ulimit -f 64;";
  const CliResult run = run_cli("train --task charlm --context 8 --steps 40 --data " +
                                    dir.file("text.txt") + kPathsTiny + " --save " +
                                    dir.file("ck.st") + " --profile-trace " + dir.file("t.json"),
                                dir, limited);
  INFO(run.err);
  REQUIRE(run.exit_code == 2);
  REQUIRE_THAT(run.err, Catch::Contains("--profile-trace") && Catch::Contains("File too large"));
  // The checkpoint is complete: eval loads it.
  REQUIRE(fs::exists(dir.file("ck.st")));
  const CliResult evaluated = run_cli("eval --threads 1 --load " + dir.file("ck.st") + " --data " +
                                          dir.file("text.txt"), dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  REQUIRE_FALSE(fs::exists(dir.file("t.json")));
}

TEST_CASE("a --save name of 255 bytes is saved", "[cli][reliability][paths]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string name = dir.file(std::string(252, 'c') + ".st");
  const CliResult run = run_cli("train --task charlm --context 8 --steps 1 --data " +
                                    dir.file("text.txt") + kPathsTiny + " --save " + name, dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  REQUIRE(fs::exists(name));
}
