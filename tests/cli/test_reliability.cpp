// The command line under hostile input: numbers that overflow or mean nothing, divergence, outputs
// that would clobber something, --resume with conflicting options or moved data.
#include <sys/stat.h>

#include <cmath>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 3";
const std::string kHuge = "9223372036854775807";

}  // namespace

TEST_CASE("numbers that overflow or mean nothing are refused before any work", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  write_bytes(dir.file("text.txt"), small_text());
  const std::string series = "train --task timeseries --data " + dir.file("series.csv") + kTiny;
  const std::string text = "train --task charlm --data " + dir.file("text.txt") + kTiny;
  require_one_line_error(run_cli(series + " --epochs " + kHuge, dir), "--epochs");
  require_one_line_error(run_cli(series + " --horizon " + kHuge, dir), "--horizon");
  require_one_line_error(run_cli(series + " --window " + kHuge, dir), "--window");
  require_one_line_error(run_cli(text + " --context " + kHuge, dir), "--context");
  require_one_line_error(run_cli(series + " --max-len 288230376151711744", dir), "--max-len");
  require_one_line_error(run_cli(series + " --steps " + kHuge, dir), "--steps");
  require_one_line_error(run_cli(series + " --warmup " + kHuge, dir), "--warmup");
  require_one_line_error(run_cli(series + " --threads 100000", dir), "--threads");
  require_one_line_error(run_cli(series + " --threads 50000", dir), "--threads");
  require_one_line_error(run_cli(series + " --threads -3", dir), "--threads");
  require_one_line_error(run_cli(series + " --seed -1", dir), "--seed");
  require_one_line_error(run_cli(series + " --seed 18446744073709551616", dir), "--seed");
  require_one_line_error(run_cli(series + " --eval-every -1", dir), "--eval-every");
  require_one_line_error(run_cli(series + " --lr inf", dir), "--lr");
  require_one_line_error(run_cli(series + " --lr nan", dir), "--lr");
  require_one_line_error(run_cli(series + " --weight-decay inf", dir), "--weight-decay");
  require_one_line_error(run_cli(series + " --clip inf", dir), "--clip");
  require_one_line_error(run_cli(series + " --dim 10000000", dir), "--dim");
  require_one_line_error(run_cli(series + " --stop-after -1", dir), "--stop-after");
  // The largest seed is a seed.
  REQUIRE(run_cli("train --task timeseries --window 4 --steps 1 --dim 8 --heads 2 --batch 4 --data " +
                  dir.file("series.csv") + " --seed 18446744073709551615", dir).exit_code == 0);

  const std::string model = dir.file("m.st");
  REQUIRE(run_cli(text + " --context 8 --steps 2 --save " + model, dir).exit_code == 0);
  const std::string eval = "eval --load " + model + " --data " + dir.file("text.txt");
  require_one_line_error(run_cli(eval + " --batch -5", dir), "--batch");
  require_one_line_error(run_cli(eval + " --batch 0", dir), "--batch");
  require_one_line_error(run_cli(eval + " --threads 100000", dir), "--threads");
  const std::string sample = "sample --load " + model + " --prompt the";
  require_one_line_error(run_cli(sample + " --temperature inf", dir), "--temperature");
  require_one_line_error(run_cli(sample + " --temperature nan", dir), "--temperature");
  require_one_line_error(run_cli(sample + " --tokens 1000000000000", dir), "--tokens");
  require_one_line_error(run_cli(sample + " --seed -1", dir), "--seed");
  require_one_line_error(run_cli("bench --workload textcls-small --steps " + kHuge, dir), "--steps");
  require_one_line_error(run_cli("bench --workload textcls-small --threads 100000", dir), "--threads");
}

TEST_CASE("a diverged run stops with one line, a non-zero exit and no checkpoint", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  write_bytes(dir.file("huge.csv"), small_csv(3e38));
  const std::string series = "train --task timeseries --window 4 --data " + dir.file("series.csv") + kTiny;
  const std::string good = dir.file("good.st");
  REQUIRE(run_cli(series + " --steps 2 --save " + good, dir).exit_code == 0);
  const std::string good_bytes = read_bytes(good);

  const auto require_diverged = [&](const std::string& arguments) {
    const CliResult result = run_cli(arguments + " --save " + good + " --log " + dir.file("log.csv"), dir);
    INFO(arguments << "\nstderr: " << result.err);
    REQUIRE(result.exit_code == 3);
    REQUIRE_THAT(result.err, Catch::Contains("diverged at step"));
    REQUIRE(lines_of(result.err).back().find("diverged at step") != std::string::npos);
    REQUIRE(read_bytes(good) == good_bytes);  // the good checkpoint is untouched
  };
  require_diverged(series + " --steps 20 --lr 1e6 --clip 0 --optimizer sgd");
  require_diverged(series + " --steps 20 --lr 1e30 --clip 0");
  require_diverged("train --task timeseries --window 4 --normalize none --steps 5 --data " +
                   dir.file("huge.csv") + kTiny);
  require_diverged("train --task timeseries --window 4 --normalize none --steps 60 --amp fp16 --data " +
                   dir.file("huge.csv") + kTiny);
  // The log keeps the rows up to the step that diverged, for a look at what happened.
  REQUIRE(lines_of(read_bytes(dir.file("log.csv"))).size() >= 2);
}

TEST_CASE("outputs are checked before training and never clobber the data", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string data = dir.file("series.csv");
  const std::string series = "train --task timeseries --window 4 --steps 2 --data " + data + kTiny;
  require_one_line_error(run_cli(series + " --save " + data, dir), "data");
  require_one_line_error(run_cli(series + " --log " + data, dir), "data");
  require_one_line_error(run_cli(series + " --save-init " + data, dir), "data");
  // The same file under another name is still the same file.
  REQUIRE(::symlink(data.c_str(), dir.file("alias.csv").c_str()) == 0);
  require_one_line_error(run_cli(series + " --log " + dir.file("alias.csv"), dir), "data");
  REQUIRE(read_bytes(data) == small_csv());
  // A directory as --save is refused before training (the stderr has no progress lines).
  fs::create_directory(dir.file("out"));
  require_one_line_error(run_cli(series + " --save " + dir.file("out"), dir), "directory");
  // A log that cannot be written (a full disk) is an error, not a silently short log.
  require_one_line_error(run_cli(series + " --log /dev/full --save " + dir.file("m.st"), dir),
                         "No space left on device");
  REQUIRE_FALSE(fs::exists(dir.file("m.st")));
  // A FIFO as --save stays a FIFO.
  REQUIRE(::mkfifo(dir.file("fifo").c_str(), 0644) == 0);
  require_one_line_error(run_cli(series + " --save " + dir.file("fifo"), dir), "fifo");
  REQUIRE(fs::is_fifo(dir.file("fifo")));
}

TEST_CASE("train --resume refuses conflicting options and finds moved data by content", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string checkpoint = dir.file("half.st");
  REQUIRE(run_cli("train --task charlm --context 8 --steps 6 --stop-after 3 --data " + dir.file("text.txt") +
                      kTiny + " --save " + checkpoint, dir).exit_code == 0);
  const std::string saved = read_bytes(checkpoint);
  const std::string resume = "train --resume " + checkpoint;
  require_one_line_error(run_cli(resume + " --dim 16 --heads 2", dir), "--dim");
  require_one_line_error(run_cli(resume + " --lr 0.5", dir), "--lr");
  require_one_line_error(run_cli(resume + " --seed 4", dir), "--seed");
  require_one_line_error(run_cli(resume + " --no-shuffle", dir), "shuffle");
  REQUIRE(read_bytes(checkpoint) == saved);
  // Options equal to the saved ones are no conflict.
  REQUIRE(run_cli(resume + " --dim 8 --heads 2 --steps 4 --save " + dir.file("a.st"), dir).exit_code == 0);

  // The data moves: the saved (absolute) path is gone, --data points at the copy.
  fs::create_directory(dir.file("moved"));
  fs::rename(dir.file("text.txt"), dir.file("moved/text.txt"));
  require_one_line_error(run_cli(resume, dir), "text.txt");
  const CliResult moved = run_cli(resume + " --data " + dir.file("moved/text.txt") + " --save " + dir.file("b.st"), dir);
  INFO(moved.err);
  REQUIRE(moved.exit_code == 0);
  // Different data under the old name is refused.
  write_bytes(dir.file("other.txt"), small_text() + "something else entirely");
  require_one_line_error(run_cli(resume + " --data " + dir.file("other.txt"), dir), "SHA-256");
}

TEST_CASE("sample streams what it draws", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string model = dir.file("m.st");
  REQUIRE(run_cli("train --task charlm --context 8 --steps 2 --data " + dir.file("text.txt") + kTiny +
                      " --save " + model, dir).exit_code == 0);
  const CliResult result = run_cli("sample --load " + model + " --prompt the --tokens 25 --seed 5", dir);
  REQUIRE(result.exit_code == 0);
  // The prompt, then 25 characters of the training text's alphabet (all one byte here), then "\n".
  REQUIRE(result.out.size() == 3 + 25 + 1);
  REQUIRE(result.out.rfind("the", 0) == 0);
  // Output that cannot be written stops the sampling at the first character, with one line.
  const std::string command = std::string("'") + TAPEGRAD_BIN + "' sample --load " + model +
                              " --prompt the --tokens 1000000 > /dev/full 2> " + dir.file("err");
  const int status = std::system(command.c_str());
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 2);
  REQUIRE(lines_of(read_bytes(dir.file("err"))).size() == 1);
  REQUIRE_THAT(read_bytes(dir.file("err")), Catch::Contains("writing the sample to stdout failed after 1 "));
}

TEST_CASE("eval refuses a CSV whose columns are not the trained-on ones", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string model = dir.file("m.st");
  REQUIRE(run_cli("train --task timeseries --window 4 --steps 1 --data " + dir.file("series.csv") + kTiny +
                      " --save " + model, dir).exit_code == 0);
  std::string swapped = "value,t\n";
  for (int i = 0; i < 40; ++i) swapped += std::to_string(std::sin(i * 0.3)) + "," + std::to_string(i) + "\n";
  write_bytes(dir.file("swapped.csv"), swapped);
  require_one_line_error(run_cli("eval --load " + model + " --data " + dir.file("swapped.csv"), dir),
                         "trained on [\"t\",\"value\"]");
  REQUIRE(run_cli("eval --load " + model + " --data " + dir.file("series.csv"), dir).exit_code == 0);
}

TEST_CASE("a count's error states the range it accepts", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string train = "train --task charlm --context 8 --data " + dir.file("text.txt") + kTiny;
  // 0 is refused (it would train nothing), so the range starts at 1 at both ends of it.
  for (const char* flag : {"--steps", "--epochs"}) {
    for (const char* value : {"0", "1099511627777"}) {
      require_one_line_error(run_cli(train + " " + flag + " " + value, dir),
                             std::string(flag) + " must be in [1, 1099511627776], got " + value);
    }
  }
}

TEST_CASE("quantize says the f32 file held optimizer state only when it did", "[cli][reliability]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  REQUIRE(run_cli("train --task charlm --context 8 --steps 2 --data " + dir.file("text.txt") + kTiny +
                      " --save " + dir.file("trained.st"), dir).exit_code == 0);
  REQUIRE(run_cli("export --load " + dir.file("trained.st") + " --out " + dir.file("weights.st"), dir)
              .exit_code == 0);
  const CliResult from_checkpoint =
      run_cli("quantize --mode dynamic --load " + dir.file("trained.st") + " --out " + dir.file("q1.st"), dir);
  REQUIRE(from_checkpoint.exit_code == 0);
  CHECK_THAT(from_checkpoint.out, Catch::Contains("the f32 file also holds the optimizer state"));
  // An export holds the weights alone.
  const CliResult from_export =
      run_cli("quantize --mode dynamic --load " + dir.file("weights.st") + " --out " + dir.file("q2.st"), dir);
  INFO(from_export.out << from_export.err);
  REQUIRE(from_export.exit_code == 0);
  CHECK_THAT(from_export.out, Catch::Contains("file: " + dir.file("weights.st")));
  CHECK(from_export.out.find("optimizer") == std::string::npos);
}
