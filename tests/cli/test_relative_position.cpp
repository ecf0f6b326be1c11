// `tapegrad train --position t5 / shaw` end to end: each trains the char LM (causal buckets), the
// text classifier and the forecaster (bidirectional), the tables are saved under their
// PyTorch-style names and reload in eval, sample, plot and --resume; bad values are one line and
// exit code 2. And the line `train` prints when a sparse layout covers every pair of positions.
#include <numeric>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kRelposTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0 --seed 5";

// Trains with `arguments` and a log; the mean loss of the last quarter of the steps must be below
// that of the first quarter. Returns the run's stderr.
std::string relpos_loss_falls(const std::string& arguments, const TempDir& dir) {
  const std::string log = dir.file("loss.csv");
  const CliResult trained = run_cli("train " + arguments + " --log " + log + kRelposTiny, dir);
  INFO("train " << arguments << "\nstderr: " << trained.err);
  REQUIRE(trained.exit_code == 0);
  const std::vector<double> losses = logged_losses(log);
  REQUIRE(losses.size() >= 20);
  const auto quarter = static_cast<std::ptrdiff_t>(losses.size() / 4);
  const double first = std::accumulate(losses.begin(), losses.begin() + quarter, 0.0);
  const double last = std::accumulate(losses.end() - quarter, losses.end(), 0.0);
  INFO("loss of the first " << quarter << " steps " << first / quarter << ", of the last "
                            << last / quarter);
  REQUIRE(std::isfinite(last));
  REQUIRE(last < first);
  return trained.err;
}

std::string relpos_charlm(const TempDir& dir, const std::string& variant, int steps = 30) {
  return "--task charlm --context 16 --layers 1 --steps " + std::to_string(steps) +
         " --lr 1e-2 --data " + dir.file("text.txt") + " " + variant;
}

// Two classes told apart by their words, of different lengths (padding).
std::string relpos_texts() {
  std::string tsv;
  for (int i = 0; i < 24; ++i) {
    tsv += i % 2 ? "pets\tthe cat sat on a mat\n"
                 : "wild\ta grey wolf ran far into the dark woods\n";
  }
  return tsv;
}

}  // namespace

TEST_CASE("t5 and shaw train the char LM, the text classifier and the forecaster",
          "[cli][attention][relative-position]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("texts.tsv"), relpos_texts());
  write_bytes(dir.file("series.csv"), small_csv());
  for (const char* variant : {"--position t5", "--position t5:8,16", "--position shaw",
                              "--position shaw:3", "--attention local:4 --position t5",
                              "--attention bigbird:4,1,2 --position shaw:2",
                              "--position t5 --amp fp16", "--position shaw:3 --amp bf16"}) {
    SECTION(variant) { relpos_loss_falls(relpos_charlm(dir, variant), dir); }
  }
  SECTION("textcls") {
    for (const char* position : {"t5:8,16", "shaw:4"}) {
      relpos_loss_falls("--task textcls --tokenizer word --layers 1 --max-len 16 --epochs 6 "
                        "--lr 3e-2 --position " + std::string(position) + " --data " +
                        dir.file("texts.tsv"), dir);
    }
  }
  SECTION("timeseries") {
    relpos_loss_falls("--task timeseries --window 6 --horizon 2 --layers 1 --max-len 8 --epochs 8 "
                      "--lr 3e-2 --position t5:4,4 --data " + dir.file("series.csv"), dir);
  }
}

TEST_CASE("a t5 or shaw checkpoint holds its table under a PyTorch-style name and reloads",
          "[cli][attention][relative-position]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  for (const auto& [position, table] :
       {std::pair<std::string, std::string>{"t5", "layers.0.attn.relative_attention_bias.weight"},
        {"shaw:4", "layers.0.attn.relative_key.weight"}}) {
    INFO(position);
    const std::string model = dir.file("lm-" + position.substr(0, 2) + ".st");
    const CliResult trained = run_cli("train " + relpos_charlm(dir, "--position " + position, 6) +
                                      " --save " + model + kRelposTiny, dir);
    INFO(trained.err);
    REQUIRE(trained.exit_code == 0);
    const std::string bytes = read_bytes(model);
    REQUIRE(bytes.find("\"" + table + "\"") != std::string::npos);
    REQUIRE(bytes.find(position == "t5" ? "t5:32,128" : "shaw:4") != std::string::npos);

    const CliResult evaluated = run_cli("eval --json --threads 1 --load " + model + " --data " +
                                        dir.file("text.txt"), dir);
    INFO(evaluated.err);
    REQUIRE(evaluated.exit_code == 0);
    REQUIRE(std::isfinite(nlohmann::json::parse(evaluated.out).at("loss").get<double>()));
    const CliResult sampled =
        run_cli("sample --load " + model + " --prompt 'the ' --tokens 6 --seed 1", dir);
    INFO(sampled.err);
    REQUIRE(sampled.exit_code == 0);
    const CliResult plotted = run_cli("plot attention --load " + model +
                                      " --text 'the quick' --out " + dir.file("attn.png"), dir);
    INFO(plotted.err);
    REQUIRE(plotted.exit_code == 0);
    const CliResult resumed = run_cli("train --resume " + model + " --steps 8 --threads 1", dir);
    INFO(resumed.err);
    REQUIRE(resumed.exit_code == 0);
    require_one_line_error(run_cli("train --resume " + model + " --steps 9 --position rope", dir),
                           "conflicts with the checkpoint's position");
  }
}

TEST_CASE("bad --position t5 / shaw: exit code 2 and one line",
          "[cli][attention][relative-position]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string base =
      "train --task charlm --context 8 --steps 1 --batch 4 --threads 1 --data " +
      dir.file("text.txt");
  const std::pair<const char*, const char*> cases[] = {
      {"--position t5:3", "the buckets B must be in [4, 1024], got 3"},
      {"--position t5:64,32", "the max distance D 32 must be at least the buckets B 64"},
      {"--position shaw:0", "the clipping distance K must be in [1"},
      {"--position shaw:x", "is not an integer"},
      {"--position none:2", "none takes no numbers"},
      {"--attention performer:8 --position t5", "--position t5:32,128 adds to the [S, S] scores"},
      {"--attention reformer:4,1 --position shaw", "T5 and Shaw work with full"},
  };
  for (const auto& [flags, expected] : cases) {
    INFO(flags);
    require_one_line_error(run_cli(base + " " + flags, dir), expected);
  }
}

TEST_CASE("train says when a sparse layout covers every pair of positions", "[cli][attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("texts.tsv"), relpos_texts());
  const auto notice_of = [&](const std::string& arguments) {
    const CliResult trained = run_cli("train " + arguments + kRelposTiny, dir);
    INFO("train " << arguments << "\nstderr: " << trained.err);
    REQUIRE(trained.exit_code == 0);
    std::string notice;
    for (const std::string& line : lines_of(trained.err)) {
      if (line.rfind("attention: ", 0) == 0) {
        REQUIRE(notice.empty());  // one line
        notice = line;
      }
    }
    return notice;
  };
  REQUIRE(notice_of(relpos_charlm(dir, "--attention local:16", 2)) ==
          "attention: --attention local:16 covers every (query, key) pair at --context 16: it "
          "equals full attention there");
  REQUIRE(notice_of(relpos_charlm(dir, "--attention bigbird:2,1,0", 2)) ==
          "attention: --attention bigbird:2,1,0 covers every (query, key) pair at --context 16: it "
          "equals full attention there");
  REQUIRE(notice_of(relpos_charlm(dir, "--attention local:15", 2)).empty());
  REQUIRE(notice_of(relpos_charlm(dir, "--attention band:16,2", 2)).empty());
  REQUIRE(notice_of(relpos_charlm(dir, "", 2)).empty());  // full attention says nothing
  // textcls: the longest text, 9 words
  REQUIRE(notice_of("--task textcls --tokenizer word --layers 1 --max-len 16 --steps 2 "
                    "--attention local:9 --data " + dir.file("texts.tsv")) ==
          "attention: --attention local:9 covers every (query, key) pair at the longest text (9 "
          "tokens): it equals full attention there");
  REQUIRE(notice_of("--task textcls --tokenizer word --layers 1 --max-len 16 --steps 2 "
                    "--attention local:8 --data " + dir.file("texts.tsv")).empty());
}
