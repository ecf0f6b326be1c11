// Gradient health judged (train/grad_health.h): the judge on hand-made norm sequences (exploding
// by a jump, by the level and by inf/NaN; vanishing; zero; a key bias zero by construction; the
// summary), and `tapegrad train` printing the findings (docs/cli.md's textcls recipe at --lr 100
// warns before it diverges; a healthy run without --grad-stats says nothing).
#include <cmath>
#include <limits>

#include "tapegrad/train/grad_health.h"
#include "tests/cli/cli_support.h"

using namespace tg::testing;
using tg::train::GradFinding;
using tg::train::GradHealthJudge;
using tg::train::GradIssue;
using tg::train::ParameterNorms;

namespace {

using Names = std::vector<std::string>;

// A gradient's norms on a record: ||grad|| and ||weight||.
ParameterNorms norms_of(const std::string& name, double grad, double weight = 1.0) {
  return {.name = name, .has_grad = true, .grad_norm = grad, .weight_norm = weight};
}

// The index of the first line of `lines` that contains `text`, or -1.
int health_line_index(const std::vector<std::string>& lines, const std::string& text) {
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(text) != std::string::npos) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

TEST_CASE("grad health: a jump past 100x the previous step's global norm is exploding, found once",
          "[grad_health]") {
  GradHealthJudge judge;
  int measured = 0;  // the parameters are measured only for a finding
  const auto norms_now = [&] {
    ++measured;
    return std::vector<ParameterNorms>{norms_of("a", 30), norms_of("b", 120), norms_of("c", 1),
                                       {.name = "d"}, norms_of("e", 50)};
  };
  CHECK_FALSE(judge.observe_global_norm(1, 1.0, norms_now));
  CHECK_FALSE(judge.observe_global_norm(2, 100.0, norms_now));  // 100x exactly: not past it
  CHECK_FALSE(judge.observe_global_norm(3, 0.5, norms_now));
  const std::optional<GradFinding> found = judge.observe_global_norm(4, 50.5, norms_now);  // 101x
  REQUIRE(found);
  CHECK(measured == 1);
  CHECK(found->issue == GradIssue::exploding);
  CHECK(found->step == 4);
  CHECK(found->parameters == Names{"b", "e", "a"});  // the three largest, largest first
  CHECK(found->line() ==
        "tapegrad train: warning: exploding gradients at step 4: the global gradient norm jumped "
        "to 50.5, 101 times step 3's 0.5 (the limit: 100 times); the largest gradients: b 120, "
        "e 50, a 30");
  // A run that exploded says so once.
  CHECK_FALSE(judge.observe_global_norm(5, 1e9, norms_now));
  CHECK(measured == 1);
  CHECK(judge.findings().size() == 1);
}

TEST_CASE("grad health: a global norm past 1000x the first step's is exploding", "[grad_health]") {
  GradHealthJudge judge;
  // x10 a step: never a jump past 100x, but 10000x the first step's by step 5. A step with a zero
  // norm is no baseline.
  CHECK_FALSE(judge.observe_global_norm(1, 0.0, nullptr));
  for (const auto& [step, norm] : {std::pair{2, 1.0}, {3, 10.0}, {4, 100.0}, {5, 1000.0}}) {
    CHECK_FALSE(judge.observe_global_norm(step, norm, nullptr));  // 1000x exactly: not past it
  }
  const std::optional<GradFinding> found = judge.observe_global_norm(6, 1e4, nullptr);
  REQUIRE(found);
  CHECK(found->text == "exploding gradients at step 6: the global gradient norm rose to 1e+04, "
                       "1e+04 times the first step's 1 (the limit: 1e+03 times)");
  CHECK(found->parameters.empty());  // nothing measured to name

  // The norms of healthy runs (docs/cli.md's textcls, measured: 0.751 at step 1, 0.438 to 1.88
  // later, at most 3.8x between steps) make no finding.
  GradHealthJudge healthy;
  int step = 0;
  for (const double norm : {0.751, 0.9, 1.88, 0.5, 0.438, 1.6, 0.7, 1.2}) {
    CHECK_FALSE(healthy.observe_global_norm(++step, norm, nullptr));
  }
  CHECK(healthy.summary().empty());
}

TEST_CASE("grad health: an inf or NaN global norm is exploding, naming the broken gradients",
          "[grad_health]") {
  GradHealthJudge judge;
  const double nan = std::nan(""), inf = std::numeric_limits<double>::infinity();
  const auto norms_now = [&] {
    return std::vector<ParameterNorms>{norms_of("a", nan), norms_of("c", 5), norms_of("b", inf),
                                       norms_of("d", 7)};
  };
  CHECK_FALSE(judge.observe_global_norm(1, 2.0, norms_now));
  const std::optional<GradFinding> found = judge.observe_global_norm(2, nan, norms_now);
  REQUIRE(found);
  CHECK(found->text == "exploding gradients at step 2: the global gradient norm is NaN (a "
                       "gradient holds inf or NaN); inf or NaN gradients in 2 of 4 parameters: "
                       "a, b; the largest finite gradients: d 7, c 5");
  CHECK(found->parameters == Names{"a", "b", "d", "c"});
  // From the first step on: there is no previous norm to compare with.
  GradHealthJudge first;
  REQUIRE(first.observe_global_norm(1, inf, nullptr));
  CHECK(first.findings()[0].text ==
        "exploding gradients at step 1: the global gradient norm is inf (a gradient holds inf or "
        "NaN)");
}

TEST_CASE("grad health: vanishing over 50 steps, zero, missing, and a key bias by construction",
          "[grad_health]") {
  GradHealthJudge judge;
  std::vector<std::vector<GradFinding>> found_at;  // the findings of each record
  const std::vector<int64_t> steps = {1, 10, 20, 30, 40, 50, 60};  // --grad-stats-every 10
  for (const int64_t step : steps) {
    const bool dip = step <= 30 || step >= 50;  // "dips" is below the ratio but for step 40
    found_at.push_back(judge.observe_record(
        step, {norms_of("layers.0.w", 1e-8),            // ratio 1e-8: vanishing
               norms_of("healthy", 1e-3, 2.0),
               norms_of("dips", dip ? 1e-8 : 1e-3),     // never 50 steps in a row
               norms_of("zero_w", 0.0),                 // exactly 0 on every record
               {.name = "missing"},                     // no gradient at all
               norms_of("mha.k_proj.bias", 6e-10, 1.0),  // rounding: zero by construction
               norms_of("attn.k_proj.bias", 0.0, 0.5),   // exactly 0: likewise
               norms_of("bias_from_zero", 1e-3, 0.0),    // all-zero weights: not vanishing
               norms_of("performer.k_proj.bias", 1e-2)}));  // a key bias that learns
  }
  // Step 1: the key biases, one note naming both.
  REQUIRE(found_at[0].size() == 1);
  const GradFinding& note = found_at[0][0];
  CHECK(note.is_note());
  CHECK(note.parameters == Names{"mha.k_proj.bias", "attn.k_proj.bias"});
  CHECK(note.line() ==
        "tapegrad train: note: a zero gradient by construction at step 1: mha.k_proj.bias "
        "(||grad|| / ||weight|| 6e-10: rounding), attn.k_proj.bias (exactly 0); softmax is "
        "unchanged by adding one constant to all the scores of a query row, and a key bias b "
        "adds q.b to every score of row q");
  // Steps 1 to 50 span 50 steps (6 records): layers.0.w is vanishing at step 50, not before.
  for (size_t i = 1; i < 5; ++i) CHECK(found_at[i].empty());
  REQUIRE(found_at[5].size() == 1);
  CHECK(found_at[5][0].line() ==
        "tapegrad train: warning: vanishing gradients at step 50: ||grad|| / ||weight|| below "
        "1e-07 on every record for 50+ steps: layers.0.w (at most 1e-08 since step 1)");
  CHECK(found_at[6].empty());  // once a parameter

  // The end: zero and missing need every record; the key bias that is exactly 0 is no warning.
  const std::vector<GradFinding> at_end = judge.finish();
  REQUIRE(at_end.size() == 2);
  CHECK(at_end[0].line() == "tapegrad train: warning: a gradient of exactly 0 on every one of "
                            "the 7 --grad-stats records: zero_w");
  CHECK(at_end[1].line() == "tapegrad train: warning: no gradient on any of the 7 --grad-stats "
                            "records: they do not reach the loss: missing");
  CHECK(judge.finish().empty());  // once

  CHECK(judge.summary() ==
        Names{"gradient health: 3 warnings, 1 note",
              "  note: a zero gradient by construction at step 1: mha.k_proj.bias, "
              "attn.k_proj.bias",
              "  warning: vanishing gradients at step 50: layers.0.w",
              "  warning: a gradient of exactly 0 on every one of the 7 --grad-stats records: "
              "zero_w",
              "  warning: no gradient on any of the 7 --grad-stats records: missing"});
}

TEST_CASE("grad health: vanishing needs 3 records as well as 50 steps", "[grad_health]") {
  GradHealthJudge judge;
  CHECK(judge.observe_record(1, {norms_of("w", 1e-9)}).empty());
  CHECK(judge.observe_record(100, {norms_of("w", 1e-9)}).empty());  // 100 steps, 2 records
  CHECK(judge.observe_record(200, {norms_of("w", 1e-9)}).size() == 1);
  CHECK(GradHealthJudge().finish().empty());  // no records: nothing to say
}

TEST_CASE("grad health: which names are key projection biases", "[grad_health]") {
  using tg::train::is_key_projection_bias;
  CHECK(is_key_projection_bias("k_proj.bias"));
  CHECK(is_key_projection_bias("mha.k_proj.bias"));
  CHECK(is_key_projection_bias("layers.11.attn.k_proj.bias"));
  CHECK_FALSE(is_key_projection_bias("layers.0.attn.k_proj.weight"));
  CHECK_FALSE(is_key_projection_bias("layers.0.attn.q_proj.bias"));
  CHECK_FALSE(is_key_projection_bias("desk_proj.bias"));
}

TEST_CASE("train: the textcls recipe at --lr 100 warns of exploding gradients before it "
          "diverges; healthy runs say nothing", "[grad_health][cli]") {
  TempDir dir;
  // The textcls recipe of docs/cli.md (without --save), at --lr 100, without --grad-stats, as
  // docs/diagnostics.md quotes it.
  const std::string readme = "train --task textcls --data " + std::string(TAPEGRAD_SOURCE_DIR) +
                             "/data/fortunes.tsv --tokenizer word --layers 1 --epochs 3 "
                             "--threads 1";
  const CliResult diverged = run_cli(readme + " --lr 100", dir);
  INFO(diverged.err);
  REQUIRE(diverged.exit_code == 3);
  const std::vector<std::string> lines = lines_of(diverged.err);
  const int warning = health_line_index(lines, "tapegrad train: warning: exploding gradients at step");
  const int summary = health_line_index(lines, "gradient health: 1 warning");
  const int error = health_line_index(lines, "error: training diverged at step");
  REQUIRE(warning >= 0);
  CHECK(warning < summary);
  CHECK(summary < error);
  CHECK(error + 1 == static_cast<int>(lines.size()));  // the divergence stays the last line
  CHECK_THAT(lines[warning], Catch::Contains("gradients: ") && Catch::Contains("weight"));
  // Before it: no warning at all ("training diverged at step 3" came out of the blue).

  // A healthy run, tiny, without --grad-stats: not a word about gradients.
  write_bytes(dir.file("series.csv"), small_csv());
  const CliResult healthy = run_cli("train --task timeseries --window 6 --steps 30 --dim 8 "
                                    "--heads 2 --batch 4 --threads 1 --data " +
                                    dir.file("series.csv"), dir);
  INFO(healthy.err);
  REQUIRE(healthy.exit_code == 0);
  CHECK_THAT(healthy.err, !Catch::Contains("warning") && !Catch::Contains("gradient health") &&
                              !Catch::Contains("note"));
}

TEST_CASE("train --grad-stats: the key bias's zero gradient is a note, once, and in the summary",
          "[grad_health][cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const CliResult run = run_cli("train --task timeseries --window 6 --steps 30 --dim 8 --heads 2 "
                                "--batch 4 --threads 1 --grad-stats-every 1 --grad-stats " +
                                dir.file("grads.csv") + " --data " + dir.file("series.csv"), dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::vector<std::string> lines = lines_of(run.err);
  const int note =
      health_line_index(lines, "tapegrad train: note: a zero gradient by construction at step 1: "
                               "mha.k_proj.bias (");
  REQUIRE(note >= 0);
  CHECK(std::count_if(lines.begin(), lines.end(), [](const std::string& line) {
          return line.find("by construction") != std::string::npos;
        }) == 2);  // the line when found, the summary's
  const int summary = health_line_index(lines, "gradient health: 1 note");
  REQUIRE(summary > note);
  CHECK(lines[summary + 1] == "  note: a zero gradient by construction at step 1: mha.k_proj.bias");
  CHECK_THAT(run.err, !Catch::Contains("warning"));
}
