// Writes that fail under every command: standard output that is full or closed, a file-size limit
// (`ulimit -f`) reached by an output file, and a closed standard error. Each is one line on
// stderr and exit code 2 (never a silent exit 0, never a death by SIGXFSZ), and no temporary stays.
#include <algorithm>
#include <filesystem>

#include "tests/cli/cli_support.h"
#include "tests/support/run_command.h"

using namespace tg::testing;

// In a namespace of its own, test cases included: the tests are compiled a few files together.
namespace output_failures {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 3";

// A charlm and a textcls checkpoint (and their data) in `dir`.
void train_small_models(const TempDir& dir) {
  write_bytes(dir.file("text.txt"), small_text());
  std::string tsv;
  for (int i = 0; i < 20; ++i) tsv += std::string(i % 2 ? "pos" : "neg") + "\tsome words number " + std::to_string(i) + "\n";
  write_bytes(dir.file("labels.tsv"), tsv);
  const CliResult lm = run_cli("train --task charlm --context 8 --steps 2 --data " + dir.file("text.txt") +
                                   kTiny + " --save " + dir.file("lm.st"), dir);
  REQUIRE(lm.exit_code == 0);
  const CliResult cls = run_cli("train --task textcls --steps 2 --data " + dir.file("labels.tsv") + kTiny +
                                    " --save " + dir.file("cls.st"), dir);
  INFO(cls.err);
  REQUIRE(cls.exit_code == 0);
}

// Runs `tapegrad <arguments>` with standard output redirected by `stdout_redirect` ("> /dev/full",
// ">&-"): its exit code and the stderr lines.
std::pair<int, std::vector<std::string>> run_with_stdout(const std::string& arguments,
                                                         const std::string& stdout_redirect) {
  const auto [err, code] = run_command("'" + std::string(TAPEGRAD_BIN) + "' " + arguments +
                                       " 2>&1 " + stdout_redirect + " < /dev/null");
  return {code, lines_of(err)};
}

// Runs `tapegrad <arguments>` in `dir` under a file-size limit of 2 KiB (`ulimit -f 4`, in
// 512-byte blocks), SIGXFSZ at its default action (killing) as a user's shell leaves it: its exit
// code and the stderr lines (stderr is a pipe, which the limit does not touch).
std::pair<int, std::vector<std::string>> run_under_file_size_limit(const std::string& arguments,
                                                                   const TempDir& dir) {
  const auto [err, code] = run_command("cd '" + dir.path.string() + "' && ulimit -f 4 && exec '" +
                                       std::string(TAPEGRAD_BIN) + "' " + arguments +
                                       " 2>&1 > /dev/null < /dev/null");
  return {code, lines_of(err)};
}

std::vector<std::string> names_in(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}


TEST_CASE("a full or closed standard output is an error on every command", "[cli][reliability][stdout]") {
  TempDir dir;
  train_small_models(dir);
  const std::string lm = dir.file("lm.st"), cls = dir.file("cls.st"), text = dir.file("text.txt");
  const std::vector<std::string> commands = {
      "info",
      "gradcheck",
      "eval --json --threads 1 --load " + lm + " --data " + text,
      "analyze heads --threads 1 --load " + lm + " --data " + text,
      "sample --load " + cls + " --prompt 'some words'",
      "train --json --task charlm --context 8 --steps 2 --data " + text + kTiny,
      "bench --json --workload textcls-small --steps 1 --warmup 0 --threads 1",
  };
  for (const auto& [redirect, reason] : {std::pair{"> /dev/full", "No space left on device"},
                                         std::pair{">&-", "Bad file descriptor"}}) {
    for (const std::string& command : commands) {
      const auto [code, err] = run_with_stdout(command, redirect);
      const std::string name = command.substr(0, command.find(' '));
      INFO(command << " " << redirect);
      for (const std::string& line : err) INFO(line);
      CHECK(code == 2);
      REQUIRE_FALSE(err.empty());
      CHECK(err.back() == "tapegrad " + name + ": error: writing standard output: " + reason);
      // train's progress lines come before; every other command says only this.
      if (name != "train") CHECK(err.size() == 1);
    }
  }
  // The same commands with a standard output that takes the bytes succeed.
  const auto [code, err] = run_with_stdout("info", "> /dev/null");
  CHECK(code == 0);
  CHECK(err.empty());
}

TEST_CASE("an output past the file-size limit is one line and exit 2, not death by SIGXFSZ",
          "[cli][reliability][file-size]") {
  TempDir dir;
  train_small_models(dir);
  write_bytes(dir.file("loss.csv"), "step,epoch,loss,lr,ms\n1,0,2.5,0.1,5\n2,0,2.0,0.1,5\n");
  const std::vector<std::string> before = names_in(dir);
  const std::string train = "train --task charlm --context 8 --data " + dir.file("text.txt") + kTiny;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {train + " --steps 2 --save " + dir.file("saved.st"), "saved.st"},
      {"export --load " + dir.file("lm.st") + " --out " + dir.file("exported.st"), "exported.st"},
      {"plot loss --log " + dir.file("loss.csv") + " --out " + dir.file("loss.png"), "loss.png"},
      {"plot pe --dim 16 --len 16 --out " + dir.file("pe.png"), "pe.png"},
  };
  for (const auto& [command, output] : cases) {
    const auto [code, err] = run_under_file_size_limit(command, dir);
    INFO(command);
    for (const std::string& line : err) INFO(line);
    CHECK(code == 2);
    REQUIRE_FALSE(err.empty());
    CHECK_THAT(err.back(), Catch::Contains(output) && Catch::Contains("File too large"));
    if (command.rfind("train", 0) != 0) CHECK(err.size() == 1);
    // Neither the output nor a temporary for it is left.
    CHECK(names_in(dir) == before);
  }
  // A log is written as the run goes: it stops at the limit, and the run with it.
  const auto [code, err] = run_under_file_size_limit(train + " --steps 80 --log " + dir.file("run.csv"), dir);
  CHECK(code == 2);
  REQUIRE_FALSE(err.empty());
  CHECK_THAT(err.back(), Catch::Contains("--log") && Catch::Contains("run.csv") &&
                             Catch::Contains("File too large"));
}

TEST_CASE("a closed standard error does not send progress lines into the --log file",
          "[cli][reliability][stderr]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string log = dir.file("run.csv");
  const auto [out, code] = run_command("'" + std::string(TAPEGRAD_BIN) + "' train --task charlm --context 8 " +
                                       "--steps 30 --data " + dir.file("text.txt") + kTiny + " --log " + log +
                                       " 2>&- < /dev/null");
  CHECK(code == 0);
  CHECK_THAT(out, Catch::Contains("trained 30 steps"));
  // The header and one row a step, each with the header's columns: nothing else.
  const std::vector<std::string> lines = lines_of(read_bytes(log));
  REQUIRE(lines.size() == 31);
  REQUIRE(lines[0].rfind("step,epoch,loss,", 0) == 0);
  const auto commas = [](const std::string& line) { return std::count(line.begin(), line.end(), ','); };
  for (size_t i = 1; i < lines.size(); ++i) {
    INFO(lines[i]);
    CHECK(lines[i].rfind(std::to_string(i) + ",", 0) == 0);
    CHECK(commas(lines[i]) == commas(lines[0]));
  }
}

}  // namespace output_failures
