// The backend seam seen from the tensors: moving between devices (values and gradients), factories
// on a device, per-device allocator counters, and one clear error when an op mixes devices.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "cuda_test_support.h"
#include "tapegrad/ops/ops.h"

namespace tg::testing {

TEST_CASE("cuda seam: to(device) copies values there and back", "[cuda]") {
  const Tensor x = from_values({1.5, -2, 3.25, 4, 5, 6}, {2, 3});
  const Tensor on_gpu = x.to(kCuda);
  REQUIRE(on_gpu.device() == kCuda);
  REQUIRE(on_gpu.to_host_f64() == x.to_host_f64());
  const Tensor transposed_back = on_gpu.transpose(0, 1).cpu();  // strided source
  REQUIRE(transposed_back.device() == kCPU);
  REQUIRE(transposed_back.to_host_f64() == x.transpose(0, 1).contiguous().to_host_f64());
  REQUIRE(x.to(kCPU).same(x));  // already there: the same tensor, as in PyTorch
}

TEST_CASE("cuda seam: gradients flow back through to(device)", "[cuda]") {
  const Tensor x = from_values({1, 2, 3}, {3}).requires_grad_();
  const Tensor y = mul(x.to(kCuda), x.to(kCuda));  // d sum(x^2)/dx = 2x, computed on the GPU
  sum(y).backward();
  REQUIRE(x.grad().device() == kCPU);
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{2, 4, 6});
}

TEST_CASE("cuda seam: factories take a device", "[cuda]") {
  REQUIRE(from_values({1, 2}, {2}, DType::f64, kCuda).device() == kCuda);
  REQUIRE(from_indices({3, 4}, {2}, kCuda).to_host_i64() == std::vector<int64_t>{3, 4});
  REQUIRE(from_bools({true, false}, {2}, kCuda).to_host_f64() == std::vector<double>{1, 0});
  REQUIRE(arange(4, DType::f32, kCuda).to_host_f64() == std::vector<double>{0, 1, 2, 3});
  REQUIRE(zeros({2, 2}, DType::f32, kCuda).to_host_f64() == std::vector<double>(4, 0.0));
  const DefaultDeviceScope scope(kCuda);
  REQUIRE(empty({3}).device() == kCuda);
  manual_seed(7);
  const std::vector<double> on_gpu = rand({5}).to_host_f64();
  manual_seed(7);
  REQUIRE(rand({5}, DType::f32, kCPU).to_host_f64() == on_gpu);  // Philox: the same on both devices
}

TEST_CASE("cuda seam: allocator counters are per device", "[cuda]") {
  reset_allocator_stats(kCPU);
  reset_allocator_stats(kCuda);
  const int64_t cpu_before = allocator_stats(kCPU).current_bytes;
  const int64_t gpu_before = allocator_stats(kCuda).current_bytes;
  {
    const Tensor on_gpu = empty({1000}, DType::f32, kCuda);
    REQUIRE(allocator_stats(kCuda).current_bytes == gpu_before + 4000);
    REQUIRE(allocator_stats(kCPU).current_bytes == cpu_before);
  }
  REQUIRE(allocator_stats(kCuda).current_bytes == gpu_before);
  REQUIRE(allocator_stats(kCuda).peak_bytes >= gpu_before + 4000);
  REQUIRE(allocator_stats(kCuda).allocations == 1);
}

TEST_CASE("cuda seam: an op mixing devices is one clear error", "[cuda]") {
  const Tensor a = ones({2}), b = ones({2}, DType::f32, kCuda);
  REQUIRE_THROWS_WITH(add(a, b), "op 'add': inputs on cpu and cuda:0");
  REQUIRE_THROWS_WITH(matmul(ones({2, 2}), ones({2, 2}, DType::f32, kCuda)),
                      "op 'matmul': inputs on cpu and cuda:0");
  REQUIRE_THROWS_AS(kernels(Device{DeviceType::cuda, 7}), tg::Error);
}

TEST_CASE("cuda seam: targets and indices are checked on the device", "[cuda]") {
  const Tensor logits = zeros({2, 3}, DType::f32, kCuda);
  REQUIRE_THROWS_WITH(cross_entropy(logits, from_indices({0, 3}, {2}, kCuda)),
                      Catch::Contains("target 3 is out of range for 3 classes"));
  REQUIRE_THROWS_WITH(embedding(from_indices({-1}, {1}, kCuda), zeros({4, 2}, DType::f32, kCuda)),
                      Catch::Contains("index -1"));
  // ignore_index rows count for nothing, as on the CPU
  const Tensor loss = cross_entropy(logits, from_indices({2, -100}, {2}, kCuda));
  REQUIRE(loss.item() == Approx(std::log(3.0)));
}

}  // namespace tg::testing
