// `tapegrad sample` with the KV cache against --no-cache (the whole context recomputed for every
// character): the same text, greedy and seeded, past the window's restarts, for trained
// checkpoints of several attention and position kinds, an int8 one among them; the one-line
// notice of a kind that cannot use the cache; greedy as --temperature 0.
#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTinyLM = " --dim 8 --heads 2 --layers 2 --batch 4 --threads 1 --dropout 0 "
                            "--seed 5 --steps 6 --lr 1e-2 --task charlm --context 12";

// Trains a char LM with `variant` flags into `path`.
void train_lm(const TempDir& dir, const std::string& variant, const std::string& path) {
  const CliResult trained = run_cli("train --data " + dir.file("text.txt") + kTinyLM + " " + variant +
                                    " --save " + path, dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);
}

// `sample` of `path` with `flags` and with `flags --no-cache`: both succeed, the same text.
std::string sample_both_ways(const TempDir& dir, const std::string& path, const std::string& flags) {
  const std::string command = "sample --threads 1 --load " + path + " --prompt 'the ' " + flags;
  const CliResult cached = run_cli(command, dir);
  const CliResult uncached = run_cli(command + " --no-cache", dir);
  INFO(command << "\n" << cached.err << uncached.err);
  REQUIRE(cached.exit_code == 0);
  REQUIRE(uncached.exit_code == 0);
  REQUIRE(cached.out == uncached.out);
  return cached.out;
}

}  // namespace

TEST_CASE("cli sample: the KV cache gives the text of --no-cache, greedy and seeded", "[cli][sample]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  for (const std::string variant : {"", "--position rope", "--position alibi --attention local:3",
                                    "--position t5:8,16", "--attention performer:8"}) {
    INFO(variant);
    const std::string path = dir.file("lm.st");
    train_lm(dir, variant, path);
    // 40 characters through a 12-position window: the context restarts several times
    const std::string greedy = sample_both_ways(dir, path, "--tokens 40 --temperature 0");
    REQUIRE(lines_of(greedy).at(0).size() == 4 + 40);
    sample_both_ways(dir, path, "--tokens 40 --seed 7 --top-k 5");
  }
}

TEST_CASE("cli sample: a prompt longer than the window keeps its last window, cached or not", "[cli][sample]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  train_lm(dir, "--position rope", dir.file("lm.st"));
  // 31 prompt characters through a window of 12: the model sees the last 12
  const std::string prompt = "the cat sat on the mat and then";
  const std::string command = "sample --threads 1 --load " + dir.file("lm.st") + " --tokens 20 "
                              "--temperature 0 --prompt ";
  const CliResult whole = run_cli(command + "'" + prompt + "'", dir);
  const CliResult tail = run_cli(command + "'" + prompt.substr(prompt.size() - 12) + "'", dir);
  const CliResult uncached = run_cli(command + "'" + prompt + "' --no-cache", dir);
  INFO(whole.err << tail.err << uncached.err);
  REQUIRE(whole.exit_code == 0);
  REQUIRE(whole.out == uncached.out);
  // the same 20 characters after the prompt as from its last 12 alone
  REQUIRE(whole.out.substr(prompt.size()) == tail.out.substr(12));
}

TEST_CASE("cli sample: an int8 checkpoint decodes through the cache too", "[cli][sample]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  train_lm(dir, "", dir.file("f32.st"));
  const CliResult quantized = run_cli("quantize --load " + dir.file("f32.st") +
                                      " --mode dynamic --out " + dir.file("int8.st"), dir);
  INFO(quantized.err);
  REQUIRE(quantized.exit_code == 0);
  sample_both_ways(dir, dir.file("int8.st"), "--tokens 30 --temperature 0");
}

TEST_CASE("cli sample: reformer says it cannot use the cache, in one line, and samples", "[cli][sample]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  train_lm(dir, "--attention reformer:4,1", dir.file("lm.st"));
  const CliResult sampled = run_cli("sample --threads 1 --load " + dir.file("lm.st") +
                                    " --prompt 'the ' --tokens 8 --temperature 0", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  REQUIRE(lines_of(sampled.err).size() == 1);
  REQUIRE_THAT(sampled.err, Catch::Contains("no KV cache: reformer's hash buckets"));
  // --no-cache asks for what it does anyway: no notice
  const CliResult uncached = run_cli("sample --threads 1 --load " + dir.file("lm.st") +
                                     " --prompt 'the ' --tokens 8 --temperature 0 --no-cache", dir);
  REQUIRE(uncached.err.empty());
  REQUIRE(uncached.out == sampled.out);
}
