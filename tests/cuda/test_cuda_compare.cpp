// The comparison ops (ops/compare.h) on the CUDA device against the same ops on the CPU, on the
// same inputs: broadcasting, promotion and a number on either side, logic, the predicates, and
// triu/tril with their gradient. (The kernels alone are held to their CPU twins in
// test_cuda_elementwise.cpp.)
#include <catch2/catch.hpp>

#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/ops/ops.h"
#include "tests/cuda/cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

// Values with ties, zeros of both signs, infinities and NaN.
Tensor specials(const Shape& shape, DType dtype, uint64_t seed) {
  std::vector<double> values = random_values(numel(shape), seed, -2, 2);
  const std::vector<double> special{0.0, -0.0, kInf, -kInf, kNaN, 1.0, -1.0};
  for (size_t i = 0; i < values.size(); i += 2) values[i] = special[(i / 2) % special.size()];
  return from_values(values, shape, dtype, kCPU);
}

}  // namespace

TEST_CASE("cuda compare ops: the same bool tensors as on the CPU", "[cuda][compare]") {
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    INFO("dtype " << dtype_name(dtype));
    const Tensor a = specials({3, 1, 5}, dtype, 1);
    const Tensor b_stored = specials({5, 4}, dtype, 2);
    const Tensor b = b_stored.transpose(0, 1);  // [4, 5], transposed on both devices
    const Tensor a_cuda = on_cuda(a), b_cuda = on_cuda(b_stored).transpose(0, 1);
    require_close(eq(a_cuda, b_cuda), eq(a, b));
    require_close(lt(b_cuda, a_cuda), lt(b, a));
    require_close(a_cuda >= 0.5, a >= 0.5);
    require_close(0.5 != b_cuda, 0.5 != b);
    require_close(logical_and(a_cuda, b_cuda), logical_and(a, b));
    require_close(logical_or(a_cuda, b_cuda), logical_or(a, b));
    require_close(logical_not(a_cuda), logical_not(a));
    require_close(isnan(a_cuda), isnan(a));
    require_close(isinf(b_cuda), isinf(b));
  }
  // Promotion: i64 against f32, and an i64 tensor against a fraction.
  const Tensor counts = from_indices({-2, -1, 0, 1, 2, 3}, {2, 3});
  const Tensor limits = from_values({0.5, -1, 2.5}, {3});
  require_close(lt(on_cuda(counts), on_cuda(limits)), lt(counts, limits));
  require_close(on_cuda(counts) < 0.5, counts < 0.5);
  const Tensor flags = from_bools({true, false, true, true, false, false}, {2, 3});
  require_close(~on_cuda(flags) | (on_cuda(counts) == 0), ~flags | (counts == 0));
}

TEST_CASE("cuda compare ops: triu and tril, and their gradient, as on the CPU", "[cuda][compare]") {
  for (int64_t diagonal : {-2L, 0L, 1L, 4L}) {
    INFO("diagonal " << diagonal);
    const Tensor x = random_tensor({2, 3, 4}, DType::f32, 3);
    require_close(triu(on_cuda(x), diagonal), triu(x, diagonal));
    require_close(tril(on_cuda(x), diagonal), tril(x, diagonal));
    const Tensor counts = from_values(random_values(12, 4, 0, 9), {4, 3}, DType::i64);
    require_close(triu(on_cuda(counts), diagonal), triu(counts, diagonal));
    require_close(tril(on_cuda(counts).transpose(0, 1), diagonal), tril(counts.transpose(0, 1), diagonal));
  }
  const Tensor x = random_tensor({3, 3}, DType::f64, 5).requires_grad_();
  const Tensor x_cuda = on_cuda(x.detach()).requires_grad_();
  sum(triu(x, 1) * x).backward();
  sum(triu(x_cuda, 1) * x_cuda).backward();
  require_close(x_cuda.grad(), x.grad(), 1e-12, 1e-14);
}

TEST_CASE("cuda compare ops: inputs on two devices are refused, naming the op", "[cuda][compare]") {
  const Tensor a = zeros({2});
  REQUIRE_THROWS_WITH(eq(a, on_cuda(a)), Catch::Contains("op 'eq'") && Catch::Contains("cuda"));
  REQUIRE_THROWS_WITH(logical_and(on_cuda(a), a), Catch::Contains("op 'logical_and'"));
}
