// The CUDA int8 kernels (cuda/quantize.cu) against their CPU twins (cpu/quantize.cpp):
// the same bits for the quantized rows and scales, the int32 products and the f32 rescale.
#include <catch2/catch.hpp>

#include <cmath>
#include <utility>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

void require_same(const Tensor& cuda_result, const Tensor& cpu_result) {
  REQUIRE(on_cpu(cuda_result).to_host_f64() == cpu_result.to_host_f64());
}

}  // namespace

TEST_CASE("cuda quantize_rows, gemm_i8 and dequantize_product match the cpu bit for bit", "[cuda]") {
  const int64_t m = 19, n = 11, k = 300;  // ragged against the 16 x 16 tiles
  Tensor x = random_tensor({m, k}, DType::f32, 0x51, -4.0, 4.0);
  std::vector<double> values = x.to_host_f64();
  for (int64_t c = 0; c < k; ++c) values[3 * k + c] = 0;  // a zero row
  values[5] = std::nan("");
  x = from_values(values, {m, k}, DType::f32, kCPU);
  const Tensor w = random_tensor({n, k}, DType::f32, 0x52, -1.0, 1.0);
  const Tensor bias = random_tensor({n}, DType::f32, 0x53, -1.0, 1.0);
  for (const auto& [fixed_scale, levels] : {std::pair{0.0, 127}, {0.02, 127}, {0.0, 63}, {0.04, 63}}) {
    INFO("fixed scale " << fixed_scale << ", levels " << levels);
    Kernels& cpu = kernels(kCPU);
    Kernels& gpu = kernels(kCuda);
    const Tensor q = empty({m, k}, DType::i8, kCPU), s = empty({m}, DType::f32, kCPU);
    const Tensor qw = empty({n, k}, DType::i8, kCPU), sw = empty({n}, DType::f32, kCPU);
    cpu.quantize_rows(x, fixed_scale, levels, q, s);
    cpu.quantize_rows(w, 0, 127, qw, sw);
    const Tensor q_gpu = empty({m, k}, DType::i8, kCuda), s_gpu = empty({m}, DType::f32, kCuda);
    gpu.quantize_rows(on_cuda(x), fixed_scale, levels, q_gpu, s_gpu);
    require_same(q_gpu, q);
    require_same(s_gpu, s);

    const Tensor acc = empty({m, n}, DType::i32, kCPU), acc_gpu = empty({m, n}, DType::i32, kCuda);
    cpu.gemm_i8(q, qw, acc);
    gpu.gemm_i8(on_cuda(q), on_cuda(qw), acc_gpu);
    require_same(acc_gpu, acc);

    for (bool with_bias : {false, true}) {
      const Tensor out = empty({m, n}, DType::f32, kCPU), out_gpu = empty({m, n}, DType::f32, kCuda);
      cpu.dequantize_product(acc, s, sw, with_bias ? bias : Tensor(), out);
      gpu.dequantize_product(acc_gpu, s_gpu, on_cuda(sw), with_bias ? on_cuda(bias) : Tensor(), out_gpu);
      require_same(out_gpu, out);
    }
  }
}
