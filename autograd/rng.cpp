#include "autograd/rng.h"

#include <cmath>
#include <numbers>

#include "autograd/kernels.h"

namespace tg {
namespace {
thread_local RngState global_state;
}

std::array<uint32_t, 4> philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key) {
  constexpr uint64_t kMul0 = 0xD2511F53, kMul1 = 0xCD9E8D57;
  constexpr uint32_t kWeyl0 = 0x9E3779B9, kWeyl1 = 0xBB67AE85;
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = kMul0 * counter[0];
    const uint64_t product1 = kMul1 * counter[2];
    counter = {static_cast<uint32_t>(product1 >> 32) ^ counter[1] ^ key[0],
               static_cast<uint32_t>(product1),
               static_cast<uint32_t>(product0 >> 32) ^ counter[3] ^ key[1],
               static_cast<uint32_t>(product0)};
    key[0] += kWeyl0;
    key[1] += kWeyl1;
  }
  return counter;
}

float philox_uniform(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t block = offset + static_cast<uint64_t>(i) / 4;
  const auto words = philox4x32(
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(words[i % 4] >> 8) * 0x1.0p-24f;
}

void philox_uniform_fill(uint64_t seed, uint64_t offset, int64_t first, int64_t count, float* out) {
  const std::array<uint32_t, 2> key{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  int64_t i = first;
  const int64_t end = first + count;
  while (i < end) {
    const uint64_t block = offset + static_cast<uint64_t>(i) / 4;
    const auto words = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0}, key);
    for (int64_t lane = i % 4; lane < 4 && i < end; ++lane, ++i) {
      *out++ = static_cast<float>(words[lane] >> 8) * 0x1.0p-24f;
    }
  }
}

void manual_seed(uint64_t seed) { global_state = {seed, 0}; }
RngState rng_state() { return global_state; }
void set_rng_state(RngState state) { global_state = state; }

uint64_t reserve_random(int64_t count) {
  const uint64_t first = global_state.offset;
  global_state.offset += static_cast<uint64_t>((count + 3) / 4);
  return first;
}

Tensor rand(const Shape& shape, DType dtype) {
  Tensor out = empty(shape, dtype);
  const uint64_t offset = reserve_random(out.numel());
  kernels(out.device()).uniform(out, global_state.seed, offset);
  return out;
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype) {
  Tensor unit = rand(shape, DType::f64);
  double* values = unit.data_as<double>();
  for (int64_t i = 0; i < unit.numel(); ++i) values[i] = low + (high - low) * values[i];
  return dtype == DType::f64 ? unit : unit.to(dtype);
}

Tensor randn(const Shape& shape, DType dtype) {
  const int64_t count = numel(shape);
  const uint64_t offset = reserve_random(2 * count);
  std::vector<double> normals(count);
  for (int64_t i = 0; i < count; ++i) {
    // Box-Muller on a pair of uniforms; 1 - u keeps the logarithm finite.
    const double u1 = 1.0 - philox_uniform(global_state.seed, offset, 2 * i);
    const double u2 = philox_uniform(global_state.seed, offset, 2 * i + 1);
    normals[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  return from_values(normals, shape, dtype);
}

}  // namespace tg
