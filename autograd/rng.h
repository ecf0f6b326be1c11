#pragma once
// Counter-based random numbers: Philox 4x32-10 keyed by (seed, offset). The same seed and
// offset give the same numbers on every device and on every re-run, which is what dropout on
// two devices and checkpoint recomputation need. Consumers reserve a range of counters.
#include <array>
#include <cstdint>

#include "tapegrad/autograd/philox.h"  // philox4x32, philox_uniform(seed, offset, i)
#include "tapegrad/autograd/tensor.h"

namespace tg {

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // next unused block counter (a block holds 4 numbers)
};

// The generator: one seed for the process, one offset per thread (rng.cpp says why).
// manual_seed(seed), called on any thread, seeds every thread: each thread's next draw starts
// seed's stream at offset 0, so a thread draws the same numbers whichever thread seeded.
// rng_state() and set_rng_state() read and set the calling thread's (seed, offset); another
// thread's stays as it is (until the next manual_seed).
void manual_seed(uint64_t seed);
RngState rng_state();
void set_rng_state(RngState state);
// Reserves the blocks for `count` numbers (4 per block) and returns the stream position of the
// first number to use (4 x the first block's counter; inside a shard, see below), the `offset`
// that philox_uniform, philox_uniform_fill and Kernels::uniform take.
uint64_t reserve_random(int64_t count);

// Data-parallel training numbers randomness by the GLOBAL batch, not by process: inside a
// BatchShardScope, this process computes examples [first, first + count) of a global batch of
// `batch`, and reserve_random(n) for a batch-major tensor of the local batch (n = count x inner)
// reserves the numbers of the whole global tensor (batch x inner, as one process would) and
// returns the position where this shard's numbers start (element first x inner of the global
// tensor, inside a block or not), so every rank draws exactly the numbers the single process
// drew for the same examples. (A count n not divisible by `count` is reserved as is.)
struct BatchShard {
  int64_t batch = 0, first = 0, count = 0;
};
class BatchShardScope {
 public:
  explicit BatchShardScope(BatchShard shard);
  ~BatchShardScope();
  BatchShardScope(const BatchShardScope&) = delete;
  BatchShardScope& operator=(const BatchShardScope&) = delete;

 private:
  BatchShard previous_;
};

// Numbers first .. first+count-1 after position `offset` of the stream of `seed` into out (one
// Philox block per 4 numbers).
void philox_uniform_fill(uint64_t seed, uint64_t offset, int64_t first, int64_t count, float* out);

// Factories drawing from the global generator.
// (The numbers are the same on every device.)
Tensor rand(const Shape& shape, DType dtype = DType::f32, Device device = default_device());  // U[0, 1)
Tensor uniform(const Shape& shape, double low, double high, DType dtype = DType::f32,
               Device device = default_device());
Tensor randn(const Shape& shape, DType dtype = DType::f32,
             Device device = default_device());  // N(0, 1), Box-Muller

}  // namespace tg
