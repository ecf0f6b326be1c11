// --textbook through the real binary: a charlm trained 20 steps with it reaches the losses of the
// run without it (the --log CSV, relative 1e-3); --profile's rows and `plot tape`'s page name the
// tutorial's ops (softmax, matmul) instead of the packed ones; eval agrees; every command that
// computes runs with it; with --device cuda it is one clear error; the help texts say what it does.
#include <cmath>
#include <string>
#include <vector>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

const std::string kTextbookRun =
    " --task charlm --context 24 --dim 32 --heads 2 --layers 1 --batch 8 --dropout 0.1 --seed 5 "
    "--threads 2";

// A charlm trained `steps` steps on dir/text.txt (with `extra` flags), its log in dir/<name>.csv
// and its checkpoint in dir/<name>.st; the run's stderr (progress and the --profile table).
std::string textbook_train(const TempDir& dir, const std::string& name, int steps,
                           const std::string& extra = "") {
  const CliResult run = run_cli("train" + kTextbookRun + " --data " + dir.file("text.txt") +
                                    " --steps " + std::to_string(steps) + " --log " +
                                    dir.file(name + ".csv") + " --save " + dir.file(name + ".st") +
                                    extra,
                                dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  return run.err;
}

bool names_packed_op(const std::string& text) {
  return text.find("packed_self_attention") != std::string::npos ||
         text.find("stacked_linear") != std::string::npos ||
         text.find("scaled_dot_product_attention") != std::string::npos;
}

}  // namespace

TEST_CASE("cli --textbook: a charlm's 20 steps reach the fast run's losses", "[cli][textbook]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  textbook_train(dir, "fast", 20);
  const std::string textbook_profile = textbook_train(dir, "textbook", 20, " --textbook --profile");
  CHECK_THAT(textbook_profile, Catch::Contains("softmax.backward"));  // the explicit path ran
  const std::vector<double> fast = logged_losses(dir.file("fast.csv"));
  const std::vector<double> textbook = logged_losses(dir.file("textbook.csv"));
  REQUIRE(fast.size() == 20);
  REQUIRE(textbook.size() == 20);
  // The same model, data, batches and dropout numbers; the sums run in another order (the
  // reference GEMM in double, softmax written out against the fused kernel's online one), and
  // Adam carries those differences from step to step: within 1e-3 of each other, while the loss
  // itself falls by far more over the run. (The log keeps 6 digits, so the two may print alike.)
  for (size_t step = 0; step < fast.size(); ++step) {
    INFO("step " << step + 1);
    CHECK(textbook[step] == Approx(fast[step]).epsilon(1e-3));
  }
  CHECK(fast.back() < fast.front() - 0.1);

  // eval of one checkpoint, both ways: the same loss to rounding.
  const CliResult eval_fast = run_cli("eval --json --load " + dir.file("fast.st") + " --data " + dir.file("text.txt"), dir);
  const CliResult eval_textbook = run_cli("eval --json --textbook --load " + dir.file("fast.st") +
                                              " --data " + dir.file("text.txt"), dir);
  REQUIRE(eval_fast.exit_code == 0);
  REQUIRE(eval_textbook.exit_code == 0);
  const double loss_fast = nlohmann::json::parse(eval_fast.out)["loss"].get<double>();
  const double loss_textbook = nlohmann::json::parse(eval_textbook.out)["loss"].get<double>();
  CHECK(loss_textbook == Approx(loss_fast).epsilon(1e-5));
}

TEST_CASE("cli --textbook: --profile's rows and plot tape name the tutorial's ops", "[cli][textbook][plot]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  const std::string fast_profile = textbook_train(dir, "fast", 2, " --profile");
  const std::string textbook_profile = textbook_train(dir, "textbook", 2, " --profile --textbook");
  CHECK(names_packed_op(fast_profile));  // without the switch: the packed projection and kernel
  CHECK_FALSE(names_packed_op(textbook_profile));
  CHECK_THAT(textbook_profile, Catch::Contains("softmax") && Catch::Contains("matmul") &&
                                   Catch::Contains("linear") && Catch::Contains("dropout"));

  for (const bool textbook : {false, true}) {
    INFO("--textbook " << textbook);
    const std::string out = dir.file(textbook ? "textbook.html" : "fast.html");
    const CliResult plot = run_cli("plot tape --load " + dir.file("fast.st") + " --out " + out +
                                       (textbook ? " --textbook" : ""), dir);
    INFO(plot.err);
    REQUIRE(plot.exit_code == 0);
    const std::string page = read_bytes(out);
    CHECK(names_packed_op(page) == !textbook);
    // An op's box names it in a <tspan>: ">softmax<" (log_softmax, the loss's, is on both).
    CHECK((page.find(">softmax<") != std::string::npos) == textbook);
    CHECK((page.find(">matmul<") != std::string::npos) == textbook);
  }
}

TEST_CASE("cli --textbook: every command that computes runs with it", "[cli][textbook]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  textbook_train(dir, "lm", 2);
  const std::string model = dir.file("lm.st"), text = dir.file("text.txt");
  const std::vector<std::string> commands = {
      "train" + kTextbookRun + " --data " + text + " --steps 1",
      "eval --load " + model + " --data " + text,
      "sample --load " + model + " --prompt the --tokens 5",
      "sample --load " + model + " --prompt the --tokens 5 --no-cache",
      "bench --workload textcls-small --steps 1 --warmup 0",
      "gradcheck --filter attention",
      "plot tape --load " + model + " --out " + dir.file("tape.png"),
      "plot attention --load " + model + " --text the --out " + dir.file("attn.png"),
      "analyze heads --load " + model + " --data " + text + " --samples 2",
      "quantize --load " + model + " --mode dynamic --out " + dir.file("q.st"),
  };
  for (const std::string& command : commands) {
    INFO(command);
    const CliResult result = run_cli(command + " --textbook", dir);
    INFO(result.err);
    CHECK(result.exit_code == 0);
  }
  const CliResult bench = run_cli("bench --workload textcls-small --steps 1 --warmup 0 --textbook --json", dir);
  REQUIRE(bench.exit_code == 0);
  const nlohmann::json report = nlohmann::json::parse(bench.out);
  CHECK(report["textbook"] == true);
  CHECK(report["threads"] == 1);
}

TEST_CASE("cli --textbook: refused with --device cuda and by the kernel benches, described in --help",
          "[cli][textbook]") {
  TempDir dir;
  write_bytes(dir.file("text.txt"), small_text());
  require_one_line_error(run_cli("train" + kTextbookRun + " --data " + dir.file("text.txt") +
                                     " --steps 1 --textbook --device cuda", dir),
                         "--textbook runs the plain CPU kernels");
  require_one_line_error(run_cli("bench --workload timeseries --textbook --device cuda:1", dir),
                         "--device cuda:1");
  // The benches that time the fast kernels themselves: gemm-i8 runs both kinds, attn-scaling's
  // 16384 positions on the reference loops would take hours.
  require_one_line_error(run_cli("bench --workload attn-scaling --textbook", dir), "--textbook");
  require_one_line_error(run_cli("bench --workload gemm-i8 --textbook", dir), "--textbook");
  for (const std::string command : {"train", "eval", "sample", "analyze heads", "quantize",
                                    "gradcheck", "bench", "plot tape", "plot attention"}) {
    INFO(command);
    const CliResult help = run_cli(command + " --help", dir);
    REQUIRE(help.exit_code == 0);
    CHECK_THAT(help.out, Catch::Contains("--textbook"));
  }
  CHECK_THAT(run_cli("--help", dir).out, Catch::Contains("--textbook"));
}
