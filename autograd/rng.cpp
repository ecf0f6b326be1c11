#include "tapegrad/autograd/rng.h"

#include <cmath>
#include <numbers>

#include "tapegrad/autograd/kernels.h"

namespace tg {
namespace {
thread_local RngState global_state;
thread_local BatchShard batch_shard;  // count 0: no shard, the whole batch is here
}

void philox_uniform_fill(uint64_t seed, uint64_t offset, int64_t first, int64_t count, float* out) {
  uint64_t n = offset + static_cast<uint64_t>(first);  // the stream position of the next number
  const uint64_t end = n + static_cast<uint64_t>(count);
  while (n < end) {
    const auto words = philox_block(seed, n / 4);
    for (uint64_t lane = n % 4; lane < 4 && n < end; ++lane, ++n) *out++ = philox_word_to_unit(words[lane]);
  }
}

void manual_seed(uint64_t seed) { global_state = {seed, 0}; }
RngState rng_state() { return global_state; }
void set_rng_state(RngState state) { global_state = state; }

uint64_t reserve_random(int64_t count) {
  const BatchShard& shard = batch_shard;
  const bool sharded = shard.count > 0 && shard.count < shard.batch && count > 0 && count % shard.count == 0;
  const int64_t inner = sharded ? count / shard.count : 0;
  const int64_t total = sharded ? inner * shard.batch : count;  // what one process would reserve
  const uint64_t first = global_state.offset;
  global_state.offset += static_cast<uint64_t>((total + 3) / 4);
  return 4 * first + static_cast<uint64_t>(sharded ? shard.first * inner : 0);  // a position
}

BatchShardScope::BatchShardScope(BatchShard shard) : previous_(batch_shard) { batch_shard = shard; }
BatchShardScope::~BatchShardScope() { batch_shard = previous_; }

Tensor rand(const Shape& shape, DType dtype, Device device) {
  Tensor out = empty(shape, dtype, device);
  const uint64_t offset = reserve_random(out.numel());
  kernels(out.device()).uniform(out, global_state.seed, offset);
  return out;
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device) {
  Tensor unit = rand(shape, DType::f64, kCPU);  // scaled on the host, then moved
  double* values = unit.data_as<double>();
  for (int64_t i = 0; i < unit.numel(); ++i) values[i] = low + (high - low) * values[i];
  return (dtype == DType::f64 ? unit : unit.to(dtype)).to(device);
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  const int64_t count = numel(shape);
  const uint64_t offset = reserve_random(2 * count);
  std::vector<double> normals(count);
  for (int64_t i = 0; i < count; ++i) {
    // Box-Muller on a pair of uniforms; 1 - u keeps the logarithm finite.
    const double u1 = 1.0 - philox_uniform(global_state.seed, offset, 2 * i);
    const double u2 = philox_uniform(global_state.seed, offset, 2 * i + 1);
    normals[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  return from_values(normals, shape, dtype, device);
}

}  // namespace tg
