#include <catch2/catch.hpp>
#include "ops/ops.h"
#include "autograd/tape.h"
using namespace tg;
TEST_CASE("smoke") {
  Tensor a = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = from_values({1, 0, 0, 1, 1, 1}, {3, 2}).requires_grad_();
  Tensor c = sum(matmul(a, b) * 2.0);
  c.backward();
  REQUIRE(c.item() == 2 * (1 + 3 + 2 + 3 + 4 + 6 + 5 + 6));
  REQUIRE(a.grad().values() == std::vector<double>{2, 2, 4, 2, 2, 4});
}
