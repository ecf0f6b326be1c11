// CUDA optimizer kernels (cuda/optim.cu) against the CPU kernels from identical tensors:
// several SGD steps (plain, momentum, dampening, Nesterov, weight decay) and Adam/AdamW steps,
// the sum of squares behind gradient clipping, and the loss scaler's unscale + inf check.
//
// The updates are compared for exact equality (not within an ulp): both devices compute in IEEE
// f64 with correctly rounded +, -, *, / and sqrt, no fused multiply-adds, and round each stored
// value to the tensor's dtype once. The sum of squares adds in another order (rtol 1e-12).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/runtime/features.h"
#include "tests/cuda/cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

// Element counts: one, a partial block, and several blocks of 256 threads.
const std::vector<Shape> kShapes = {{1}, {3, 7}, {1000}};

// The same parameter (and state) on both devices.
struct Twin {
  Tensor cpu, cuda;
  explicit Twin(const Tensor& start) : cpu(start.clone()), cuda(on_cuda(start)) {}
  void require_equal() const { require_close(cuda, cpu); }
};

struct SgdCase {
  const char* name;
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// Adam's per-step scalars, as Adam::update derives them from the step count.
AdamStep adam_scalars(int64_t step, double lr, double beta1, double beta2, double eps,
                      double weight_decay, bool decoupled) {
  AdamStep s;
  s.lr = lr;
  s.bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  s.bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  s.decay_factor = decoupled ? 1 - lr * weight_decay : 1.0;
  s.l2 = decoupled ? 0.0 : weight_decay;
  return s;
}

}  // namespace

TEST_CASE("cuda sgd steps match the cpu bit for bit", "[cuda]") {
  const std::vector<SgdCase> cases = {
      {"plain", 0.1, 0, 0, 0, false},
      {"weight decay", 0.05, 0, 0, 0.01, false},
      {"momentum", 0.05, 0.9, 0, 0.01, false},
      {"momentum with dampening", 0.03, 0.8, 0.3, 0, false},
      {"nesterov", 0.02, 0.9, 0, 0.001, true},
  };
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const SgdCase& c : cases) {
      for (const Shape& shape : kShapes) {
        INFO("dtype " << dtype_name(dtype) << ", " << c.name << ", shape " << shape_str(shape));
        Twin param(random_tensor(shape, dtype, 1));
        Twin buffer(zeros(shape, dtype));
        for (int step = 0; step < 4; ++step) {
          INFO("step " << step);
          const Tensor grad = random_tensor(shape, dtype, 10 + step);
          SgdStep s;
          s.lr = c.lr;
          s.momentum = c.momentum;
          s.dampening = c.dampening;
          s.weight_decay = c.weight_decay;
          s.nesterov = c.nesterov;
          s.first_step = step == 0;
          const bool momentum = c.momentum != 0;
          cpu_kernels().sgd_step(s, param.cpu, grad, momentum ? buffer.cpu : Tensor());
          cuda_kernels().sgd_step(s, param.cuda, on_cuda(grad), momentum ? buffer.cuda : Tensor());
          param.require_equal();
          buffer.require_equal();
        }
      }
    }
  }
}

TEST_CASE("cuda adam and adamw steps match the cpu bit for bit", "[cuda]") {
  // The CUDA kernel computes each element in f64 as the CPU's plain loop does; the CPU's f32 fast
  // path (cpu/fast/optim_avx2.cpp) is compared with that loop in tests/cpu/fast/test_optim_avx2.cpp.
  const cpu::FastPathsOff plain_loop;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const bool decoupled : {false, true}) {
      for (const double weight_decay : {0.0, 0.1}) {
        for (const Shape& shape : kShapes) {
          INFO("dtype " << dtype_name(dtype) << ", " << (decoupled ? "AdamW" : "Adam")
                        << ", weight_decay " << weight_decay << ", shape " << shape_str(shape));
          Twin param(random_tensor(shape, dtype, 2));
          Twin exp_avg(zeros(shape, dtype)), exp_avg_sq(zeros(shape, dtype));
          for (int64_t step = 1; step <= 5; ++step) {
            INFO("step " << step);
            // Small gradients, as late in training: sqrt(v) is small next to 1.
            const Tensor grad = random_tensor(shape, dtype, 20 + step, -1e-3, 1e-3);
            const AdamStep s = adam_scalars(step, 1e-2, 0.9, 0.999, 1e-8, weight_decay, decoupled);
            cpu_kernels().adam_step(s, param.cpu, grad, exp_avg.cpu, exp_avg_sq.cpu);
            cuda_kernels().adam_step(s, param.cuda, on_cuda(grad), exp_avg.cuda, exp_avg_sq.cuda);
            param.require_equal();
            exp_avg.require_equal();
            exp_avg_sq.require_equal();
          }
        }
      }
    }
  }
}

TEST_CASE("cuda sum of squares accumulates in f64 like the cpu", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64}) {
    INFO("dtype " << dtype_name(dtype));
    Twin total(scalar(1.5, DType::f64));
    for (const Shape& shape : {Shape{1}, Shape{3, 7}, Shape{3000}}) {
      const Tensor x = random_tensor(shape, dtype, 3, -4, 4);
      cpu_kernels().accumulate_sum_of_squares(x, total.cpu);
      cuda_kernels().accumulate_sum_of_squares(on_cuda(x), total.cuda);
      require_close(total.cuda, total.cpu, 1e-12);
    }
    // Several blocks, each adding its share atomically: still the whole sum.
    cuda_kernels().accumulate_sum_of_squares(on_cuda(full({2000}, 0.5, dtype)), total.cuda);
    REQUIRE(on_cpu(total.cuda).item() == Approx(total.cpu.item() + 500).epsilon(1e-12));
  }
}

TEST_CASE("cuda unscale multiplies like the cpu and flags inf and NaN", "[cuda]") {
  // 1 / 3000 is not a power of two: rounding it to f32 first changes the f32 products.
  const double inv_scale = 1.0 / 3000.0;
  for (DType dtype : {DType::f32, DType::f64}) {
    for (const double bad : {0.0, kInf, -kInf, kNaN}) {  // 0: every element finite
      for (const double flag_before : {0.0, 1.0}) {
        INFO("dtype " << dtype_name(dtype) << ", bad element " << bad << ", flag before "
                      << flag_before);
        std::vector<double> values = random_tensor({3000}, DType::f64, 4, -1e4, 1e4).to_host_f64();
        values[2999] = bad == 0.0 ? values[2999] : bad;  // in the last block
        const Tensor grad = from_values(values, {3000}, dtype);
        Twin flag(scalar(flag_before, DType::f32));
        Tensor expected = empty({3000}, dtype);
        cpu_kernels().unscale_and_check(grad, inv_scale, expected, flag.cpu);
        Tensor got = empty({3000}, dtype, kCuda);
        cuda_kernels().unscale_and_check(on_cuda(grad), inv_scale, got, flag.cuda);
        require_close(got, expected);
        flag.require_equal();
        REQUIRE(on_cpu(flag.cuda).item() == (bad == 0.0 ? flag_before : 1.0));
      }
    }
  }
}

// The flag is on the unscaled values, what the optimizer sees: a finite gradient that overflows
// f32 by a large factor (a loss scale backed off to 2^-126 unscales by 2^126) is flagged too.
TEST_CASE("cuda unscale flags a finite gradient that overflows once unscaled, as the cpu does", "[cuda]") {
  const double inv_scale = std::ldexp(1.0, 126);
  const Tensor grad = from_values({1e-30, 8.0, -0.5}, {3}, DType::f32);  // 8 * 2^126 = 2^129
  Twin flag(scalar(0.0, DType::f32));
  Tensor expected = empty({3}, DType::f32);
  cpu_kernels().unscale_and_check(grad, inv_scale, expected, flag.cpu);
  Tensor got = empty({3}, DType::f32, kCuda);
  cuda_kernels().unscale_and_check(on_cuda(grad), inv_scale, got, flag.cuda);
  require_close(got, expected);
  flag.require_equal();
  REQUIRE(flag.cpu.item() == 1.0);
  REQUIRE(std::isinf(expected.to_host_f64()[1]));
}

TEST_CASE("cuda optimizer kernels reject the dtypes the cpu rejects", "[cuda]") {
  const Tensor half = zeros({4}, DType::f16, kCuda);
  const Tensor total = zeros({}, DType::f64, kCuda);
  const Tensor flag = zeros({}, DType::f32, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().sgd_step(SgdStep{}, half, half, Tensor()), Error);
  REQUIRE_THROWS_AS(cuda_kernels().adam_step(AdamStep{}, half, half, half, half), Error);
  REQUIRE_THROWS_AS(cuda_kernels().accumulate_sum_of_squares(half, total), Error);
  REQUIRE_THROWS_AS(cuda_kernels().unscale_and_check(half, 1.0, half, flag), Error);
  // The total must be an f64 scalar, found_inf an f32 one.
  const Tensor x = zeros({4}, DType::f32, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().accumulate_sum_of_squares(x, flag), Error);
  REQUIRE_THROWS_AS(cuda_kernels().unscale_and_check(x, 1.0, x, total), Error);
}
