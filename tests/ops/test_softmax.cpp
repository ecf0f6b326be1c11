// softmax and log_softmax: hand-computed values, any dim, fully masked rows, rows with NaN.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();

bool all_finite(const Tensor& t) {
  for (double v : t.to_host_f64()) if (!std::isfinite(v)) return false;
  return true;
}
}  // namespace

TEST_CASE("softmax of (1, 2, 3) by hand", "[softmax]") {
  const double total = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const auto y = softmax(from_values({1, 2, 3}, {3}, DType::f64), 0).to_host_f64();
  REQUIRE(y[0] == Approx(std::exp(1.0) / total));  // 0.0900306
  REQUIRE(y[1] == Approx(std::exp(2.0) / total));  // 0.2447285
  REQUIRE(y[2] == Approx(std::exp(3.0) / total));  // 0.6652410
  const auto log_y = log_softmax(from_values({1, 2, 3}, {3}), -1).to_host_f64();
  REQUIRE(log_y[0] == Approx(1.0 - std::log(total)));  // -2.4076060
  REQUIRE(log_y[2] == Approx(3.0 - std::log(total)));  // -0.4076060
}

TEST_CASE("softmax over dim 0 normalises columns", "[softmax]") {
  const auto y = softmax(from_values({1, 2, 3, 4}, {2, 2}, DType::f64), 0).to_host_f64();
  const double low = 1.0 / (1.0 + std::exp(2.0));  // softmax(1, 3)[0] = softmax(2, 4)[0]
  REQUIRE(y[0] == Approx(low));
  REQUIRE(y[1] == Approx(low));
  REQUIRE(y[2] == Approx(1.0 - low));
  REQUIRE(y[3] == Approx(1.0 - low));
}

TEST_CASE("softmax backward by hand: d y0 / dx = y0 (e0 - y)", "[softmax]") {
  Tensor x = from_values({1, 2, 3}, {3}, DType::f64).requires_grad_();
  Tensor y = softmax(x, 0);
  const auto yv = y.to_host_f64();
  y.backward(from_values({1, 0, 0}, {3}, DType::f64));
  const auto g = x.grad().to_host_f64();
  REQUIRE(g[0] == Approx(yv[0] * (1 - yv[0])));
  REQUIRE(g[1] == Approx(-yv[0] * yv[1]));
  REQUIRE(g[2] == Approx(-yv[0] * yv[2]));
}

TEST_CASE("log_softmax backward by hand: gradient of a sum is 1 - n softmax", "[softmax]") {
  Tensor x = from_values({1, 2, 3}, {3}, DType::f64).requires_grad_();
  sum(log_softmax(x, 0)).backward();
  const auto p = softmax(x.detach(), 0).to_host_f64();
  const auto g = x.grad().to_host_f64();
  for (int i = 0; i < 3; ++i) REQUIRE(g[i] == Approx(1 - 3 * p[i]));
}

TEST_CASE("softmax of a fully masked row is 0 with gradient 0, never NaN", "[softmax]") {
  Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64).requires_grad_();
  const Tensor mask = from_bools({false, true}, {2, 1});
  Tensor y = softmax(masked_fill(x, mask, -kInf), -1);
  const auto yv = y.to_host_f64();
  REQUIRE(all_finite(y));
  REQUIRE(yv[3] == 0);
  REQUIRE(yv[4] == 0);
  REQUIRE(yv[5] == 0);
  sum(y * from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64)).backward();
  REQUIRE(all_finite(x.grad()));
  const auto g = x.grad().to_host_f64();
  REQUIRE(g[3] == 0);
  REQUIRE(g[4] == 0);
  REQUIRE(g[5] == 0);
  REQUIRE(g[0] != 0);  // the unmasked row still learns
}

TEST_CASE("softmax straight on an all -inf row: gradient 0", "[softmax]") {
  Tensor x = from_values({-kInf, -kInf, 0, 1}, {2, 2}, DType::f64).requires_grad_();
  Tensor y = softmax(x, 1);
  sum(y * from_values({1, 2, 3, 4}, {2, 2}, DType::f64)).backward();
  REQUIRE(y.to_host_f64()[0] == 0);
  REQUIRE(x.grad().to_host_f64()[0] == 0);
  REQUIRE(x.grad().to_host_f64()[1] == 0);
}

TEST_CASE("log_softmax of a fully masked row is -inf, its gradient stays finite", "[softmax]") {
  Tensor x = from_values({-kInf, -kInf, 0, 1}, {2, 2}, DType::f64).requires_grad_();
  Tensor y = log_softmax(x, 1);
  REQUIRE(y.to_host_f64()[0] == -kInf);
  y.backward(from_values({0, 0, 1, 1}, {2, 2}, DType::f64));
  REQUIRE(all_finite(x.grad()));
}

TEST_CASE("softmax checks its dim and dtype", "[softmax]") {
  REQUIRE_THROWS_AS(softmax(zeros({2, 3}), 2), tg::Error);
  REQUIRE_THROWS_AS(log_softmax(zeros({2, 3}), -3), tg::Error);
  REQUIRE_THROWS_AS(softmax(from_indices({1, 2}, {2}), 0), tg::Error);
}

TEST_CASE("a row holding a NaN gives NaN throughout, also when the rest is -inf", "[softmax]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // rows: all NaN, a NaN among -inf, a NaN among numbers; and a fully masked row beside them
  const std::vector<double> rows = {nan, nan, nan, -kInf, nan, -kInf, 1, nan, 2, -kInf, -kInf, -kInf};
  for (const bool textbook : {false, true}) {  // the fast f32 rows, and the plain loops
    std::optional<Textbook> plain;
    if (textbook) plain.emplace();
    for (DType dtype : {DType::f32, DType::f64}) {
      for (const bool log : {false, true}) {
        INFO("textbook " << textbook << ", " << dtype_name(dtype) << ", log " << log);
        const Tensor x = from_values(rows, {4, 3}, dtype);
        const std::vector<double> y = (log ? log_softmax(x, 1) : softmax(x, 1)).to_host_f64();
        for (int i = 0; i < 9; ++i) CHECK(std::isnan(y[i]));
        for (int i = 9; i < 12; ++i) CHECK(y[i] == (log ? -kInf : 0.0));
      }
    }
  }
  // so a loss of NaN logits is NaN, and a NaN check on it sees it
  const Tensor logits = full({2, 3}, nan);
  CHECK(std::isnan(cross_entropy(logits, from_indices({0, 2}, {2})).item()));
}
