// warmup_constant: PyTorch's default learning rate (no scheduler), with an optional warm-up.
#include <catch2/catch.hpp>

#include "tapegrad/nn/schedule.h"

using namespace tg;

TEST_CASE("warmup_constant: the base rate at every step, after a linear warm-up", "[optim][schedule]") {
  const WarmupCosine flat = warmup_constant(0.1, 0, 10);
  for (int64_t step : {0, 1, 5, 9, 10, 100}) CHECK(flat.lr_at(step) == 0.1);
  const WarmupCosine warm = warmup_constant(0.1, 4, 10);
  CHECK(warm.lr_at(0) == Approx(0.025));
  CHECK(warm.lr_at(3) == Approx(0.1));
  for (int64_t step : {4, 7, 9, 10}) CHECK(warm.lr_at(step) == Approx(0.1));
}
