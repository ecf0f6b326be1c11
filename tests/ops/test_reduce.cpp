// Reductions: sum, mean and max over dims with keepdim, against naive loops; gradients.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/thread_counts.h"

using namespace tg;

namespace {

// x[i, j, k] = values of a [2, 3, 4] tensor: distinct, mixed signs, not monotonic.
double element(int i, int j, int k) { return std::sin(1.0 + i * 12 + j * 4 + k) * 10.0; }

Tensor make_x(DType dtype = DType::f64) {
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v.push_back(element(i, j, k));
  return from_values(v, {2, 3, 4}, dtype);
}

void require_close(const std::vector<double>& got, const std::vector<double>& expected, double tol) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    REQUIRE(std::fabs(got[i] - expected[i]) <= tol * (1.0 + std::fabs(expected[i])));
  }
}

}  // namespace

TEST_CASE("reduce: sum of everything", "[reduce][sum]") {
  Tensor x = make_x();
  double total = 0;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) total += element(i, j, k);
  Tensor s = sum(x);
  REQUIRE(s.shape() == Shape{});
  REQUIRE(s.item() == Approx(total).epsilon(1e-14).margin(1e-12));
  REQUIRE(sum(from_values({1, 2, 3, 4}, {2, 2})).item() == 10.0);
  REQUIRE(sum(scalar(5)).item() == 5.0);
  REQUIRE(sum(zeros({0, 3})).item() == 0.0);
  // keepdim over all dims.
  REQUIRE(sum(x, {}, true).shape() == Shape{1, 1, 1});
  REQUIRE(sum(x, {0, 1, 2}).shape() == Shape{});
}

TEST_CASE("reduce: sum over each dim with and without keepdim", "[reduce][sum]") {
  Tensor x = make_x();
  // dim 0 -> [3, 4]
  std::vector<double> over0, over1, over2, over02;
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k) over0.push_back(element(0, j, k) + element(1, j, k));
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) over1.push_back(element(i, 0, k) + element(i, 1, k) + element(i, 2, k));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 4; ++k) acc += element(i, j, k);
      over2.push_back(acc);
    }
  for (int j = 0; j < 3; ++j) {
    double acc = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) acc += element(i, j, k);
    over02.push_back(acc);
  }
  REQUIRE(sum(x, {0}).shape() == Shape{3, 4});
  REQUIRE(sum(x, {0}, true).shape() == Shape{1, 3, 4});
  require_close(sum(x, {0}).to_host_f64(), over0, 1e-13);
  REQUIRE(sum(x, {1}).shape() == Shape{2, 4});
  REQUIRE(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  require_close(sum(x, {1}, true).to_host_f64(), over1, 1e-13);
  REQUIRE(sum(x, {2}).shape() == Shape{2, 3});
  REQUIRE(sum(x, {-1}, true).shape() == Shape{2, 3, 1});
  require_close(sum(x, {-1}).to_host_f64(), over2, 1e-13);
  REQUIRE(sum(x, {0, 2}).shape() == Shape{3});
  REQUIRE(sum(x, {2, 0}, true).shape() == Shape{1, 3, 1});
  require_close(sum(x, {2, 0}).to_host_f64(), over02, 1e-13);
  require_close(sum(x, {-3, -1}).to_host_f64(), over02, 1e-13);
  // f32 agrees to single precision.
  require_close(sum(make_x(DType::f32), {1}).to_host_f64(), over1, 1e-5);
  // A non-contiguous input: sum over dim 0 of x^T (shape [4, 3, 2]) = sum of x over its dim 2.
  require_close(sum(x.transpose(0, 2), {0}).to_host_f64(),
                [&] {
                  std::vector<double> v;  // [3, 2]: out[j, i] = sum_k x[i, j, k]
                  for (int j = 0; j < 3; ++j)
                    for (int i = 0; i < 2; ++i) v.push_back(over2[i * 3 + j]);
                  return v;
                }(),
                1e-13);
}

TEST_CASE("reduce: a bias gradient's sum over rows, its columns split among threads", "[reduce][sum]") {
  // [n, inner] summed over dim 0 (outer 1): the threads take blocks of columns. Each column's sum
  // runs over the rows in order, so it equals the plain loop's f32 sum bit for bit at any count.
  for (const auto& shape : std::vector<std::pair<int64_t, int64_t>>{{4096, 128}, {700, 37}, {300, 15}, {5, 1}}) {
    const int64_t rows = shape.first, cols = shape.second;  // (the lambda below captures them)
    std::vector<double> values(rows * cols);
    for (size_t e = 0; e < values.size(); ++e) values[e] = std::sin(0.37 * static_cast<double>(e)) * 3.0;
    const Tensor x = from_values(values, {rows, cols}, DType::f32);
    std::vector<double> expected(cols);
    for (int64_t c = 0; c < cols; ++c) {
      float total = 0;  // the same f32 additions in the same order
      for (int64_t r = 0; r < rows; ++r) total += static_cast<float>(values[r * cols + c]);
      expected[c] = total;
    }
    tg::testing::at_thread_counts([&] {
      INFO(rows << " x " << cols);
      REQUIRE(sum(x, {0}).to_host_f64() == expected);
    });
  }
}

TEST_CASE("reduce: sums along contiguous rows, every row length and tail", "[reduce][sum]") {
  // A sum over the last dim (inner 1) runs in eight running sums and a tail: integers, exact in f32
  // in any order, must give their exact sums, for row lengths 1 to 40 and at every thread count.
  for (int64_t n = 1; n <= 40; ++n) {
    const int64_t rows = 300;
    std::vector<double> values(rows * n), expected(rows, 0.0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < n; ++k) {
        values[r * n + k] = static_cast<double>((r * 7 + k * 13) % 19) - 9.0;
        expected[r] += values[r * n + k];
      }
    }
    const Tensor x = from_values(values, {rows, n}, DType::f32);
    tg::testing::at_thread_counts([&] {
      INFO("row length " << n);
      REQUIRE(sum(x, {1}).to_host_f64() == expected);
      require_close(mean(x, {1}).to_host_f64(), [&] {
        std::vector<double> means = expected;
        for (double& m : means) m /= static_cast<double>(n);
        return means;
      }(), 1e-6);
    });
  }
}

TEST_CASE("reduce: sum argument errors", "[reduce][sum][errors]") {
  Tensor x = make_x();
  REQUIRE_THROWS_AS(sum(x, {3}), Error);
  REQUIRE_THROWS_AS(sum(x, {-4}), Error);
  REQUIRE_THROWS_AS(sum(x, {1, 1}), Error);
  REQUIRE_THROWS_AS(sum(x, {1, -2}), Error);  // the same dim twice
  REQUIRE_THROWS_AS(sum(from_indices({1, 2}, {2})), Error);
  REQUIRE_THROWS_AS(sum(from_bools({true}, {1})), Error);
  REQUIRE_THROWS_AS(sum(Tensor()), Error);
}

TEST_CASE("reduce: mean over dims", "[reduce][mean]") {
  Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  REQUIRE(mean(x).shape() == Shape{});
  REQUIRE(mean(x).item() == Approx(3.5));
  REQUIRE(mean(x, {0}).to_host_f64() == std::vector<double>{2.5, 3.5, 4.5});
  REQUIRE(mean(x, {1}, true).shape() == Shape{2, 1});
  REQUIRE(mean(x, {1}, true).to_host_f64() == std::vector<double>{2, 5});
  REQUIRE(mean(x, {-1}).to_host_f64() == std::vector<double>{2, 5});
  REQUIRE(mean(x, {0, 1}, true).shape() == Shape{1, 1});
  REQUIRE(mean(x, {0, 1}, true).item() == Approx(3.5));
  Tensor big = make_x();
  double total = 0;
  for (double v : big.to_host_f64()) total += v;
  REQUIRE(mean(big).item() == Approx(total / 24).margin(1e-13));
  REQUIRE_THROWS_AS(mean(from_indices({1}, {1})), Error);
  REQUIRE_THROWS_AS(mean(x, {2}), Error);
}

TEST_CASE("reduce: max over a dim gives values and first indices", "[reduce][max]") {
  Tensor x = make_x();
  // Naive argmax over dim 1 (first occurrence wins).
  std::vector<double> values;
  std::vector<int64_t> indices;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      int best = 0;
      for (int j = 1; j < 3; ++j)
        if (element(i, j, k) > element(i, best, k)) best = j;
      values.push_back(element(i, best, k));
      indices.push_back(best);
    }
  MaxResult m = max(x, 1);
  REQUIRE(m.values.shape() == Shape{2, 4});
  REQUIRE(m.indices.shape() == Shape{2, 4});
  REQUIRE(m.indices.dtype() == DType::i64);
  REQUIRE(m.values.to_host_f64() == values);
  REQUIRE(m.indices.to_host_i64() == indices);
  MaxResult kept = max(x, 1, true);
  REQUIRE(kept.values.shape() == Shape{2, 1, 4});
  REQUIRE(kept.indices.shape() == Shape{2, 1, 4});
  REQUIRE(kept.values.to_host_f64() == values);
  REQUIRE(kept.indices.to_host_i64() == indices);
  REQUIRE(max(x, -2).indices.to_host_i64() == indices);
}

TEST_CASE("reduce: max by hand, ties, negatives and infinities", "[reduce][max]") {
  Tensor x = from_values({3, 7, 7, 1, -5, -2, -9, -2}, {2, 4});
  MaxResult rows = max(x, 1);
  REQUIRE(rows.values.to_host_f64() == std::vector<double>{7, -2});
  REQUIRE(rows.indices.to_host_i64() == std::vector<int64_t>{1, 1});  // ties: the first one
  MaxResult cols = max(x, 0, true);
  REQUIRE(cols.values.shape() == Shape{1, 4});
  REQUIRE(cols.values.to_host_f64() == std::vector<double>{3, 7, 7, 1});
  REQUIRE(cols.indices.to_host_i64() == std::vector<int64_t>{0, 0, 0, 0});
  const double inf = std::numeric_limits<double>::infinity();
  Tensor y = from_values({-inf, -inf, -1e30}, {3}, DType::f64);
  REQUIRE(max(y, 0).values.item() == -1e30);
  REQUIRE(max(y, 0).indices.item() == 2);
  REQUIRE(max(from_values({-inf, -inf}, {2}, DType::f64), 0).indices.item() == 0);
  // Whole-tensor max.
  Tensor all = max(x);
  REQUIRE(all.shape() == Shape{});
  REQUIRE(all.item() == 7);
  REQUIRE(max(x.transpose(0, 1), 1).values.to_host_f64() == std::vector<double>{3, 7, 7, 1});
}

TEST_CASE("reduce: max errors", "[reduce][max][errors]") {
  REQUIRE_THROWS_AS(max(zeros({0, 3}), 0), Error);
  REQUIRE(max(zeros({0, 3}), 1).values.shape() == Shape{0});
  REQUIRE_THROWS_AS(max(zeros({0})), Error);
  REQUIRE_THROWS_AS(max(zeros({2, 3}), 2), Error);
  REQUIRE_THROWS_AS(max(from_indices({1, 2}, {2}), 0), Error);
}

TEST_CASE("reduce: gradients of sum and mean", "[reduce][grad]") {
  // L = sum(sum(x, {1}) * w) with x [2,3], w [2]: dL/dx[i, j] = w[i].
  Tensor x = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  sum(sum(x, {1}) * from_values({10, 20}, {2})).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{10, 10, 10, 20, 20, 20});
  // keepdim variant with a [2,1] weight.
  x.zero_grad();
  sum(sum(x, {1}, true) * from_values({10, 20}, {2, 1})).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{10, 10, 10, 20, 20, 20});
  // Over dim 0: dL/dx[i, j] = w[j].
  x.zero_grad();
  sum(sum(x, {0}) * from_values({1, 2, 3}, {3})).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 2, 3, 1, 2, 3});
  // Mean over everything: 1 / 6 each.
  x.zero_grad();
  mean(x).backward();
  require_close(x.grad().to_host_f64(), std::vector<double>(6, 1.0 / 6), 1e-7);
  // Mean over dim 1 weighted: dL/dx[i, j] = w[i] / 3.
  x.zero_grad();
  sum(mean(x, {1}) * from_values({3, 6}, {2})).backward();
  require_close(x.grad().to_host_f64(), {1, 1, 1, 2, 2, 2}, 1e-7);
  // Multiple dims of a 3-d tensor: sum over {0, 2} then weight by w[j].
  Tensor y = make_x().requires_grad_();
  sum(sum(y, {0, 2}) * from_values({1, 2, 3}, {3}, DType::f64)).backward();
  const std::vector<double> g = y.grad().to_host_f64();
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) REQUIRE(g[i * 12 + j * 4 + k] == j + 1);
}

TEST_CASE("reduce: gradient of max flows to the first maximum only", "[reduce][grad]") {
  // Row 0 = [3, 7, 7, 1]: max at index 1 (first of the tie); row 1 = [-5, -2, -9, -2]: index 1.
  Tensor x = from_values({3, 7, 7, 1, -5, -2, -9, -2}, {2, 4}).requires_grad_();
  sum(max(x, 1).values * from_values({2, 3}, {2})).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 2, 0, 0, 0, 3, 0, 0});
  x.zero_grad();
  sum(max(x, 0, true).values * from_values({1, 2, 3, 4}, {1, 4})).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{1, 2, 3, 4, 0, 0, 0, 0});
  x.zero_grad();
  max(x).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 1, 0, 0, 0, 0, 0, 0});
  REQUIRE_FALSE(max(x, 1).indices.requires_grad());
}

TEST_CASE("reduce: split_at gives (outer, n, inner)", "[reduce]") {
  const DimSplit s = split_at({2, 3, 4, 5}, 2);
  REQUIRE(s.outer == 6);
  REQUIRE(s.n == 4);
  REQUIRE(s.inner == 5);
  const DimSplit first = split_at({7, 2}, 0);
  REQUIRE(first.outer == 1);
  REQUIRE(first.n == 7);
  REQUIRE(first.inner == 2);
}

TEST_CASE("reduce: the sum of a tensor without elements is 0, with nothing large allocated",
          "[reduce][sum]") {
  // [2^40, 0]: summing the last dim first would allocate [2^40, 1], 4 TiB of partial sums.
  const Tensor none = empty({int64_t{1} << 40, 0}, DType::f64).requires_grad_();
  reset_allocator_stats();
  const int64_t before = allocator_stats().current_bytes;
  Tensor total = sum(none);
  REQUIRE(total.item() == 0.0);
  REQUIRE(sum(none, {0}, true).shape() == Shape{1, 0});  // also empty: nothing to add
  total.backward();
  REQUIRE(none.grad().shape() == none.shape());
  REQUIRE(allocator_stats().peak_bytes - before < 4096);
}

// NaN propagates through max, as in PyTorch: a slice holding a NaN has the max NaN at the index of
// its first NaN, wherever it sits. (A scan by `x[k] > x[arg]` alone skips every NaN but one at
// position 0.) The reference is by hand: the first NaN's index, else the first largest element.
TEST_CASE("reduce: max propagates a NaN at the first, a middle or the last position", "[reduce][max]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : {DType::f32, DType::f64}) {
    for (int64_t n : {1, 2, 7, 8, 9, 33}) {
      for (int64_t inner : {1, 3}) {
        for (const std::vector<int64_t>& nan_at : std::vector<std::vector<int64_t>>{
                 {0}, {n / 2}, {n - 1}, {n - 1, n / 2}, {}}) {
          INFO(dtype_name(dtype) << ", n " << n << ", inner " << inner << ", NaNs " << nan_at.size());
          // x[0, k, i]: distinct numbers, the largest at k = n / 3; NaNs in column inner - 1 only
          std::vector<double> values;
          for (int64_t k = 0; k < n; ++k) {
            for (int64_t i = 0; i < inner; ++i) values.push_back(k == n / 3 ? 10.0 + i : std::cos(k + i));
          }
          for (int64_t k : nan_at) values[k * inner + inner - 1] = nan;
          const MaxResult result = max(from_values(values, {1, n, inner}, dtype), 1);
          const std::vector<double> got = result.values.to_host_f64();
          const std::vector<int64_t> where = result.indices.to_host_i64();
          for (int64_t i = 0; i < inner; ++i) {
            const bool has_nan = !nan_at.empty() && i == inner - 1;
            if (has_nan) {
              REQUIRE(std::isnan(got[i]));
              REQUIRE(where[i] == *std::min_element(nan_at.begin(), nan_at.end()));
            } else {
              REQUIRE(got[i] == static_cast<double>(static_cast<float>(10.0 + i)));
              REQUIRE(where[i] == n / 3);
            }
          }
          // the whole-tensor max of the NaN column
          const Tensor column = from_values(values, {n, inner}, dtype).narrow(1, inner - 1, 1);
          REQUIRE(std::isnan(max(column).item()) == !nan_at.empty());
        }
      }
    }
  }
  // the gradient flows to the first NaN, the element max picked
  Tensor x = from_values({1, nan, 5, nan}, {4}, DType::f64).requires_grad_();
  max(x, 0).values.backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 1, 0, 0});
}
