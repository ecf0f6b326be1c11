// `tapegrad train --attention / --position` end to end: each variant trains (its loss falls), its
// checkpoint reloads in eval, sample and plot attention, and bad flags are one line + exit code 2.
// Tests tagged [needs-mha-variants] need MultiHeadAttention's own handling of the variants
// (Linformer's proj_k / proj_v, Performer's projection_matrix in the state_dict).
#include <numeric>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTiny = " --dim 8 --heads 2 --batch 4 --threads 1 --dropout 0 --seed 5";

// The loss column of a training log (CSV: step,epoch,loss,...).
std::vector<double> losses_of(const std::string& log_path) {
  std::vector<double> losses;
  const std::vector<std::string> rows = lines_of(read_bytes(log_path));
  for (size_t i = 1; i < rows.size(); ++i) {
    std::stringstream row(rows[i]);
    std::string cell;
    for (int column = 0; column < 3; ++column) std::getline(row, cell, ',');
    losses.push_back(std::stod(cell));
  }
  return losses;
}

double mean(std::vector<double>::const_iterator first, std::vector<double>::const_iterator last) {
  return std::accumulate(first, last, 0.0) / static_cast<double>(last - first);
}

// Trains with `arguments` (the task, data and variant flags) and a log; the mean loss of the
// last quarter of the steps must be below that of the first quarter.
void require_loss_falls(const std::string& arguments, const TempDir& dir) {
  const std::string log = dir.file("loss.csv");
  const CliResult trained = run_cli("train " + arguments + " --log " + log + kTiny, dir);
  INFO("train " << arguments << "\nstderr: " << trained.err);
  REQUIRE(trained.exit_code == 0);
  const std::vector<double> losses = losses_of(log);
  REQUIRE(losses.size() >= 20);
  const auto quarter = static_cast<std::ptrdiff_t>(losses.size() / 4);
  const double first = mean(losses.begin(), losses.begin() + quarter);
  const double last = mean(losses.end() - quarter, losses.end());
  INFO("mean loss of the first " << quarter << " steps " << first << ", of the last " << last);
  REQUIRE(std::isfinite(last));
  REQUIRE(last < first);
}

std::string charlm(const TempDir& dir, const std::string& variant, int steps = 30) {
  return "--task charlm --context 16 --layers 1 --steps " + std::to_string(steps) + " --lr 1e-2 --data " +
         dir.file("text.txt") + " " + variant;
}

}  // namespace

TEST_CASE("charlm trains with each sparse layout and position kind", "[cli][attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  for (const char* variant : {"--attention local:4", "--attention band:3,2", "--attention bigbird:4,1,2",
                              "--position rope", "--position alibi", "--position none",
                              "--attention local:4 --position rope", "--attention bigbird:4,1,2 --position alibi"}) {
    SECTION(variant) { require_loss_falls(charlm(dir, variant), dir); }
  }
}

TEST_CASE("charlm trains with Performer", "[cli][attention][needs-mha-variants]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  require_loss_falls(charlm(dir, "--attention performer:16"), dir);
  require_loss_falls(charlm(dir, "--attention performer:16 --position rope"), dir);
}

TEST_CASE("Reformer trains the char LM and the text classifier, and its checkpoint reloads",
          "[cli][attention][reformer]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  // context 16, 4 buckets: chunks of 8, two per round
  require_loss_falls(charlm(dir, "--attention reformer:4,2"), dir);
  require_loss_falls(charlm(dir, "--attention reformer:4,1 --position rope"), dir);
  std::string tsv;  // two classes told apart by their words, of different lengths (padding)
  for (int i = 0; i < 24; ++i) {
    tsv += i % 2 ? "pets\tthe cat sat on a mat\n"
                 : "wild\ta grey wolf ran far into the dark woods\n";
  }
  write_bytes(dir.file("texts.tsv"), tsv);
  require_loss_falls("--task textcls --tokenizer word --layers 1 --max-len 16 --epochs 6 --lr 3e-2 "
                     "--attention reformer:4,2 --data " + dir.file("texts.tsv"), dir);

  const std::string lm = dir.file("lm.st");
  REQUIRE(run_cli("train " + charlm(dir, "--attention reformer:4,2", 4) + " --save " + lm + kTiny,
                  dir).exit_code == 0);
  const CliResult sampled =
      run_cli("sample --load " + lm + " --prompt 'the ' --tokens 5 --seed 1", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  const CliResult resumed = run_cli("train --resume " + lm + " --steps 6 --threads 1", dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  // plot attention draws the weights LSH attention implies (tests/cli/test_plot_attention.cpp).
  REQUIRE(run_cli("plot attention --load " + lm + " --text 'the' --out " + dir.file("a.png"), dir)
              .exit_code == 0);
}

TEST_CASE("Performer trains under --amp bf16 and fp16, causal and not", "[cli][attention][amp]") {
  // The projection matrix is an f32 buffer; under autocast q, k and v are half.
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("series.csv"), small_csv());
  for (const char* amp : {"bf16", "fp16"}) {
    SECTION(amp) {
      require_loss_falls(charlm(dir, std::string("--attention performer:16 --amp ") + amp), dir);
      require_loss_falls("--task timeseries --window 6 --horizon 2 --layers 1 --max-len 8 "
                         "--epochs 8 --lr 3e-2 --attention performer:8 --amp " + std::string(amp) +
                         " --data " + dir.file("series.csv"), dir);
    }
  }
}

TEST_CASE("timeseries trains with Linformer", "[cli][attention][needs-mha-variants]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  require_loss_falls("--task timeseries --window 6 --horizon 2 --layers 1 --max-len 8 --epochs 8 "
                     "--lr 3e-2 --attention linformer:4 --data " + dir.file("series.csv"), dir);
}

TEST_CASE("a variant's checkpoint reloads in eval, sample, plot and --resume", "[cli][attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string model = dir.file("lm.st");
  const CliResult trained = run_cli("train " + charlm(dir, "--attention local:4 --position rope", 6) +
                                    " --save " + model + kTiny, dir);
  INFO(trained.err);
  REQUIRE(trained.exit_code == 0);

  const CliResult evaluated = run_cli("eval --json --threads 1 --load " + model + " --data " + dir.file("text.txt"), dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  REQUIRE(std::isfinite(nlohmann::json::parse(evaluated.out).at("loss").get<double>()));

  const CliResult sampled = run_cli("sample --load " + model + " --prompt 'the ' --tokens 12 --seed 1", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  REQUIRE(lines_of(sampled.out)[0].size() == 16);

  // The layout panel comes after the heads' panels.
  const CliResult plotted = run_cli("plot attention --load " + model + " --text 'the quick' --out " + dir.file("attn.png"), dir);
  INFO(plotted.err);
  REQUIRE(plotted.exit_code == 0);
  REQUIRE(read_bytes(dir.file("attn.png")).substr(1, 3) == "PNG");

  // --resume keeps the variant; changing it is a conflict.
  const CliResult resumed = run_cli("train --resume " + model + " --steps 8 --threads 1", dir);
  INFO(resumed.err);
  REQUIRE(resumed.exit_code == 0);
  require_one_line_error(run_cli("train --resume " + model + " --steps 8 --attention full", dir),
                         "--attention \"full\" conflicts with the checkpoint's attention \"local:4\"");
}

TEST_CASE("a checkpoint from before the variants loads as full attention, sinusoidal", "[cli][attention]") {
  TempDir dir;
  // written before the config had "attention" and "position"
  const std::string old = std::string(TAPEGRAD_SOURCE_DIR) +
                          "/tests/fuzz/corpus/fuzz_checkpoint/checkpoint-charlm.safetensors";
  REQUIRE(read_bytes(old).find("\"attention\"") == std::string::npos);
  const CliResult sampled = run_cli("sample --load '" + old + "' --prompt 'ab' --tokens 4 --seed 1", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  const CliResult plotted = run_cli("plot attention --load '" + old + "' --text 'ab' --out " + dir.file("a.png"), dir);
  INFO(plotted.err);
  REQUIRE(plotted.exit_code == 0);
  // and it resumes, continuing as full attention: asking for another is a conflict
  write_bytes(dir.file("lm.txt"), small_text());
  require_one_line_error(run_cli("train --resume '" + old + "' --data " + dir.file("lm.txt") +
                                 " --steps 2 --position rope", dir),
                         "conflicts with the checkpoint's position \"sinusoidal\"");
}

TEST_CASE("Linformer and Performer checkpoints reload; plot attention draws their implied weights",
          "[cli][attention][needs-mha-variants]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string lm = dir.file("lm.st"), ts = dir.file("ts.st");
  REQUIRE(run_cli("train " + charlm(dir, "--attention performer:8", 4) + " --save " + lm + kTiny, dir).exit_code == 0);
  const CliResult sampled = run_cli("sample --load " + lm + " --prompt 'the ' --tokens 5 --seed 1", dir);
  INFO(sampled.err);
  REQUIRE(sampled.exit_code == 0);
  // Performer forms no [S, S] weights: the plot draws those its features imply
  // (tests/cli/test_plot_attention.cpp).
  REQUIRE(run_cli("plot attention --load " + lm + " --text 'the' --out " + dir.file("a.png"), dir)
              .exit_code == 0);

  REQUIRE(run_cli("train --task timeseries --window 6 --horizon 2 --max-len 8 --steps 4 --attention linformer:4 "
                  "--data " + dir.file("series.csv") + " --save " + ts + kTiny, dir).exit_code == 0);
  const CliResult evaluated = run_cli("eval --json --load " + ts + " --data " + dir.file("series.csv"), dir);
  INFO(evaluated.err);
  REQUIRE(evaluated.exit_code == 0);
  REQUIRE(nlohmann::json::parse(evaluated.out).at("examples") == 33);
}

TEST_CASE("bad --attention and --position: exit code 2 and one line", "[cli][attention]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  // kTiny without --dim and --heads, which one case sets
  const std::string base = "train --task charlm --context 8 --steps 1 --batch 4 --threads 1 --data " + dir.file("text.txt");
  const std::pair<const char*, const char*> cases[] = {
      {"--attention sparse", "--attention must be full, local:W"},
      {"--attention local", "--attention local: local needs its numbers"},
      {"--attention local:", "is not an integer"},
      {"--attention local:3x", "'3x' is not an integer"},
      {"--attention local:0", "the window W must be in [1, 1048576], got 0"},
      {"--attention local:-2", "the window W"},
      {"--attention band:4,2,2", "expected 1 to 2 comma-separated numbers"},
      {"--attention bigbird:4", "expected 3 comma-separated numbers"},
      {"--attention performer:99999999999999999999", "out of range"},
      {"--attention linformer:8", "cannot train a charlm"},
      {"--attention performer:8 --position alibi", "--position alibi needs the fused kernel"},
      {"--attention performer:8 --dropout 0.1", "--attention performer cannot train with --dropout 0.1"},
      {"--attention reformer:7,2", "the buckets B must be even"},
      {"--attention reformer:8", "expected 2 comma-separated numbers"},
      {"--attention reformer:8,2 --position alibi", "--position alibi needs the fused kernel"},
      {"--position learned", "--position must be sinusoidal, rope, alibi, none, t5"},
      {"--position rope --dim 12 --heads 4", "needs an even head dim"},
  };
  for (const auto& [flags, expected] : cases) {
    INFO(flags);
    require_one_line_error(run_cli(base + " " + flags, dir), expected);
  }
}

TEST_CASE("bench attn-scaling: one row per layout and length", "[bench][attention]") {
  TempDir dir;
  const CliResult result = run_cli("bench --workload attn-scaling --max-seq 128 --steps 1 --warmup 0 --threads 1 --json", dir);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const std::vector<std::string> rows = lines_of(result.out);
  REQUIRE(rows.size() == 3);  // full, local:256 and reformer:32,2 at S = 128 (the cap, below 1024)
  const char* layouts[] = {"full", "local:256", "reformer:32,2"};
  for (size_t i = 0; i < rows.size(); ++i) {
    const nlohmann::json row = nlohmann::json::parse(rows[i]);
    REQUIRE(row.at("layout") == layouts[i]);
    REQUIRE(row.at("seq") == 128);
    REQUIRE(row.at("ms").get<double>() > 0);
    // at least q, k, v and the output gradient, 4 x [1, 4, 128, 32] f32
    REQUIRE(row.at("peak_bytes").get<int64_t>() >= 4 * 4 * 128 * 32 * 4);
  }
  const CliResult table = run_cli("bench --workload attn-scaling --max-seq 64 --steps 1 --threads 1", dir);
  REQUIRE(table.exit_code == 0);
  REQUIRE_THAT(table.out, Catch::Contains("local:256") && Catch::Contains("reformer:32,2") &&
                              Catch::Contains("peak bytes"));
  require_one_line_error(run_cli("bench --workload attn-scaling --max-seq 0", dir), "--max-seq must be in [1, 16384]");
  require_one_line_error(run_cli("bench --workload textcls-small --max-seq 64", dir),
                         "--max-seq does not apply to --workload textcls-small");
}
