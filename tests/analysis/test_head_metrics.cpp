// The head metrics on hand-built weights whose entropy, distance and fixed-position weights are
// known in closed form.
#include <catch2/catch.hpp>

#include <cmath>

#include "tapegrad/ops/ops.h"
#include "tapegrad/analysis/head_metrics.h"

using namespace tg;

namespace {

// [heads, S, S] from rows built by fill(h, i, j).
template <typename Fill>
Tensor weights_of(int64_t heads, int64_t seq, Fill fill) {
  std::vector<double> values;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < seq; ++i)
      for (int64_t j = 0; j < seq; ++j) values.push_back(fill(h, i, j));
  return from_values(values, {heads, seq, seq});
}

}  // namespace

TEST_CASE("head metrics: a previous-token head and a uniform head", "[head_metrics]") {
  const int64_t S = 4;
  // head 0: all weight on the token before (query 0, which has none, on itself);
  // head 1: uniform over the 4 keys.
  const Tensor w = weights_of(2, S, [](int64_t h, int64_t i, int64_t j) {
    if (h == 1) return 0.25;
    return j == std::max<int64_t>(i - 1, 0) ? 1.0 : 0.0;
  });
  const auto m = analysis::head_metrics(w);
  REQUIRE(m.size() == 2);
  CHECK(m[0].entropy == Approx(0).margin(1e-12));
  CHECK(m[0].distance == Approx(3.0 / 4));  // |i - (i-1)| = 1 for queries 1..3, 0 for query 0
  CHECK(m[0].previous == Approx(1));        // over queries 1..3
  CHECK(m[0].same == Approx(1.0 / 4));      // only query 0
  CHECK(m[0].first == Approx(2.0 / 4));     // queries 0 and 1
  CHECK(m[1].entropy == Approx(std::log(4.0)));
  // mean over i of mean over j of |i - j|: rows 0..3 give 6/4, 4/4, 4/4, 6/4
  CHECK(m[1].distance == Approx(20.0 / 16));
  CHECK(m[1].previous == Approx(0.25));
  CHECK(m[1].same == Approx(0.25));
  CHECK(m[1].first == Approx(0.25));
  // uniform attention is its own baseline
  CHECK(m[1].uniform_entropy == Approx(m[1].entropy));
  CHECK(m[1].uniform_distance == Approx(m[1].distance));
  CHECK(m[0].uniform_entropy == Approx(std::log(4.0)));
}

TEST_CASE("head metrics: padding is never read, and causal baselines see keys j <= i", "[head_metrics]") {
  // 3 real positions of 5; uniform over the 3 real keys, junk in the padded rows and columns.
  const Tensor padded = weights_of(1, 5, [](int64_t, int64_t i, int64_t j) {
    if (i >= 3 || j >= 3) return 7.0;
    return 1.0 / 3;
  });
  const auto m = analysis::head_metrics(padded, 3);
  CHECK(m[0].entropy == Approx(std::log(3.0)));
  CHECK(m[0].distance == Approx((3.0 / 3 + 2.0 / 3 + 3.0 / 3) / 3));
  CHECK(m[0].same == Approx(1.0 / 3));

  // causal uniform: query i spreads over i + 1 keys
  const Tensor causal = weights_of(1, 3, [](int64_t, int64_t i, int64_t j) { return j <= i ? 1.0 / (i + 1) : 0.0; });
  const auto c = analysis::head_metrics(causal, -1, /*causal=*/true);
  const double entropy = (std::log(1.0) + std::log(2.0) + std::log(3.0)) / 3;
  CHECK(c[0].entropy == Approx(entropy));
  CHECK(c[0].uniform_entropy == Approx(entropy));
  CHECK(c[0].distance == Approx((0 + 0.5 + 1.0) / 3));
  CHECK(c[0].uniform_distance == Approx(c[0].distance));
  CHECK(c[0].previous == Approx((0.5 + 1.0 / 3) / 2));
  CHECK(c[0].first == Approx((1 + 0.5 + 1.0 / 3) / 3));
}

TEST_CASE("head metric totals of several sequences average over every real query", "[head_metrics]") {
  const Tensor one_hot_self = weights_of(1, 2, [](int64_t, int64_t i, int64_t j) { return i == j ? 1.0 : 0.0; });
  const Tensor uniform = weights_of(1, 4, [](int64_t, int64_t, int64_t) { return 0.25; });
  analysis::HeadMetricTotals totals = analysis::head_metric_totals(one_hot_self)[0];
  totals += analysis::head_metric_totals(uniform)[0];
  REQUIRE(totals.queries == 6);
  REQUIRE(totals.queries_with_previous == 4);
  const analysis::HeadMetrics mean = totals.mean();
  CHECK(mean.entropy == Approx(4 * std::log(4.0) / 6));
  CHECK(mean.same == Approx((2 + 4 * 0.25) / 6));
  CHECK(mean.previous == Approx((0 + 3 * 0.25) / 4));
}

TEST_CASE("head metrics refuse weights that are not [heads, S, S] and lengths out of range", "[head_metrics]") {
  CHECK_THROWS_WITH(analysis::head_metrics(zeros({2, 3, 4})), Catch::Contains("[heads, S, S]"));
  CHECK_THROWS_WITH(analysis::head_metrics(zeros({1, 3, 3}), 4), Catch::Contains("length 4"));
  CHECK_THROWS_WITH(analysis::head_metrics(zeros({1, 3, 3}), 0), Catch::Contains("length 0"));
}
