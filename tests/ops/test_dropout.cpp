// dropout: identity in eval, the kept fraction and scale, reproducible masks, errors.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("dropout is the identity in eval mode and for p = 0", "[dropout]") {
  const Tensor x = from_values({1, 2, 3}, {3});
  REQUIRE(dropout(x, 0.5, /*training=*/false).same(x));
  REQUIRE(dropout(x, 0.0, /*training=*/true).same(x));
}

TEST_CASE("dropout keeps about 1 - p of the elements, scaled by 1 / (1 - p)", "[dropout]") {
  manual_seed(42);
  const double p = 0.3;
  const Tensor y = dropout(ones({100000}), p, true);
  int64_t kept = 0;
  for (double v : y.to_host_f64()) {
    if (v == 0) continue;
    ++kept;
    REQUIRE(v == Approx(1.0 / (1.0 - p)));
  }
  REQUIRE(static_cast<double>(kept) / 100000 == Approx(1 - p).margin(0.01));
}

TEST_CASE("dropout masks repeat for the same seed and offset", "[dropout]") {
  const Tensor x = ones({64}, DType::f64);
  manual_seed(5);
  const RngState start = rng_state();
  const auto first = dropout(x, 0.5, true).to_host_f64();
  const auto second = dropout(x, 0.5, true).to_host_f64();
  REQUIRE(first != second);  // the offset moved on
  set_rng_state(start);
  REQUIRE(dropout(x, 0.5, true).to_host_f64() == first);
  REQUIRE(dropout_mask({64}, 0.5, DType::f64, start.seed, start.offset).to_host_f64() == first);
}

TEST_CASE("dropout backward multiplies by the saved mask", "[dropout]") {
  manual_seed(3);
  Tensor x = from_values({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4}, DType::f64).requires_grad_();
  const Tensor y = dropout(x, 0.25, true);
  sum(y).backward();
  const auto out = y.to_host_f64(), xs = x.detach().to_host_f64(), g = x.grad().to_host_f64();
  for (size_t i = 0; i < g.size(); ++i) REQUIRE(g[i] == Approx(out[i] / xs[i]));
}

TEST_CASE("dropout with p = 1 gives zeros and zero gradient", "[dropout]") {
  Tensor x = from_values({1, 2, 3}, {3}).requires_grad_();
  const Tensor y = dropout(x, 1.0, true);
  REQUIRE(y.to_host_f64() == std::vector<double>{0, 0, 0});
  sum(y).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{0, 0, 0});
}

TEST_CASE("dropout rejects p outside (0, 1)", "[dropout]") {
  REQUIRE_THROWS_AS(dropout(ones({3}), -0.1, true), tg::Error);
  REQUIRE_THROWS_AS(dropout(ones({3}), 1.5, true), tg::Error);
  REQUIRE_THROWS_AS(dropout(ones({3}), 1.5, false), tg::Error);
}
