// apply_rope (nn/rope.h) against rotations computed by hand: the d = 2 angle, the half-split pairs
// of a wider head, relative positions in the scores, preserved pair norms, the backward as the
// inverse rotation, and the errors.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/rope.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

// x [rows, d] with row s at position offset + s, rotated (sign +1) or rotated back (sign -1) on
// the host: pair (c, c + d/2) by the angle sign * position * 10000^(-2c/d).
std::vector<double> rotate_on_host(const std::vector<double>& x, int64_t rows, int64_t d,
                                   int64_t offset, double sign = 1.0) {
  std::vector<double> out(x.size());
  const int64_t half = d / 2;
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t c = 0; c < half; ++c) {
      const double angle = sign * static_cast<double>(offset + s) * std::pow(10000.0, -2.0 * c / d);
      const double a = x[s * d + c], b = x[s * d + c + half];
      out[s * d + c] = a * std::cos(angle) - b * std::sin(angle);
      out[s * d + c + half] = b * std::cos(angle) + a * std::sin(angle);
    }
  }
  return out;
}

// The same vector at every one of `rows` positions: [rows, d].
Tensor repeated(const std::vector<double>& vector, int64_t rows) {
  std::vector<double> values;
  for (int64_t s = 0; s < rows; ++s) values.insert(values.end(), vector.begin(), vector.end());
  return from_values(values, {rows, static_cast<int64_t>(vector.size())}, DType::f64);
}

double dot_rows(const std::vector<double>& a, int64_t i, const std::vector<double>& b, int64_t j,
                int64_t d) {
  double total = 0;
  for (int64_t c = 0; c < d; ++c) total += a[i * d + c] * b[j * d + c];
  return total;
}

}  // namespace

TEST_CASE("rope: d = 2 rotates each row by its position in radians", "[rope]") {
  // d = 2: one pair, frequency 10000^0 = 1, so row s turns by offset + s radians.
  const Tensor x = from_values({1, 0, 0, 1, 3, -2}, {3, 2}, DType::f64);
  const std::vector<double> out = nn::apply_rope(x, /*offset=*/5).to_host_f64();
  const double a5 = 5, a6 = 6, a7 = 7;
  const std::vector<double> expected = {std::cos(a5),
                                        std::sin(a5),  // (1, 0)
                                        -std::sin(a6),
                                        std::cos(a6),                         // (0, 1)
                                        3 * std::cos(a7) + 2 * std::sin(a7),  // (3, -2)
                                        -2 * std::cos(a7) + 3 * std::sin(a7)};
  REQUIRE(out.size() == expected.size());
  for (size_t i = 0; i < out.size(); ++i) REQUIRE(out[i] == Approx(expected[i]).margin(1e-14));
}

TEST_CASE("rope: position 0 is the identity; offset shifts positions", "[rope]") {
  manual_seed(3);
  const Tensor x = uniform({6, 8}, -1, 1, DType::f64);
  const std::vector<double> values = x.to_host_f64();
  const std::vector<double> first_row = nn::apply_rope(x.narrow(0, 0, 1)).to_host_f64();
  for (int64_t c = 0; c < 8; ++c) REQUIRE(first_row[c] == values[c]);
  // Rows 2.. at offset 0 are rows 0.. of the same rows rotated with offset 2.
  const std::vector<double> whole = nn::apply_rope(x).to_host_f64();
  const std::vector<double> tail = nn::apply_rope(x.narrow(0, 2, 4), 2).to_host_f64();
  for (size_t i = 0; i < tail.size(); ++i) REQUIRE(tail[i] == Approx(whole[16 + i]).margin(1e-14));
}

TEST_CASE("rope: half-split pairs of a [B, H, S, d] tensor match the host rotation", "[rope]") {
  manual_seed(5);
  const Tensor x = uniform({2, 3, 7, 8}, -1, 1, DType::f64);
  const std::vector<double> out = nn::apply_rope(x, 4).to_host_f64();
  const std::vector<double> values = x.to_host_f64();
  for (int64_t item = 0; item < 6; ++item) {  // each [S, d] matrix uses the same positions
    const std::vector<double> matrix(values.begin() + item * 56, values.begin() + (item + 1) * 56);
    const std::vector<double> expected = rotate_on_host(matrix, 7, 8, 4);
    for (int64_t i = 0; i < 56; ++i)
      REQUIRE(out[item * 56 + i] == Approx(expected[i]).margin(1e-13));
  }
}

TEST_CASE("rope: the score rope(q at i) . rope(k at j) depends only on i - j", "[rope]") {
  manual_seed(9);
  const int64_t d = 16, rows = 40;
  const std::vector<double> q = uniform({d}, -1, 1, DType::f64).to_host_f64();
  const std::vector<double> k = uniform({d}, -1, 1, DType::f64).to_host_f64();
  const std::vector<double> rq = nn::apply_rope(repeated(q, rows)).to_host_f64();
  const std::vector<double> rk = nn::apply_rope(repeated(k, rows)).to_host_f64();
  const std::vector<double> rk_far =
      nn::apply_rope(repeated(k, rows), /*offset=*/1000).to_host_f64();
  for (int64_t distance : {-5, 0, 3, 17}) {
    const int64_t i0 = std::max<int64_t>(distance, 0);
    const double score = dot_rows(rq, i0, rk, i0 - distance, d);
    for (int64_t i = i0 + 1; i < rows && i - distance < rows; ++i) {
      INFO("i " << i << ", i - j " << distance);
      REQUIRE(dot_rows(rq, i, rk, i - distance, d) == Approx(score).margin(1e-12));
    }
  }
  // Shifting both by the same amount keeps the score: q at 1000 + i, k at 1000 + j.
  const std::vector<double> rq_far = nn::apply_rope(repeated(q, rows), 1000).to_host_f64();
  REQUIRE(dot_rows(rq_far, 9, rk_far, 4, d) == Approx(dot_rows(rq, 9, rk, 4, d)).margin(1e-10));
  // And the scores do vary with the distance (the test would pass trivially otherwise).
  REQUIRE(std::abs(dot_rows(rq, 5, rk, 0, d) - dot_rows(rq, 0, rk, 0, d)) > 1e-3);
}

TEST_CASE("rope: the norm of every pair (c, c + d/2) is preserved", "[rope]") {
  manual_seed(13);
  const int64_t rows = 9, d = 10;
  const Tensor x = uniform({rows, d}, -2, 2, DType::f64);
  const std::vector<double> in = x.to_host_f64();
  const std::vector<double> out = nn::apply_rope(x, 3).to_host_f64();
  for (int64_t s = 0; s < rows; ++s) {
    for (int64_t c = 0; c < d / 2; ++c) {
      const auto pair_norm = [&](const std::vector<double>& t) {
        return std::hypot(t[s * d + c], t[s * d + c + d / 2]);
      };
      REQUIRE(pair_norm(out) == Approx(pair_norm(in)).margin(1e-14));
    }
  }
}

TEST_CASE("rope: the gradient is the upstream gradient rotated back", "[rope]") {
  manual_seed(17);
  const int64_t rows = 5, d = 6;
  Tensor x = uniform({rows, d}, -1, 1, DType::f64).requires_grad_();
  const Tensor upstream = uniform({rows, d}, -1, 1, DType::f64);
  sum(nn::apply_rope(x, 2) * upstream).backward();
  const std::vector<double> expected = rotate_on_host(upstream.to_host_f64(), rows, d, 2, -1.0);
  const std::vector<double> grad = x.grad().to_host_f64();
  for (size_t i = 0; i < grad.size(); ++i) REQUIRE(grad[i] == Approx(expected[i]).margin(1e-14));
}

TEST_CASE("rope: keeps f32 and matches f64", "[rope]") {
  manual_seed(19);
  const Tensor x = uniform({2, 4, 8}, -1, 1, DType::f64);
  const Tensor out32 = nn::apply_rope(x.to(DType::f32), 100);
  REQUIRE(out32.dtype() == DType::f32);
  REQUIRE(out32.shape() == Shape{2, 4, 8});
  const std::vector<double> a = out32.to_host_f64(), b = nn::apply_rope(x, 100).to_host_f64();
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(1e-6));
}

TEST_CASE("rope: an odd head size or a 1-D input is a tg::Error", "[rope]") {
  REQUIRE_THROWS_AS(nn::apply_rope(zeros({3, 5}, DType::f64)), Error);
  REQUIRE_THROWS_WITH(nn::apply_rope(zeros({2, 3, 7})),
                      Catch::Contains("apply_rope") && Catch::Contains("even"));
  REQUIRE_THROWS_WITH(nn::apply_rope(zeros({4})), Catch::Contains("apply_rope"));
}
