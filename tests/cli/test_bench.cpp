// `tapegrad bench` (run as a program) and the op profiler behind its --profile (in process).
// No timing assertions: the machines are noisy; only shapes of the output and signs of values.
#include <catch2/catch.hpp>

#include "tests/support/run_command.h"
#include "tests/cli/cli_support.h"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/threads.h"

namespace {

using tg::testing::run_command;

std::string bin() { return std::string("'") + TAPEGRAD_BIN + "'"; }

const tg::ProfileRow* find_row(const tg::ProfileTable& table, const std::string& name) {
  const auto found = std::find_if(table.begin(), table.end(),
                                  [&](const tg::ProfileRow& row) { return row.name == name; });
  return found == table.end() ? nullptr : &*found;
}

}  // namespace

TEST_CASE("bench --json prints one line with positive figures", "[bench]") {
  const auto [output, code] =
      run_command(bin() + " bench --workload textcls-small --steps 2 --warmup 1 --threads 1 --json 2>/dev/null");
  REQUIRE(code == 0);
  INFO(output);
  REQUIRE(std::count(output.begin(), output.end(), '\n') == 1);
  const nlohmann::json report = nlohmann::json::parse(output);
  REQUIRE(report.at("workload") == "textcls-small");
  REQUIRE(report.at("threads") == 1);
  for (const char* key : {"ms_per_step", "tokens_per_s", "gflops", "peak_bytes"}) {
    INFO(key);
    REQUIRE(report.at(key).is_number());
    REQUIRE(report.at(key).get<double>() > 0);
  }
}

TEST_CASE("bench sgemm: GFLOP/s is 2 n^3 over the step time; --plain-kernels is reported", "[bench]") {
  const auto [output, code] = run_command(
      bin() + " bench --workload sgemm --steps 2 --warmup 1 --threads 1 --plain-kernels --json 2>/dev/null");
  REQUIRE(code == 0);
  INFO(output);
  const nlohmann::json report = nlohmann::json::parse(output);
  const double ms = report.at("ms_per_step").get<double>();
  REQUIRE(ms > 0);
  REQUIRE(report.at("gflops").get<double>() == Approx(2.0 * 1024 * 1024 * 1024 / (ms / 1e3) / 1e9));
  REQUIRE(report.at("plain_kernels") == true);
  // A, B and C: 3 x 4 MiB at the peak, A and B (8 MiB) live before the product.
  REQUIRE(report.at("peak_bytes") == 3 * (int64_t(4) << 20));
}

TEST_CASE("bench sgemm --shape: 2 M K N FLOPs, A, B and C at the peak; a bad shape is one line",
          "[bench]") {
  tg::testing::TempDir dir;
  const auto result =
      tg::testing::run_cli("bench --workload sgemm --shape 96x40x24 --steps 2 --warmup 1 --threads 1 --json", dir);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(tg::testing::lines_of(result.out).back());
  const double ms = report.at("ms_per_step").get<double>();
  REQUIRE(report.at("gflops").get<double>() == Approx(2.0 * 96 * 40 * 24 / (ms / 1e3) / 1e9));
  REQUIRE(report.at("peak_bytes") == 4 * (96 * 40 + 40 * 24 + 96 * 24));
  for (const char* shape : {"0x1x1", "1x2", "1x1x1x1", "1x1x", "ax1x1", "+5x1x1", "65537x1x1",
                            "9999999999x1x1", "60000x60000x1"}) {
    INFO(shape);
    tg::testing::require_one_line_error(
        tg::testing::run_cli(std::string("bench --workload sgemm --steps 1 --shape ") + shape, dir),
        "--shape");
  }
  tg::testing::require_one_line_error(
      tg::testing::run_cli("bench --workload charlm --shape 8x8x8", dir), "--shape");
}

TEST_CASE("bench charlm: the recipes' character LM, its parameters and GEMM FLOPs", "[bench]") {
  const auto [output, code] = run_command(
      bin() + " bench --workload charlm --steps 1 --warmup 1 --threads 1 --json 2>/dev/null");
  REQUIRE(code == 0);
  INFO(output);
  const nlohmann::json report = nlohmann::json::parse(output);
  REQUIRE(report.at("workload") == "charlm");
  // vocab 100, dim 128, 2 layers, MLP 512: embedding 100*128; per layer two LayerNorms (2*2*128),
  // q/k/v/o 4*(128*128+128), MLP 128*512+512 + 512*128+128; final LayerNorm 2*128; head
  // 128*100+100.
  const int64_t layer = 2 * 2 * 128 + 4 * (128 * 128 + 128) + (128 * 512 + 512) + (512 * 128 + 128);
  REQUIRE(report.at("parameters") == 100 * 128 + 2 * layer + 2 * 128 + (128 * 100 + 100));
  // Forward GEMMs on R = 32 * 128 rows: per layer q/k/v/o 4 * 2R*128*128, causal attention
  // 4*32*128^2*128 / 2, MLP 2 * 2R*128*512; the head 2R*128*100. A step is 3x the forward.
  const double rows = 32.0 * 128;
  const double per_layer = 4 * 2 * rows * 128 * 128 + 2.0 * 32 * 128 * 128 * 128 +
                           2 * 2 * rows * 128 * 512;
  const double flops = 3 * (2 * per_layer + 2 * rows * 128 * 100);
  const double ms = report.at("ms_per_step").get<double>();
  REQUIRE(ms > 0);
  REQUIRE(report.at("gflops").get<double>() == Approx(flops / (ms / 1e3) / 1e9));
  REQUIRE(report.at("tokens_per_s").get<double>() == Approx(rows / (ms / 1e3)));
}

TEST_CASE("bench --int8: f32, dynamic and static forwards, the int8 models smaller", "[bench][quantize]") {
  const auto [output, code] = run_command(
      bin() + " bench --workload textcls-small --int8 --steps 2 --warmup 1 --threads 1 --json 2>/dev/null");
  REQUIRE(code == 0);
  INFO(output);
  std::vector<nlohmann::json> rows;
  for (const std::string& line : tg::testing::lines_of(output)) rows.push_back(nlohmann::json::parse(line));
  REQUIRE(rows.size() == 3);
  REQUIRE(rows[0].at("model") == "f32");
  REQUIRE(rows[1].at("model") == "int8 dynamic");
  REQUIRE(rows[2].at("model") == "int8 static");
  for (const nlohmann::json& row : rows) REQUIRE(row.at("ms_per_batch").get<double>() > 0);
  // Linear weights: 1 byte instead of 4, plus a 4-byte scale a row.
  const int64_t f32 = rows[0].at("linear_weight_bytes"), int8 = rows[1].at("linear_weight_bytes");
  REQUIRE(int8 < f32 / 3);
  REQUIRE(rows[1].at("model_bytes").get<int64_t>() < rows[0].at("model_bytes").get<int64_t>());
  // Only the textcls workloads, and none of the training-step options.
  const auto [errors, refused] = run_command(bin() + " bench --workload timeseries --int8 2>&1 1>/dev/null");
  REQUIRE(refused == 2);
  REQUIRE(errors.find("--int8 does not apply to --workload timeseries") != std::string::npos);
}

TEST_CASE("bench --int8 on charlm: three models, each loss within 1% of f32, the kernels named",
          "[bench][quantize]") {
  const auto [output, code] = run_command(
      bin() + " bench --workload charlm --int8 --steps 1 --warmup 0 --threads 1 --json "
              "2>/dev/null");
  REQUIRE(code == 0);
  INFO(output);
  std::vector<nlohmann::json> rows;
  for (const std::string& line : tg::testing::lines_of(output)) {
    rows.push_back(nlohmann::json::parse(line));
  }
  REQUIRE(rows.size() == 3);
  REQUIRE(rows[2].at("model") == "int8 static");
  // an untrained LM over 100 symbols: cross-entropy near ln 100 = 4.6; int8 within 1% of f32's
  const double f32_loss = rows[0].at("loss");
  REQUIRE(f32_loss == Approx(std::log(100.0)).epsilon(0.2));
  for (const nlohmann::json& row : rows) {
    REQUIRE(row.at("workload") == "charlm");
    REQUIRE(row.at("loss").get<double>() == Approx(f32_loss).epsilon(0.01));
    const double loss = row.at("loss");
    REQUIRE(row.at("loss_change").get<double>() == Approx((loss - f32_loss) / f32_loss));
    REQUIRE(row.at("int8_kernels").get<std::string>().size() > 0);
  }
}

TEST_CASE("bench with an unknown workload exits 2 with one line on stderr", "[bench]") {
  // stderr into the pipe, stdout away
  const auto [errors, code] = run_command(bin() + " bench --workload no-such-thing 2>&1 1>/dev/null");
  REQUIRE(code == 2);
  INFO(errors);
  REQUIRE(std::count(errors.begin(), errors.end(), '\n') == 1);
  REQUIRE(errors.find("no-such-thing") != std::string::npos);
  REQUIRE(errors.find("textcls-small") != std::string::npos);  // says what is known
}

TEST_CASE("profiler: forward and backward rows of a tiny model", "[bench][profiler]") {
  tg::manual_seed(3);
  tg::nn::Linear layer(3, 4);
  tg::Tensor w2 = tg::randn({4, 2});
  w2.requires_grad_();
  const tg::Tensor x = tg::randn({5, 3});
  {
    tg::Profiler profiler;
    for (int i = 0; i < 2; ++i) {
      const tg::Tensor loss = tg::sum(tg::matmul(layer.forward(x), w2));
      loss.backward();
      const tg::ProfileRegion region("update");
      layer.zero_grad();
      w2.zero_grad();
    }
  }
  const tg::ProfileTable table = tg::profile_results();
  INFO(tg::format_profile(table));
  for (const char* name : {"linear", "matmul", "sum", "linear.backward", "matmul.backward",
                           "sum.backward", "backward()", "update"}) {
    INFO(name);
    const tg::ProfileRow* row = find_row(table, name);
    REQUIRE(row != nullptr);
    REQUIRE(row->calls > 0);
    REQUIRE(row->total_ms >= 0);
    REQUIRE(row->self_ms <= row->total_ms + 1e-9);
  }
  REQUIRE(find_row(table, "linear")->calls == 2);
  REQUIRE(find_row(table, "linear.backward")->calls == 2);
  REQUIRE(find_row(table, "backward()")->calls == 2);
  // Only taped ops are rows: the matmuls inside matmul.backward run under NoGrad and are part of
  // its own (self) time, and linear's internal reshape/view fold into linear.
  REQUIRE(find_row(table, "matmul")->calls == 2);
  REQUIRE(find_row(table, "view") == nullptr);
  REQUIRE(find_row(table, "matmul.backward")->self_bytes > 0);  // it allocates its gradients
  // A region's self time leaves out what ran inside it: the sweep contains every node.
  const tg::ProfileRow* sweep = find_row(table, "backward()");
  REQUIRE(sweep->self_ms <= sweep->total_ms - find_row(table, "linear.backward")->total_ms + 1e-9);
  const std::string text = tg::format_profile(table);
  REQUIRE(text.find("linear.backward") != std::string::npos);
  REQUIRE(text.find("self ms") != std::string::npos);
}

TEST_CASE("profiler: records nothing when off, and a new Profiler starts afresh", "[bench][profiler]") {
  tg::Tensor x = tg::randn({2, 2});
  x.requires_grad_();  // only taped ops are rows
  {
    tg::Profiler profiler;
    (void)tg::matmul(x, x);
  }
  REQUIRE(find_row(tg::profile_results(), "matmul")->calls == 1);
  (void)tg::matmul(x, x);  // off: not counted
  REQUIRE(find_row(tg::profile_results(), "matmul")->calls == 1);
  {
    tg::Profiler profiler;
    (void)tg::exp(x);
  }
  REQUIRE(find_row(tg::profile_results(), "matmul") == nullptr);
  REQUIRE(find_row(tg::profile_results(), "exp")->calls == 1);
}

// bench compares thread counts: the products must not depend on them (cpu/fast/blas.cpp splits a
// GEMM over the pool's threads; the shapes make it split rows, columns, and batch items).
TEST_CASE("bench: GEMM gives the same products at 1, 2 and 3 threads", "[bench][matmul]") {
  const int before = tg::num_threads();
  tg::manual_seed(11);
  struct Case { tg::Shape a, b; bool ta, tb; };  // a, b: the operands' shapes; ta, tb: stored transposed
  const std::vector<Case> cases = {
      {{300, 70}, {70, 90}, false, false},   // tall C, m not a multiple of 16
      {{300, 70}, {70, 90}, true, false},    // rows of a transposed A
      {{40, 96}, {96, 500}, false, false},   // wide C
      {{40, 96}, {96, 500}, false, true},    // columns of a transposed B
      {{3, 200, 64}, {3, 64, 100}, false, false},  // batch items >= threads
      {{1, 200, 64}, {64, 100}, false, false}};    // one item, broadcast B
  for (const Case& c : cases) {
    const tg::Tensor a = c.ta ? tg::randn({c.a[1], c.a[0]}).transpose(0, 1) : tg::randn(c.a);
    const tg::Tensor b = c.tb ? tg::randn({c.b[1], c.b[0]}).transpose(0, 1) : tg::randn(c.b);
    tg::set_num_threads(1);
    const std::vector<double> one = tg::matmul(a, b).to_host_f64();
    for (int threads : {2, 3}) {
      tg::set_num_threads(threads);
      const std::vector<double> many = tg::matmul(a, b).to_host_f64();
      REQUIRE(many.size() == one.size());
      for (size_t i = 0; i < one.size(); ++i) REQUIRE(many[i] == Approx(one[i]).margin(1e-4));
    }
  }
  tg::set_num_threads(before);
}

TEST_CASE("bench --amp reports the precision and the f32 peak beside its own", "[bench]") {
  tg::testing::TempDir dir;
  const auto result = tg::testing::run_cli(
      "bench --workload textcls-small --steps 1 --warmup 1 --threads 1 --amp bf16 --json", dir);
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(tg::testing::lines_of(result.out).back());
  REQUIRE(report["amp"] == "bf16");
  REQUIRE(report["peak_bytes"].get<int64_t>() > 0);
  REQUIRE(report["peak_bytes_f32"].get<int64_t>() > 0);
  tg::testing::require_one_line_error(
      tg::testing::run_cli("bench --workload textcls-small --amp fp8", dir), "--amp");
}
