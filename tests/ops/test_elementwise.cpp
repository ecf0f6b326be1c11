// Elementwise ops: values against std:: functions, broadcasting, errors, gradients by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/thread_counts.h"

using namespace tg;

namespace {

const std::vector<double> kInputs = {-3.5, -2, -1, -0.5, -1e-3, 0, 1e-3, 0.25, 0.5, 1, 2, 3.75, 8};
const std::vector<double> kPositive = {1e-3, 0.1, 0.5, 1, 2, 3.75, 10, 123.5};

void require_close(const std::vector<double>& got, const std::vector<double>& expected, double tol) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    if (std::isnan(expected[i])) {
      REQUIRE(std::isnan(got[i]));
    } else if (std::isinf(expected[i])) {
      REQUIRE(got[i] == expected[i]);
    } else {
      REQUIRE(std::fabs(got[i] - expected[i]) <= tol * (1.0 + std::fabs(expected[i])));
    }
  }
}

std::vector<double> map(const std::vector<double>& xs, const std::function<double(double)>& f) {
  std::vector<double> out;
  for (double x : xs) out.push_back(f(x));
  return out;
}

// Runs a unary op on f64 and f32 inputs and compares with the reference function.
void check_unary(const char* name, const std::function<Tensor(const Tensor&)>& op,
                 const std::function<double(double)>& reference, const std::vector<double>& xs) {
  INFO("op " << name);
  Tensor x64 = from_values(xs, {static_cast<int64_t>(xs.size())}, DType::f64);
  Tensor y64 = op(x64);
  REQUIRE(y64.dtype() == DType::f64);
  REQUIRE(y64.shape() == x64.shape());
  require_close(y64.to_host_f64(), map(xs, reference), 1e-14);
  Tensor x32 = from_values(xs, {static_cast<int64_t>(xs.size())});
  Tensor y32 = op(x32);
  REQUIRE(y32.dtype() == DType::f32);
  // Reference on the f32-rounded inputs, tolerance for single precision.
  require_close(y32.to_host_f64(), map(x32.to_host_f64(), reference), 2e-6);
}

double gelu_reference(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }

}  // namespace

TEST_CASE("elementwise: unary ops match the std:: functions", "[elementwise]") {
  check_unary("neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, kInputs);
  check_unary("unary minus", [](const Tensor& x) { return -x; }, [](double x) { return -x; }, kInputs);
  check_unary("exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, kInputs);
  check_unary("log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, kPositive);
  check_unary("sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, kPositive);
  check_unary("tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, kInputs);
  check_unary("sigmoid", [](const Tensor& x) { return sigmoid(x); },
              [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, kInputs);
  check_unary("relu", [](const Tensor& x) { return relu(x); },
              [](double x) { return x > 0 ? x : 0.0; }, kInputs);
  check_unary("gelu", [](const Tensor& x) { return gelu(x); }, gelu_reference, kInputs);
  check_unary("pow 2", [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }, kInputs);
  check_unary("pow 3", [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }, kInputs);
  check_unary("pow 0.5", [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::sqrt(x); }, kPositive);
  check_unary("pow -1", [](const Tensor& x) { return pow(x, -1.0); }, [](double x) { return 1.0 / x; }, kPositive);
  check_unary("add scalar", [](const Tensor& x) { return x + 2.5; }, [](double x) { return x + 2.5; }, kInputs);
  check_unary("scalar add", [](const Tensor& x) { return 2.5 + x; }, [](double x) { return x + 2.5; }, kInputs);
  check_unary("sub scalar", [](const Tensor& x) { return x - 1.5; }, [](double x) { return x - 1.5; }, kInputs);
  check_unary("scalar sub", [](const Tensor& x) { return 1.5 - x; }, [](double x) { return 1.5 - x; }, kInputs);
  check_unary("mul scalar", [](const Tensor& x) { return x * -3.0; }, [](double x) { return -3 * x; }, kInputs);
  check_unary("scalar mul", [](const Tensor& x) { return -3.0 * x; }, [](double x) { return -3 * x; }, kInputs);
  check_unary("div scalar", [](const Tensor& x) { return x / 4.0; }, [](double x) { return x / 4; }, kInputs);
  check_unary("scalar div", [](const Tensor& x) { return 3.0 / x; }, [](double x) { return 3 / x; }, kPositive);
}

TEST_CASE("elementwise: special values", "[elementwise]") {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor x = from_values({0, -1, inf, -inf}, {4}, DType::f64);
  const std::vector<double> l = log(x).to_host_f64();
  REQUIRE(l[0] == -inf);
  REQUIRE(std::isnan(l[1]));
  REQUIRE(l[2] == inf);
  const std::vector<double> e = exp(x).to_host_f64();
  REQUIRE(e[2] == inf);
  REQUIRE(e[3] == 0.0);
  const std::vector<double> s = sigmoid(x).to_host_f64();
  REQUIRE(s[0] == 0.5);
  REQUIRE(s[2] == 1.0);
  REQUIRE(s[3] == 0.0);
  REQUIRE(tanh(x).to_host_f64()[2] == 1.0);
  REQUIRE(relu(x).to_host_f64() == std::vector<double>{0, 0, inf, 0});
  // Far tails of gelu: ~0 on the left, ~x on the right.
  REQUIRE(gelu(from_values({-10}, {1}, DType::f64)).item() == Approx(gelu_reference(-10)).margin(1e-20));
  REQUIRE(gelu(from_values({10}, {1}, DType::f64)).item() == Approx(10.0));
}

TEST_CASE("elementwise: binary ops on same shapes", "[elementwise]") {
  const std::vector<double> av = {1.5, -2, 3, 0.25, 7, -0.5};
  const std::vector<double> bv = {2, 4, -1.5, 0.5, -7, 3};
  for (DType dtype : {DType::f32, DType::f64}) {
    Tensor a = from_values(av, {2, 3}, dtype), b = from_values(bv, {2, 3}, dtype);
    std::vector<double> sum, diff, prod, quot, eq;
    for (size_t i = 0; i < av.size(); ++i) {
      sum.push_back(av[i] + bv[i]);
      diff.push_back(av[i] - bv[i]);
      prod.push_back(av[i] * bv[i]);
      quot.push_back(av[i] / bv[i]);
    }
    require_close((a + b).to_host_f64(), sum, 1e-7);
    require_close(add(a, b).to_host_f64(), sum, 1e-7);
    require_close((a - b).to_host_f64(), diff, 1e-7);
    require_close(sub(a, b).to_host_f64(), diff, 1e-7);
    require_close((a * b).to_host_f64(), prod, 1e-7);
    require_close(mul(a, b).to_host_f64(), prod, 1e-7);
    require_close((a / b).to_host_f64(), quot, 1e-7);
    require_close(div(a, b).to_host_f64(), quot, 1e-7);
    REQUIRE((a + b).dtype() == dtype);
  }
  // Division by zero follows IEEE.
  const std::vector<double> z = (from_values({1, -1, 0}, {3}) / zeros({3})).to_host_f64();
  REQUIRE(z[0] == std::numeric_limits<double>::infinity());
  REQUIRE(z[1] == -std::numeric_limits<double>::infinity());
  REQUIRE(std::isnan(z[2]));
}

TEST_CASE("elementwise: equal gives 1 or 0 in the inputs' dtype and is not recorded", "[elementwise]") {
  Tensor a = from_values({1, 2, 3, 4}, {4}).requires_grad_();
  Tensor b = from_values({1, 0, 3, 5}, {4});
  Tensor e = equal(a, b);
  REQUIRE(e.dtype() == DType::f32);
  REQUIRE(e.to_host_f64() == std::vector<double>{1, 0, 1, 0});
  REQUIRE_FALSE(e.requires_grad());
  REQUIRE(equal(from_values({1, 2}, {2, 1}), from_values({1, 2, 3}, {3})).to_host_f64() ==
          std::vector<double>{1, 0, 0, 0, 1, 0});
}

TEST_CASE("elementwise: broadcasting follows numpy rules", "[elementwise][broadcast]") {
  REQUIRE(broadcast_shapes({2, 3}, {3}, "t") == Shape{2, 3});
  REQUIRE(broadcast_shapes({2, 1}, {1, 3}, "t") == Shape{2, 3});
  REQUIRE(broadcast_shapes({}, {4, 5}, "t") == Shape{4, 5});
  REQUIRE(broadcast_shapes({5, 1, 4}, {3, 1}, "t") == Shape{5, 3, 4});
  REQUIRE(broadcast_shapes({0, 1}, {1, 3}, "t") == Shape{0, 3});
  REQUIRE(broadcast_shapes({1}, {1}, "t") == Shape{1});

  // [2,3] - [3]: out[i, j] = a[i, j] - b[j].
  Tensor a = from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = from_values({10, 20, 30}, {3});
  REQUIRE((a - row).to_host_f64() == std::vector<double>{-9, -18, -27, -6, -15, -24});
  REQUIRE((row - a).to_host_f64() == std::vector<double>{9, 18, 27, 6, 15, 24});
  // [2,1] * [1,3]: outer product.
  Tensor col = from_values({2, 3}, {2, 1});
  Tensor r = from_values({1, 10, 100}, {1, 3});
  Tensor outer = col * r;
  REQUIRE(outer.shape() == Shape{2, 3});
  REQUIRE(outer.to_host_f64() == std::vector<double>{2, 20, 200, 3, 30, 300});
  // [3,1,2] / [2,1] -> [3,2,2]: out[i, j, k] = x[i, 0, k] / y[j, 0].
  Tensor x = from_values({1, 2, 3, 4, 5, 6}, {3, 1, 2});
  Tensor y = from_values({1, 2}, {2, 1});
  Tensor q = x / y;
  REQUIRE(q.shape() == Shape{3, 2, 2});
  std::vector<double> expected;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j)
      for (int k = 0; k < 2; ++k) expected.push_back((i * 2 + k + 1) / static_cast<double>(j + 1));
  REQUIRE(q.to_host_f64() == expected);
  // A 0-d tensor against anything.
  REQUIRE((a * scalar(2)).to_host_f64() == std::vector<double>{2, 4, 6, 8, 10, 12});
  // Non-contiguous operands.
  REQUIRE((a.transpose(0, 1) + from_values({1, 2}, {2})).to_host_f64() ==
          std::vector<double>{2, 6, 3, 7, 4, 8});
}

TEST_CASE("elementwise: large broadcasts, row by row, give the same values at any thread count", "[elementwise][broadcast]") {
  // [40, 30, 70] (336 KB of f32: split among the threads) with a row over everything, a [.., 1]
  // column and a table over the batch, each against a loop over the indices.
  const int64_t B = 40, S = 30, D = 70;
  const auto value = [](int64_t e) { return static_cast<float>(std::sin(0.3 * static_cast<double>(e))); };
  std::vector<double> x(B * S * D), row(D), column(B * S), table(S * D);
  for (size_t e = 0; e < x.size(); ++e) x[e] = value(e);
  for (size_t e = 0; e < row.size(); ++e) row[e] = value(e + 7);
  for (size_t e = 0; e < column.size(); ++e) column[e] = value(e + 11);
  for (size_t e = 0; e < table.size(); ++e) table[e] = value(e + 13);
  const Tensor tx = from_values(x, {B, S, D}, DType::f32), t_row = from_values(row, {D}, DType::f32);
  const Tensor t_column = from_values(column, {B, S, 1}, DType::f32), t_table = from_values(table, {S, D}, DType::f32);
  std::vector<double> plus_row, times_column, minus_table;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t s = 0; s < S; ++s) {
      for (int64_t d = 0; d < D; ++d) {
        const float v = static_cast<float>(x[(b * S + s) * D + d]);
        plus_row.push_back(v + static_cast<float>(row[d]));
        times_column.push_back(v * static_cast<float>(column[b * S + s]));
        minus_table.push_back(v - static_cast<float>(table[s * D + d]));
      }
    }
  }
  tg::testing::at_thread_counts([&] {
    REQUIRE(add(tx, t_row).to_host_f64() == plus_row);
    REQUIRE(mul(tx, t_column).to_host_f64() == times_column);
    REQUIRE(sub(tx, t_table).to_host_f64() == minus_table);
  });
}

TEST_CASE("elementwise: shapes that do not broadcast throw with both shapes", "[elementwise][broadcast][errors]") {
  Tensor a = zeros({2, 3});
  REQUIRE_THROWS_AS(a + zeros({2}), Error);
  REQUIRE_THROWS_WITH(a + zeros({2}), Catch::Contains("[2, 3]") && Catch::Contains("[2]"));
  REQUIRE_THROWS_AS(a * zeros({3, 3}), Error);
  REQUIRE_THROWS_AS(a - zeros({4, 2, 2}), Error);
  REQUIRE_THROWS_AS(a / zeros({3, 2}), Error);
  REQUIRE_THROWS_WITH(mul(a, zeros({3, 2})), Catch::Contains("mul"));
  REQUIRE_THROWS_AS(broadcast_shapes({2, 3}, {2}, "t"), Error);
}

TEST_CASE("elementwise: dtype mismatch throws", "[elementwise][errors]") {
  REQUIRE_THROWS_AS(zeros({2}) + zeros({2}, DType::f64), Error);
  REQUIRE_THROWS_WITH(zeros({2}) * zeros({2}, DType::f64), Catch::Contains("f32") && Catch::Contains("f64"));
  REQUIRE_THROWS_AS(add(zeros({2}), Tensor()), Error);
}

TEST_CASE("elementwise: gradients of binary ops by hand", "[elementwise][grad]") {
  const std::vector<double> av = {1.5, -2, 3}, bv = {2, 4, -0.5};
  Tensor a = from_values(av, {3}, DType::f64).requires_grad_();
  Tensor b = from_values(bv, {3}, DType::f64).requires_grad_();
  SECTION("add") {
    sum(a + b).backward();
    require_close(a.grad().to_host_f64(), {1, 1, 1}, 0);
    require_close(b.grad().to_host_f64(), {1, 1, 1}, 0);
  }
  SECTION("sub") {
    sum(a - b).backward();
    require_close(a.grad().to_host_f64(), {1, 1, 1}, 0);
    require_close(b.grad().to_host_f64(), {-1, -1, -1}, 0);
  }
  SECTION("mul") {
    sum(a * b).backward();
    require_close(a.grad().to_host_f64(), bv, 0);
    require_close(b.grad().to_host_f64(), av, 0);
  }
  SECTION("div") {
    // d(a/b)/da = 1/b, d(a/b)/db = -a/b^2
    sum(a / b).backward();
    require_close(a.grad().to_host_f64(), map(bv, [](double x) { return 1 / x; }), 1e-15);
    std::vector<double> db;
    for (size_t i = 0; i < 3; ++i) db.push_back(-av[i] / (bv[i] * bv[i]));
    require_close(b.grad().to_host_f64(), db, 1e-15);
  }
  SECTION("only one side requires grad") {
    Tensor c = from_values(bv, {3}, DType::f64);
    sum(a * c).backward();
    require_close(a.grad().to_host_f64(), bv, 0);
    REQUIRE_FALSE(c.grad().defined());
  }
}

TEST_CASE("elementwise: gradients of unary ops by hand", "[elementwise][grad]") {
  const std::vector<double> xs = {-1.5, -0.25, 0.5, 2};
  auto grad_of = [&](const std::function<Tensor(const Tensor&)>& op, const std::vector<double>& at) {
    Tensor x = from_values(at, {static_cast<int64_t>(at.size())}, DType::f64).requires_grad_();
    sum(op(x)).backward();
    return x.grad().to_host_f64();
  };
  const std::vector<double> pos = {0.25, 1, 3};
  require_close(grad_of([](const Tensor& x) { return neg(x); }, xs), {-1, -1, -1, -1}, 0);
  require_close(grad_of([](const Tensor& x) { return exp(x); }, xs), map(xs, [](double x) { return std::exp(x); }), 1e-15);
  require_close(grad_of([](const Tensor& x) { return log(x); }, pos), map(pos, [](double x) { return 1 / x; }), 1e-15);
  require_close(grad_of([](const Tensor& x) { return sqrt(x); }, pos),
                map(pos, [](double x) { return 0.5 / std::sqrt(x); }), 1e-15);
  require_close(grad_of([](const Tensor& x) { return tanh(x); }, xs),
                map(xs, [](double x) { return 1 / (std::cosh(x) * std::cosh(x)); }), 1e-14);
  require_close(grad_of([](const Tensor& x) { return sigmoid(x); }, xs),
                map(xs, [](double x) { return std::exp(-x) / ((1 + std::exp(-x)) * (1 + std::exp(-x))); }), 1e-14);
  require_close(grad_of([](const Tensor& x) { return relu(x); }, xs), {0, 0, 1, 1}, 0);
  // d gelu/dx = Phi(x) + x phi(x)
  require_close(grad_of([](const Tensor& x) { return gelu(x); }, xs),
                map(xs, [](double x) {
                  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) +
                         x * std::exp(-0.5 * x * x) / std::sqrt(2 * std::numbers::pi);
                }),
                1e-14);
  require_close(grad_of([](const Tensor& x) { return pow(x, 3.0); }, xs), map(xs, [](double x) { return 3 * x * x; }), 1e-14);
  require_close(grad_of([](const Tensor& x) { return pow(x, -2.0); }, pos),
                map(pos, [](double x) { return -2 / (x * x * x); }), 1e-14);
  require_close(grad_of([](const Tensor& x) { return x * 2.5 + 1.0; }, xs), {2.5, 2.5, 2.5, 2.5}, 0);
  require_close(grad_of([](const Tensor& x) { return 2.0 / x; }, pos), map(pos, [](double x) { return -2 / (x * x); }), 1e-14);
  require_close(grad_of([](const Tensor& x) { return 1.0 - x; }, xs), {-1, -1, -1, -1}, 0);
}

TEST_CASE("elementwise: relu gradient at 0 is 0", "[elementwise][grad]") {
  Tensor x = from_values({0, 0}, {2}).requires_grad_();
  sum(relu(x)).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 0});
}

TEST_CASE("elementwise: broadcast gradients reduce to each input's shape", "[elementwise][grad][broadcast]") {
  // L = sum(a * b) with a [2,3], b [3]: da = b broadcast, db[j] = sum_i a[i, j].
  Tensor a = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = from_values({1, 10, 100}, {3}).requires_grad_();
  sum(a * b).backward();
  REQUIRE(a.grad().to_host_f64() == std::vector<double>{1, 10, 100, 1, 10, 100});
  REQUIRE(b.grad().to_host_f64() == std::vector<double>{5, 7, 9});
  // L = sum(x / y) with x [2,1], y [1,3]: dx[i] = sum_j 1/y[j], dy[j] = -sum_i x[i] / y[j]^2.
  Tensor x = from_values({1, 2}, {2, 1}, DType::f64).requires_grad_();
  Tensor y = from_values({1, 2, 4}, {1, 3}, DType::f64).requires_grad_();
  sum(x / y).backward();
  REQUIRE(x.grad().shape() == Shape{2, 1});
  require_close(x.grad().to_host_f64(), {1.75, 1.75}, 1e-15);
  REQUIRE(y.grad().shape() == Shape{1, 3});
  require_close(y.grad().to_host_f64(), {-3.0, -3.0 / 4, -3.0 / 16}, 1e-15);
}

TEST_CASE("elementwise: sin, cos and abs at hand-computed points and against std::", "[elementwise]") {
  const double pi = std::numbers::pi;
  const Tensor angles = from_values({0, pi / 6, pi / 2, pi, -pi / 2}, {5}, DType::f64);
  require_close(sin(angles).to_host_f64(), {0, 0.5, 1, 0, -1}, 1e-15);
  require_close(cos(angles).to_host_f64(), {1, std::sqrt(3.0) / 2, 0, -1, 0}, 1e-15);
  REQUIRE(abs(from_values({-2.5, 0, 3, -0.0, -7}, {5}, DType::f64)).to_host_f64() ==
          std::vector<double>{2.5, 0, 3, 0, 7});
  check_unary("sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, kInputs);
  check_unary("cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, kInputs);
  check_unary("abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, kInputs);
}

TEST_CASE("elementwise: clamp with both bounds, one bound, crossed bounds and NaN", "[elementwise]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor x = from_values({-inf, -2, -1, -0.5, 0, 0.5, 1, 2, inf, nan}, {10}, DType::f64);
  require_close(clamp(x, -1.0, 1.0).to_host_f64(), {-1, -1, -1, -0.5, 0, 0.5, 1, 1, 1, nan}, 0);
  require_close(clamp(x, -1.0, std::nullopt).to_host_f64(), {-1, -1, -1, -0.5, 0, 0.5, 1, 2, inf, nan}, 0);
  require_close(clamp(x, std::nullopt, 0.5).to_host_f64(), {-inf, -2, -1, -0.5, 0, 0.5, 0.5, 0.5, 0.5, nan}, 0);
  require_close(clamp_min(x, -1.0).to_host_f64(), clamp(x, -1.0, std::nullopt).to_host_f64(), 0);
  require_close(clamp_max(x, 0.5).to_host_f64(), clamp(x, std::nullopt, 0.5).to_host_f64(), 0);
  // min > max: max everywhere (max(x, 2) is at least 2, then min(., -1) is -1), NaN still NaN.
  require_close(clamp(x, 2.0, -1.0).to_host_f64(), {-1, -1, -1, -1, -1, -1, -1, -1, -1, nan}, 0);
  // f32 and a non-contiguous view: the same values.
  const Tensor grid = from_values({-3, 1, 0.25, -0.75, 2, 0.5}, {2, 3}).transpose(0, 1);
  const Tensor clamped = clamp(grid, -1.0, 0.5);
  REQUIRE(clamped.dtype() == DType::f32);
  REQUIRE(clamped.shape() == Shape{3, 2});
  REQUIRE(clamped.to_host_f64() == std::vector<double>{-1, -0.75, 0.5, 0.5, 0.25, 0.5});
}

TEST_CASE("elementwise: sin, cos, abs and clamp in f16 and bf16, computed in f32", "[elementwise][half]") {
  const std::vector<double> xs = {-3.5, -2, -0.7, -0.1, 0, 0.3, 1, 1.9, 3.1};
  // Half an ulp of the result's rounding, relative: 2^-11 for f16, 2^-8 for bf16 (plus margin).
  for (const auto& [dtype, tol] : {std::pair{DType::f16, 1e-3}, std::pair{DType::bf16, 5e-3}}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor x = from_values(xs, {9}, dtype);
    const std::vector<double> rounded = x.to_host_f64();  // the reference starts from these
    REQUIRE(sin(x).dtype() == dtype);
    require_close(sin(x).to_host_f64(), map(rounded, [](double v) { return std::sin(v); }), tol);
    require_close(cos(x).to_host_f64(), map(rounded, [](double v) { return std::cos(v); }), tol);
    // abs and clamp only move values that are already representable: exact.
    REQUIRE(abs(x).to_host_f64() == map(rounded, [](double v) { return std::fabs(v); }));
    REQUIRE(clamp(x, -1.0, 2.0).to_host_f64() ==
            map(rounded, [](double v) { return std::min(std::max(v, -1.0), 2.0); }));
    // The backward runs in the same dtype: d sin = cos at the rounded inputs.
    const Tensor leaf = from_values(xs, {9}, dtype).requires_grad_();
    sum(sin(leaf)).backward();
    REQUIRE(leaf.grad().dtype() == dtype);
    require_close(leaf.grad().to_host_f64(), map(rounded, [](double v) { return std::cos(v); }), tol);
  }
}

TEST_CASE("elementwise: gradients of sin, cos, abs and clamp by hand", "[elementwise][grad]") {
  const std::vector<double> xs = {-2.5, -1.5, -0.25, 0.5, 1.25, 3};
  auto grad_of = [](const std::function<Tensor(const Tensor&)>& op, const std::vector<double>& at) {
    Tensor x = from_values(at, {static_cast<int64_t>(at.size())}, DType::f64).requires_grad_();
    sum(op(x)).backward();
    return x.grad().to_host_f64();
  };
  // d sin = cos, d cos = -sin, d |x| = sign(x)
  require_close(grad_of([](const Tensor& x) { return sin(x); }, xs), map(xs, [](double x) { return std::cos(x); }), 1e-15);
  require_close(grad_of([](const Tensor& x) { return cos(x); }, xs), map(xs, [](double x) { return -std::sin(x); }), 1e-15);
  require_close(grad_of([](const Tensor& x) { return abs(x); }, xs), {-1, -1, -1, 1, 1, 1}, 0);
  // clamp: 1 inside [min, max], 0 outside.
  require_close(grad_of([](const Tensor& x) { return clamp(x, -1.0, 1.0); }, xs), {0, 0, 1, 1, 0, 0}, 0);
  require_close(grad_of([](const Tensor& x) { return clamp(x, -1.0, std::nullopt); }, xs), {0, 0, 1, 1, 1, 1}, 0);
  require_close(grad_of([](const Tensor& x) { return clamp(x, std::nullopt, 1.0); }, xs), {1, 1, 1, 1, 0, 0}, 0);
  require_close(grad_of([](const Tensor& x) { return clamp_min(x, 0.0); }, xs), {0, 0, 0, 1, 1, 1}, 0);
  require_close(grad_of([](const Tensor& x) { return clamp_max(x, 0.0); }, xs), {1, 1, 1, 0, 0, 0}, 0);
  // Chained: d/dx clamp(x, -1, 1) * x = [inside] x + clamp(x, -1, 1).
  require_close(grad_of([](const Tensor& x) { return clamp(x, -1.0, 1.0) * x; }, xs),
                {-1, -1, -0.5, 1, 1, 1}, 1e-15);
}

TEST_CASE("elementwise: gradients at the kinks: abs at 0 is 0, clamp at a bound passes", "[elementwise][grad]") {
  auto grad_of = [](const std::function<Tensor(const Tensor&)>& op, const std::vector<double>& at) {
    Tensor x = from_values(at, {static_cast<int64_t>(at.size())}, DType::f64).requires_grad_();
    sum(op(x)).backward();
    return x.grad().to_host_f64();
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  REQUIRE(grad_of([](const Tensor& x) { return abs(x); }, {0.0, -0.0, 1.0}) == std::vector<double>{0, 0, 1});
  // At min and at max exactly the gradient is 1, as PyTorch's.
  REQUIRE(grad_of([](const Tensor& x) { return clamp(x, -1.0, 1.0); }, {-1, 1, -1.0000001, 1.0000001}) ==
          std::vector<double>{1, 1, 0, 0});
  REQUIRE(grad_of([](const Tensor& x) { return clamp_min(x, 0.5); }, {0.5}) == std::vector<double>{1});
  REQUIRE(grad_of([](const Tensor& x) { return clamp_max(x, 0.5); }, {0.5}) == std::vector<double>{1});
  REQUIRE(grad_of([](const Tensor& x) { return clamp(x, 0.0, 0.0); }, {-1, 0, 1}) == std::vector<double>{0, 1, 0});
  // Crossed bounds: the output is the constant max, so no x passes.
  REQUIRE(grad_of([](const Tensor& x) { return clamp(x, 2.0, -1.0); }, {-3, -1, 0, 2, 3}) ==
          std::vector<double>{0, 0, 0, 0, 0});
  // A NaN input is inside no interval: gradient 0 through clamp; through abs, sign(NaN) is NaN.
  REQUIRE(grad_of([](const Tensor& x) { return clamp(x, -1.0, 1.0); }, {nan}) == std::vector<double>{0});
  REQUIRE(std::isnan(grad_of([](const Tensor& x) { return abs(x); }, {nan})[0]));
}

TEST_CASE("elementwise: integer and bool tensors are refused by the op, naming it and the shapes", "[elementwise][errors]") {
  const Tensor flags = zeros({2, 3}, DType::b8);
  const Tensor counts = from_indices({1, 2, 3}, {3});
  REQUIRE_THROWS_WITH(add(flags, flags), Catch::Contains("op 'add': dtype bool is not supported (f32, f64, f16, bf16)") &&
                                             Catch::Contains("shapes [2, 3] and [2, 3]"));
  REQUIRE_THROWS_WITH(counts - counts, Catch::Contains("op 'sub': dtype i64 is not supported") && Catch::Contains("[3]"));
  REQUIRE_THROWS_WITH(counts * counts, Catch::Contains("op 'mul': dtype i64"));
  REQUIRE_THROWS_WITH(counts / counts, Catch::Contains("op 'div': dtype i64"));
  REQUIRE_THROWS_WITH(equal(counts, counts), Catch::Contains("op 'equal': dtype i64"));
  REQUIRE_THROWS_WITH(counts + 1.0, Catch::Contains("op 'add_scalar': dtype i64 is not supported") &&
                                        Catch::Contains("shape [3]"));
  REQUIRE_THROWS_WITH(exp(counts), Catch::Contains("op 'exp': dtype i64 is not supported (f32, f64, f16, bf16); shape [3]"));
  REQUIRE_THROWS_WITH(log(flags), Catch::Contains("op 'log': dtype bool") && Catch::Contains("[2, 3]"));
  REQUIRE_THROWS_WITH(-counts, Catch::Contains("op 'neg': dtype i64"));
  REQUIRE_THROWS_WITH(relu(counts), Catch::Contains("op 'relu': dtype i64"));
  REQUIRE_THROWS_WITH(sin(counts), Catch::Contains("op 'sin': dtype i64"));
  REQUIRE_THROWS_WITH(cos(flags), Catch::Contains("op 'cos': dtype bool"));
  REQUIRE_THROWS_WITH(abs(counts), Catch::Contains("op 'abs': dtype i64 is not supported"));
  REQUIRE_THROWS_WITH(clamp(counts, 0.0, 2.0), Catch::Contains("op 'clamp': dtype i64"));
  REQUIRE_THROWS_WITH(clamp_max(counts, 2.0), Catch::Contains("op 'clamp_max': dtype i64"));
  REQUIRE_THROWS_WITH(clamp_min(zeros({3}, DType::i8), 2.0), Catch::Contains("op 'clamp_min': dtype i8"));
  // Mixed floating dtypes stay an error of their own (promoted only under autocast).
  REQUIRE_THROWS_WITH(zeros({2}) + zeros({2}, DType::f64),
                      Catch::Contains("op 'add': dtypes f32 and f64 differ"));
  REQUIRE_THROWS_WITH(sin(Tensor()), Catch::Contains("op 'sin': undefined tensor"));
}

TEST_CASE("elementwise: clamp needs a bound, and no NaN bound", "[elementwise][errors]") {
  const Tensor x = zeros({2, 3});
  REQUIRE_THROWS_WITH(clamp(x, std::nullopt, std::nullopt),
                      Catch::Contains("op 'clamp': give a min, a max or both (shape [2, 3])"));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  REQUIRE_THROWS_WITH(clamp(x, nan, 1.0), Catch::Contains("op 'clamp': a bound is NaN"));
  REQUIRE_THROWS_WITH(clamp_max(x, nan), Catch::Contains("op 'clamp_max': a bound is NaN"));
}
