#include "tapegrad/autograd/rng.h"

#include <atomic>
#include <cmath>
#include <mutex>
#include <numbers>

#include "tapegrad/autograd/kernels.h"

namespace tg {
namespace {

// The generator: one seed for the process, one stream position per thread.
//
// manual_seed(s), from any thread, seeds every thread: each thread's next draw is the first number
// of seed s's stream, as if that thread had called manual_seed(s) itself. The seed is global; the
// offset (how far along the stream a thread has drawn) is the thread's own. Why not one offset
// for all: Philox is counter-based, so a shared offset would only decide which thread gets which
// numbers by who reserves first -- a run's dropout masks would depend on scheduling -- and
// checkpoint's replay (set_rng_state, then a re-run) would have other threads' draws interleave
// with its own. Per thread, every thread's numbers are fixed by the seed and its own calls, and
// the common path (reserve_random) takes no lock.
//
// How a thread notices a new seed: manual_seed bumps a generation count; a thread whose state was
// set under an older generation restarts at (the new seed, offset 0) on its next use.
struct GlobalSeed {
  std::mutex mutex;
  uint64_t seed = 0;                    // guarded by mutex
  std::atomic<uint64_t> generation{0};  // raised (under mutex) by each manual_seed
};

GlobalSeed& global_seed() {
  static GlobalSeed global;
  return global;
}

struct ThreadRng {
  RngState state;           // this thread's (seed, offset)
  uint64_t generation = 0;  // the manual_seed generation `state` follows
};
thread_local ThreadRng thread_rng;
thread_local BatchShard batch_shard;  // count 0: no shard, the whole batch is here

// This thread's state, restarted from the global seed if manual_seed was called since it was set.
RngState& current_state() {
  GlobalSeed& global = global_seed();
  if (thread_rng.generation != global.generation.load(std::memory_order_acquire)) {
    const std::lock_guard<std::mutex> lock(global.mutex);
    thread_rng.state = {global.seed, 0};
    thread_rng.generation = global.generation.load(std::memory_order_relaxed);
  }
  return thread_rng.state;
}

}  // namespace

void philox_uniform_fill(uint64_t seed, uint64_t offset, int64_t first, int64_t count, float* out) {
  uint64_t n = offset + static_cast<uint64_t>(first);  // the stream position of the next number
  const uint64_t end = n + static_cast<uint64_t>(count);
  while (n < end) {
    const auto words = philox_block(seed, n / 4);
    for (uint64_t lane = n % 4; lane < 4 && n < end; ++lane, ++n) *out++ = philox_word_to_unit(words[lane]);
  }
}

void manual_seed(uint64_t seed) {
  GlobalSeed& global = global_seed();
  const std::lock_guard<std::mutex> lock(global.mutex);
  global.seed = seed;
  global.generation.fetch_add(1, std::memory_order_release);
}

RngState rng_state() { return current_state(); }

// This thread's only (checkpoint's replay, gradcheck's repeated draws): other threads keep theirs.
void set_rng_state(RngState state) { current_state() = state; }

uint64_t reserve_random(int64_t count) {
  const BatchShard& shard = batch_shard;
  const bool sharded = shard.count > 0 && shard.count < shard.batch && count > 0 && count % shard.count == 0;
  const int64_t inner = sharded ? count / shard.count : 0;
  const int64_t total = sharded ? inner * shard.batch : count;  // what one process would reserve
  RngState& state = current_state();
  const uint64_t first = state.offset;
  state.offset += static_cast<uint64_t>((total + 3) / 4);
  return 4 * first + static_cast<uint64_t>(sharded ? shard.first * inner : 0);  // a position
}

BatchShardScope::BatchShardScope(BatchShard shard) : previous_(batch_shard) { batch_shard = shard; }
BatchShardScope::~BatchShardScope() { batch_shard = previous_; }

Tensor rand(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "rand");
  Tensor out = empty(shape, dtype, device);
  const uint64_t offset = reserve_random(out.numel());
  kernels(out.device()).uniform(out, current_state().seed, offset);
  return out;
}

Tensor uniform(const Shape& shape, double low, double high, DType dtype, Device device) {
  Tensor unit = rand(shape, DType::f64, kCPU);  // scaled on the host, then moved
  double* values = unit.data_as<double>();
  for (int64_t i = 0; i < unit.numel(); ++i) values[i] = low + (high - low) * values[i];
  return (dtype == DType::f64 ? unit : unit.to(dtype)).to(device);
}

Tensor randn(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "randn");  // a negative or overflowing size, named before it is counted
  const int64_t count = numel(shape);
  const uint64_t offset = reserve_random(2 * count);
  const uint64_t seed = current_state().seed;
  std::vector<double> normals(count);
  for (int64_t i = 0; i < count; ++i) {
    // Box-Muller on a pair of uniforms; 1 - u keeps the logarithm finite.
    const double u1 = 1.0 - philox_uniform(seed, offset, 2 * i);
    const double u2 = philox_uniform(seed, offset, 2 * i + 1);
    normals[i] = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }
  return from_values(normals, shape, dtype, device);
}

}  // namespace tg
