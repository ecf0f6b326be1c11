// --grad-stats: the measurements and the warning (in process, on a tiny model with a parameter that
// does not reach the loss), the CSV that `tapegrad train` writes, and `tapegrad plot grads`.
#include <cmath>

#include "tapegrad/nn/module.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/train/grad_stats.h"
#include "tests/cli/cli_support.h"

using namespace tg::testing;

namespace {

// y = sum(used * x + zeroed * 0); `detached` is registered but never used.
class TinyModel : public tg::nn::Module {
 public:
  TinyModel() {
    used = register_parameter("used", tg::from_values({3, 4}, {2}));
    zeroed = register_parameter("zeroed", tg::from_values({1, 1}, {2}));
    detached = register_parameter("detached", tg::from_values({5, 5}, {2}));
  }
  tg::Tensor loss(const tg::Tensor& x) const { return tg::sum(tg::add(tg::mul(used, x), tg::mul(zeroed, 0.0))); }
  tg::Tensor used, zeroed, detached;
};

std::vector<std::vector<std::string>> csv_rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  for (const std::string& line : lines_of(text)) {
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

}  // namespace

TEST_CASE("grad stats: mean |grad|, norm, update ratio, and a warning naming the dead parameters", "[grad_stats]") {
  TempDir dir;
  TinyModel model;
  const tg::nn::NamedTensors parameters = model.named_parameters();
  tg::SGD sgd(model.parameters(), 0.1);
  tg::train::GradStatsLog log(dir.file("grads.csv"), 2);
  REQUIRE(log.due(1, 1));  // the first step of the run
  REQUIRE_FALSE(log.due(3, 1));
  REQUIRE(log.due(4, 1));

  std::vector<std::string> warnings;
  for (int64_t step = 1; step <= 2; ++step) {
    model.loss(tg::from_values({1, -2}, {2})).backward();  // d/d used = x = [1, -2]
    log.measure(parameters);
    sgd.step();
    sgd.zero_grad();
    warnings.push_back(log.write_rows(step, parameters));
  }
  log.close();

  // One line naming the parameter without a gradient and the one with an all-zero gradient, once.
  INFO(warnings[0]);
  REQUIRE(warnings[0].find('\n') == std::string::npos);
  REQUIRE_THAT(warnings[0], Catch::StartsWith("tapegrad train: warning:") &&
                                Catch::Contains("no gradient after backward (does not reach the loss): detached") &&
                                Catch::Contains("all-zero gradient: zeroed"));
  REQUIRE_THAT(warnings[0], !Catch::Contains("used"));
  REQUIRE(warnings[1].empty());

  const auto rows = csv_rows(read_bytes(dir.file("grads.csv")));
  REQUIRE(rows.size() == 1 + 2 * 3);
  REQUIRE(rows[0] == std::vector<std::string>{"step", "name", "mean_abs_grad", "grad_norm", "update_ratio"});
  for (size_t i = 1; i < rows.size(); ++i) REQUIRE(rows[i].size() == 5);
  // Step 1, "used": g = [1, -2]: mean |g| 1.5, ||g|| sqrt(5); the update 0.1 g over ||[3, 4]|| = 5.
  REQUIRE(rows[1][0] == "1");
  REQUIRE(rows[1][1] == "used");
  REQUIRE(std::stod(rows[1][2]) == Approx(1.5));
  REQUIRE(std::stod(rows[1][3]) == Approx(std::sqrt(5.0)));
  REQUIRE(std::stod(rows[1][4]) == Approx(0.1 * std::sqrt(5.0) / 5.0).epsilon(1e-5));
  // "zeroed": a gradient of zeros, no update; "detached": no gradient cells at all.
  REQUIRE(rows[2] == std::vector<std::string>{"1", "zeroed", "0", "0", "0"});
  REQUIRE(rows[3] == std::vector<std::string>{"1", "detached", "", "", "0"});
  REQUIRE(rows[4][0] == "2");
}

TEST_CASE("grad stats: each record's norms for the judge; a key bias's zero gradient is no warning",
          "[grad_stats][grad_health]") {
  TempDir dir;
  tg::Tensor used = tg::from_values({3, 4}, {2}), key_bias = tg::from_values({1, 1}, {2});
  used.requires_grad_();
  key_bias.requires_grad_();
  const tg::nn::NamedTensors parameters = {{"used", used}, {"mha.k_proj.bias", key_bias}};
  tg::SGD sgd({used, key_bias}, 0.1);
  tg::train::GradStatsLog log(dir.file("grads.csv"), 1);
  const tg::Tensor x = tg::from_values({1, -2}, {2});
  tg::sum(tg::add(tg::mul(used, x), tg::mul(key_bias, 0.0))).backward();
  log.measure(parameters);
  sgd.step();
  // Before: "warning: ... an all-zero gradient: mha.k_proj.bias" (it is zero by construction).
  CHECK(log.write_rows(1, parameters).empty());
  const std::vector<tg::train::ParameterNorms>& norms = log.recorded();
  REQUIRE(norms.size() == 2);
  CHECK(norms[0].name == "used");
  CHECK(norms[0].has_grad);
  CHECK(norms[0].grad_norm == Approx(std::sqrt(5.0)));  // g = x
  CHECK(norms[0].weight_norm == Approx(5.0));           // ||[3, 4]|| before the update
  CHECK(norms[1].name == "mha.k_proj.bias");
  CHECK(norms[1].grad_norm == 0);
  CHECK(norms[1].weight_norm == Approx(std::sqrt(2.0)));
  // gradient_norms: the gradients as they are now (weights not measured).
  sgd.zero_grad();
  tg::sum(tg::mul(used, x)).backward();
  const std::vector<tg::train::ParameterNorms> now = tg::train::gradient_norms(parameters);
  REQUIRE(now.size() == 2);
  CHECK(now[0].grad_norm == Approx(std::sqrt(5.0)));
  CHECK_FALSE(now[1].has_grad);  // not in this loss
}

TEST_CASE("grad stats: measure_gradient and the warning text", "[grad_stats]") {
  tg::Tensor p = tg::from_values({1, 2, 3, 4}, {4});
  p.requires_grad_();
  REQUIRE_FALSE(tg::train::measure_gradient("p", p).has_grad);
  tg::sum(tg::mul(p, tg::from_values({3, -4, 0, 0}, {4}))).backward();
  const tg::train::GradientHealth health = tg::train::measure_gradient("p", p);
  REQUIRE(health.has_grad);
  REQUIRE(health.mean_abs == Approx(7.0 / 4));
  REQUIRE(health.norm == Approx(5.0));
  REQUIRE_FALSE(health.all_zero());
  REQUIRE(tg::train::dead_gradient_warning({health}).empty());
  REQUIRE(tg::train::dead_gradient_warning({{.name = "a"}, {.name = "b"}}) ==
          "tapegrad train: warning: no gradient after backward (does not reach the loss): a, b");
}

TEST_CASE("train --grad-stats writes one row per parameter, plot grads draws them", "[grad_stats][cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const CliResult run = run_cli("train --task timeseries --data " + dir.file("series.csv") +
                                    " --window 6 --steps 5 --dim 8 --heads 2 --batch 4 --threads 1 --grad-stats " +
                                    dir.file("grads.csv") + " --grad-stats-every 2",
                                dir);
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  REQUIRE_THAT(run.err, !Catch::Contains("warning"));  // every parameter of the model learns
  const auto rows = csv_rows(read_bytes(dir.file("grads.csv")));
  REQUIRE(rows[0] == std::vector<std::string>{"step", "name", "mean_abs_grad", "grad_norm", "update_ratio"});
  // TimeSeriesModel: input_proj, the four projections of one attention, output: 12 tensors; rows at
  // steps 1, 2 and 4.
  REQUIRE(rows.size() == 1 + 3 * 12);
  REQUIRE(rows[1][0] == "1");
  REQUIRE(rows[1][1] == "input_proj.weight");
  REQUIRE(rows[3][1] == "mha.q_proj.weight");
  REQUIRE(rows[13][0] == "2");
  REQUIRE(rows[25][0] == "4");
  for (size_t i = 1; i < rows.size(); ++i) {
    REQUIRE(std::isfinite(std::stod(rows[i][2])));
    REQUIRE(std::stod(rows[i][3]) >= std::stod(rows[i][2]) * 0);  // a norm, not negative
  }

  const CliResult plotted = run_cli("plot grads --log " + dir.file("grads.csv") + " --out " + dir.file("grads.png"), dir);
  INFO(plotted.err);
  REQUIRE(plotted.exit_code == 0);
  REQUIRE(read_bytes(dir.file("grads.png")).substr(0, 8) == "\x89PNG\r\n\x1a\n");
}

TEST_CASE("plot grads: gaps for missing gradients; bad input exits 2 with one line", "[grad_stats][plot]") {
  TempDir dir;
  write_bytes(dir.file("grads.csv"), "step,name,mean_abs_grad,grad_norm,update_ratio\n"
                                     "1,a,0.5,1,0.001\n1,b,,,0\n1,c,0,0,0\n2,a,0.25,0.5,0.001\n2,b,,,0\n2,c,0,0,0\n");
  const CliResult plotted = run_cli("plot grads --log " + dir.file("grads.csv") + " --out " + dir.file("g.png"), dir);
  INFO(plotted.err);
  REQUIRE(plotted.exit_code == 0);
  REQUIRE(std::filesystem::exists(dir.file("g.png")));
  REQUIRE(run_cli("plot grads --only a --log " + dir.file("grads.csv") + " --out " + dir.file("a.png"), dir).exit_code == 0);
  require_one_line_error(run_cli("plot grads --only zzz --log " + dir.file("grads.csv") + " --out " + dir.file("x.png"), dir),
                         "--only 'zzz'");

  write_bytes(dir.file("loss.csv"), "step,epoch,loss\n1,0,2.5\n");
  require_one_line_error(run_cli("plot grads --log " + dir.file("loss.csv") + " --out " + dir.file("x.png"), dir),
                         "is this a --grad-stats file?");
  write_bytes(dir.file("nothing.csv"), "step,name,mean_abs_grad\n1,b,\n");
  require_one_line_error(run_cli("plot grads --log " + dir.file("nothing.csv") + " --out " + dir.file("x.png"), dir),
                         "no series has a finite, positive point");
  require_one_line_error(run_cli("plot grads --log " + dir.file("grads.csv") + " --out " + dir.path.string(), dir),
                         "is a directory");
  REQUIRE(!std::filesystem::exists(dir.file("x.png")));
}

TEST_CASE("grad-stats flags: bad values exit 2 with one line", "[grad_stats][cli]") {
  TempDir dir;
  write_bytes(dir.file("series.csv"), small_csv());
  const std::string train = "train --task timeseries --data " + dir.file("series.csv") +
                            " --window 6 --steps 2 --dim 8 --heads 2 --batch 4 --threads 1";
  require_one_line_error(run_cli(train + " --grad-stats " + dir.file("g.csv") + " --grad-stats-every 0", dir),
                         "--grad-stats-every must be at least 1");
  require_one_line_error(run_cli(train + " --grad-stats " + dir.file("g.csv") + " --grad-stats-every=-3", dir),
                         "--grad-stats-every must be at least 1");
  require_one_line_error(run_cli(train + " --grad-stats-every 5", dir), "needs --grad-stats");
  require_one_line_error(run_cli(train + " --grad-stats " + dir.path.string(), dir), "directory");
  require_one_line_error(run_cli(train + " --grad-stats " + dir.file("series.csv"), dir), "is the --data file");
  REQUIRE(!std::filesystem::exists(dir.file("g.csv")));
  REQUIRE(read_bytes(dir.file("series.csv")) == small_csv());
}
