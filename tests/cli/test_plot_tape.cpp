// `tapegrad plot tape` end to end: the tutorial's models (textcls --layers 0, timeseries --layers
// 1, charlm --layers 2) drawn as PNG and HTML, with and without --data; its files checked like
// every command's (no output over an input, a bad --out refused before the work, a failed write
// leaves the old file as it was).
#include <algorithm>
#include <filesystem>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTapeTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --seed 2 --steps 2";

// Trains `arguments` for two steps into dir/<name>; its path.
std::string tape_checkpoint(const TempDir& dir, const std::string& name,
                            const std::string& arguments) {
  const CliResult trained =
      run_cli("train " + arguments + kTapeTiny + " --save " + dir.file(name), dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);
  return dir.file(name);
}

std::string tape_tsv() {
  std::string tsv;
  const char* texts[] = {"the cat sat", "a dog ran far", "cats and dogs", "the bird flew"};
  for (int i = 0; i < 16; ++i)
    tsv += std::string(i % 2 ? "pets" : "wild") + "\t" + texts[i % 4] + "\n";
  return tsv;
}

// How many times `part` occurs in `text`.
size_t tape_cli_count(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// The names in a directory (to see that no temporary is left behind).
std::vector<std::string> tape_dir_names(const TempDir& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(".std")) names.push_back(name);  // run_cli's .stdout and .stderr
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("plot tape draws a charlm's two layers as PNG and HTML", "[cli][plot][tape]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string lm = tape_checkpoint(
      dir, "lm.st", "--task charlm --context 8 --layers 2 --data " + dir.file("text.txt"));

  const CliResult png =
      run_cli("plot tape --threads 1 --load " + lm + " --out " + dir.file("t.png"), dir);
  INFO(png.err);
  REQUIRE(png.exit_code == 0);
  REQUIRE_THAT(png.out, Catch::StartsWith("wrote " + dir.file("t.png") + ": ") &&
                            Catch::EndsWith(" saved for backward\n"));
  REQUIRE(read_bytes(dir.file("t.png")).substr(1, 3) == "PNG");

  const CliResult html =
      run_cli("plot tape --threads 1 --load " + lm + " --data " + dir.file("text.txt") +
                  " --batch 2 --out " + dir.file("t.html"),
              dir);
  INFO(html.err);
  REQUIRE(html.exit_code == 0);
  const std::string page = read_bytes(dir.file("t.html"));
  REQUIRE_THAT(page, Catch::StartsWith("<!DOCTYPE html>"));
  REQUIRE_THAT(page, Catch::Contains("one training step on the first 2 examples of"));
  REQUIRE(tape_cli_count(page, "<svg class=\"tape\"") == 4);  // folded, each layer, all open
  REQUIRE_THAT(page, Catch::Contains(">layers.1</tspan>") && Catch::Contains("[2, 8] i64"));
}

TEST_CASE("plot tape draws the tutorial's textcls and timeseries models", "[cli][plot][tape]") {
  TempDir dir;
  write_bytes(dir.file("texts.tsv"), tape_tsv());
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string cls = tape_checkpoint(
      dir, "cls.st", "--task textcls --tokenizer word --layers 0 --data " + dir.file("texts.tsv"));
  const std::string series = tape_checkpoint(
      dir, "ts.st", "--task timeseries --window 6 --layers 1 --data " + dir.file("series.csv"));
  for (const std::string& model : {cls, series}) {
    for (const std::string out : {"m.png", "m.html"}) {
      const CliResult plotted =
          run_cli("plot tape --load " + model + " --out " + dir.file(out), dir);
      INFO(model << " " << out << ": " << plotted.err);
      REQUIRE(plotted.exit_code == 0);
    }
    // No layers.<k> parameters: the page has one view, nothing to expand.
    const std::string page = read_bytes(dir.file("m.html"));
    REQUIRE(tape_cli_count(page, "<svg class=\"tape\"") == 1);
    REQUIRE_THAT(page,
                 Catch::Contains("mha.q_proj.weight") && Catch::Contains("made-up batch of 4"));
  }
}

TEST_CASE("plot tape: --out must be .png or .html, no input; an int8 model is refused",
          "[cli][plot][tape][paths]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string lm = tape_checkpoint(
      dir, "lm.st", "--task charlm --context 8 --layers 1 --data " + dir.file("text.txt"));
  const std::string trained = read_bytes(lm);
  require_one_line_error(run_cli("plot tape --load " + lm + " --out " + dir.file("t.svg"), dir),
                         "--out '" + dir.file("t.svg") + "': the name must end in .png or .html");
  REQUIRE_FALSE(std::filesystem::exists(dir.file("t.svg")));
  require_one_line_error(run_cli("plot tape --load " + lm + " --out " + lm, dir),
                         "the name must end in .png or .html");
  // An input under the output's name, through a link, is refused before anything is read.
  REQUIRE(::symlink(lm.c_str(), dir.file("lm.html").c_str()) == 0);
  require_one_line_error(run_cli("plot tape --load " + lm + " --out " + dir.file("lm.html"), dir),
                         "--out: '" + dir.file("lm.html") + "' is the --load file");
  REQUIRE(::symlink(dir.file("text.txt").c_str(), dir.file("text.png").c_str()) == 0);
  require_one_line_error(run_cli("plot tape --load " + lm + " --data " + dir.file("text.txt") +
                                     " --out " + dir.file("text.png"),
                                 dir),
                         "is the --data file");
  REQUIRE(read_bytes(lm) == trained);
  REQUIRE(read_bytes(dir.file("text.txt")) == small_text());
  // An int8 checkpoint has no training step.
  REQUIRE(run_cli("quantize --load " + lm + " --mode dynamic --out " + dir.file("q.st"), dir)
              .exit_code == 0);
  require_one_line_error(
      run_cli("plot tape --load " + dir.file("q.st") + " --out " + dir.file("q.png"), dir),
      "is int8-quantized (dynamic), inference only: it has no training step to draw");
  REQUIRE_FALSE(std::filesystem::exists(dir.file("q.png")));
}

TEST_CASE("plot tape: a write that fails leaves the old file whole",
          "[cli][plot][tape][reliability]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string lm = tape_checkpoint(
      dir, "lm.st", "--task charlm --context 8 --layers 1 --data " + dir.file("text.txt"));
  write_bytes(dir.file("t.html"), "the old page");
  const std::vector<std::string> before = tape_dir_names(dir);
  // Files of at most 1 KiB (tapegrad ignores SIGXFSZ: the write fails with EFBIG): the page does
  // not fit.
  const CliResult failed = run_cli("plot tape --load " + lm + " --out " + dir.file("t.html"), dir,
                                   "ulimit -f 1;");
  INFO(failed.err);
  REQUIRE(failed.exit_code == 2);
  REQUIRE_THAT(failed.err, Catch::Contains("File too large"));
  REQUIRE(read_bytes(dir.file("t.html")) == "the old page");
  REQUIRE(tape_dir_names(dir) == before);
}
