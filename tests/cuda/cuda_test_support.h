#pragma once
// What the CUDA tests share: the device under test, moving tensors there and back, and comparing
// a CUDA result with the CPU kernel's result on the same inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"

namespace tg::testing {

inline constexpr Device kCuda{DeviceType::cuda, 0};
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline Kernels& cpu_kernels() { return kernels(kCPU); }
inline Kernels& cuda_kernels() { return kernels(kCuda); }

// `count` values uniform in [lo, hi) from a seeded engine: the same numbers on every run.
inline std::vector<double> random_values(int64_t count, uint64_t seed, double lo = -1,
                                         double hi = 1) {
  std::mt19937_64 engine(seed);
  std::uniform_real_distribution<double> uniform(lo, hi);
  std::vector<double> values(static_cast<size_t>(count));
  for (double& value : values) value = uniform(engine);
  return values;
}

// A CPU tensor of such values, rounded to dtype.
inline Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -1,
                            double hi = 1) {
  return from_values(random_values(numel(shape), seed, lo, hi), shape, dtype, kCPU);
}

// Contiguous copies on the CUDA device and on the CPU (also of a tensor already there).
inline Tensor on_cuda(const Tensor& t) { return copy_to_device(t, kCuda); }
inline Tensor on_cpu(const Tensor& t) { return copy_to_device(t, kCPU); }

// Every element of the CUDA tensor equals the CPU one within atol + rtol * |expected| (NaN
// matches NaN, inf matches the same inf).
inline void require_close(const Tensor& cuda_result, const Tensor& cpu_result, double rtol = 0,
                          double atol = 0) {
  REQUIRE(cuda_result.shape() == cpu_result.shape());
  REQUIRE(cuda_result.dtype() == cpu_result.dtype());
  const std::vector<double> got = on_cpu(cuda_result).to_host_f64();
  const std::vector<double> expected = cpu_result.to_host_f64();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      INFO("element " << i);
      REQUIRE(std::isnan(got[i]));
      continue;
    }
    if (std::isinf(expected[i])) {
      INFO("element " << i);
      REQUIRE(got[i] == expected[i]);
      continue;
    }
    INFO("element " << i << ": cuda " << got[i] << ", cpu " << expected[i]);
    REQUIRE(std::abs(got[i] - expected[i]) <= atol + rtol * std::abs(expected[i]));
  }
}

}  // namespace tg::testing
