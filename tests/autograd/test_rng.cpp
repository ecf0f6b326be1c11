// Philox 4x32-10 against the Random123 known-answer vectors, and the generator built on it.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <future>
#include <thread>
#include <utility>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tensor.h"

using namespace tg;

namespace {

using Words = std::array<uint32_t, 4>;

// Restores the global generator after a test that changes it.
struct RngGuard {
  RngState saved = rng_state();
  ~RngGuard() { set_rng_state(saved); }
};

// The documented uniform mapping: the top 24 bits of word i % 4 of block offset + i / 4, with
// the block number as the low 64 bits of the counter and the seed as the key.
// Number i after stream position `offset` (positions count numbers): word n % 4 of block n / 4.
float expected_uniform(uint64_t seed, uint64_t offset, int64_t i) {
  const uint64_t n = offset + static_cast<uint64_t>(i), block = n / 4;
  const Words words = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return std::ldexp(static_cast<float>(words[n % 4] >> 8), -24);
}

}  // namespace

TEST_CASE("rng: philox4x32-10 known-answer vectors (Random123 kat_vectors)", "[rng][philox]") {
  SECTION("zero counter, zero key") {
    REQUIRE(philox4x32({0, 0, 0, 0}, {0, 0}) == Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  }
  SECTION("all-ones counter and key") {
    REQUIRE(philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
            Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  }
  SECTION("pi digits counter and key") {
    REQUIRE(philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
            Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  }
}

TEST_CASE("rng: philox is a pure function of counter and key", "[rng][philox]") {
  const Words a = philox4x32({1, 2, 3, 4}, {5, 6});
  REQUIRE(philox4x32({1, 2, 3, 4}, {5, 6}) == a);
  // Changing one bit of the counter or the key changes the output.
  REQUIRE(philox4x32({0, 2, 3, 4}, {5, 6}) != a);
  REQUIRE(philox4x32({1, 2, 3, 4}, {5, 7}) != a);
  REQUIRE(philox4x32({1, 2, 3, 5}, {5, 6}) != a);
}

TEST_CASE("rng: philox_uniform maps the documented words to (0, 1)", "[rng]") {
  for (uint64_t seed : {0ull, 42ull, 0x123456789abcdefull}) {
    for (uint64_t offset : {0ull, 7ull, (1ull << 32) + 3}) {
      for (int64_t i = 0; i < 12; ++i) {
        const float u = philox_uniform(seed, offset, i);
        REQUIRE(u == expected_uniform(seed, offset, i));
        REQUIRE(u >= 0.0f);
        REQUIRE(u < 1.0f);
      }
    }
  }
  // With seed 0 and offset 0, number 0 is the top 24 bits of 0x6627e8d5 (the zero KAT's first
  // word): 0x6627e8 / 2^24.
  REQUIRE(philox_uniform(0, 0, 0) == static_cast<float>(0x6627e8) / 16777216.0f);
  REQUIRE(philox_uniform(0, 0, 3) == static_cast<float>(0x9b00db) / 16777216.0f);
}

TEST_CASE("rng: manual_seed makes draws reproducible and resets the offset", "[rng]") {
  RngGuard guard;
  manual_seed(1234);
  REQUIRE(rng_state().seed == 1234);
  REQUIRE(rng_state().offset == 0);
  const std::vector<double> first = rand({37}).to_host_f64();
  const std::vector<double> first_normal = randn({11}).to_host_f64();
  manual_seed(1234);
  REQUIRE(rand({37}).to_host_f64() == first);
  REQUIRE(randn({11}).to_host_f64() == first_normal);
  manual_seed(1235);
  REQUIRE(rand({37}).to_host_f64() != first);
}

TEST_CASE("rng: rand draws the stream (seed, offset) element by element", "[rng]") {
  RngGuard guard;
  manual_seed(99);
  rand({5});  // advances the offset by ceil(5 / 4) = 2 blocks
  REQUIRE(rng_state().offset == 2);
  const std::vector<double> values = rand({2, 5}).to_host_f64();
  for (int64_t i = 0; i < 10; ++i) REQUIRE(values[i] == expected_uniform(99, 2 * 4, i));  // block 2
  REQUIRE(rng_state().offset == 2 + 3);  // ceil(10 / 4) = 3
  // f64 output holds the same 24-bit numbers.
  manual_seed(99);
  const std::vector<double> as_f64 = rand({5}, DType::f64).to_host_f64();
  for (int64_t i = 0; i < 5; ++i) REQUIRE(as_f64[i] == expected_uniform(99, 0, i));
}

TEST_CASE("rng: reserve_random advances the offset in blocks of four", "[rng]") {
  RngGuard guard;
  manual_seed(7);
  // It returns the stream position (in numbers) of the first block it reserved: 4 x the block.
  REQUIRE(reserve_random(1) == 0);
  REQUIRE(rng_state().offset == 1);
  REQUIRE(reserve_random(4) == 4);
  REQUIRE(rng_state().offset == 2);
  REQUIRE(reserve_random(5) == 8);
  REQUIRE(rng_state().offset == 4);
  REQUIRE(reserve_random(0) == 16);
  REQUIRE(rng_state().offset == 4);
  REQUIRE(reserve_random(8) == 16);
  REQUIRE(rng_state().offset == 6);
  // randn uses two uniforms per number: 10 normals reserve ceil(20 / 4) = 5 blocks.
  randn({10});
  REQUIRE(rng_state().offset == 11);
}

TEST_CASE("rng: set_rng_state replays the same numbers", "[rng]") {
  RngGuard guard;
  manual_seed(5);
  rand({3});
  const RngState saved = rng_state();
  const std::vector<double> a = rand({9}).to_host_f64();
  const std::vector<double> b = randn({4}).to_host_f64();
  set_rng_state(saved);
  REQUIRE(rand({9}).to_host_f64() == a);
  REQUIRE(randn({4}).to_host_f64() == b);
  // Consecutive draws do not overlap: the second rand of the same size differs.
  set_rng_state(saved);
  rand({9});
  REQUIRE(rand({9}).to_host_f64() != a);
}

TEST_CASE("rng: rand is in (0, 1) with a uniform mean and variance", "[rng][stats]") {
  RngGuard guard;
  manual_seed(2024);
  const int64_t n = 100000;
  const std::vector<double> v = rand({n}).to_host_f64();
  double sum = 0, sum_sq = 0;
  int64_t low_half = 0;
  for (double x : v) {
    REQUIRE(x >= 0.0);
    REQUIRE(x < 1.0);
    sum += x;
    sum_sq += x * x;
    low_half += x < 0.5;
  }
  const double mean = sum / n;
  const double variance = sum_sq / n - mean * mean;
  // Uniform: mean 1/2 (std error ~0.0009), variance 1/12 ~ 0.0833.
  REQUIRE(mean == Approx(0.5).margin(0.01));
  REQUIRE(variance == Approx(1.0 / 12).margin(0.005));
  REQUIRE(static_cast<double>(low_half) / n == Approx(0.5).margin(0.01));
}

TEST_CASE("rng: uniform(low, high) scales into the interval", "[rng]") {
  RngGuard guard;
  manual_seed(3);
  const std::vector<double> v = uniform({1000}, -2.0, 3.0).to_host_f64();
  double sum = 0;
  for (double x : v) {
    REQUIRE(x >= -2.0);
    REQUIRE(x < 3.0);
    sum += x;
  }
  REQUIRE(sum / 1000 == Approx(0.5).margin(0.25));
  REQUIRE(uniform({4}, 0, 1, DType::f64).dtype() == DType::f64);
}

TEST_CASE("rng: randn has mean ~0 and std ~1 on 100k samples", "[rng][stats]") {
  RngGuard guard;
  manual_seed(77);
  const int64_t n = 100000;
  Tensor t = randn({n});
  REQUIRE(t.dtype() == DType::f32);
  REQUIRE(t.shape() == Shape{n});
  const std::vector<double> v = t.to_host_f64();
  double sum = 0, sum_sq = 0;
  int64_t within_one = 0;
  for (double x : v) {
    REQUIRE(std::isfinite(x));
    sum += x;
    sum_sq += x * x;
    within_one += std::fabs(x) < 1.0;
  }
  const double mean = sum / n;
  const double stddev = std::sqrt(sum_sq / n - mean * mean);
  REQUIRE(mean == Approx(0.0).margin(0.02));
  REQUIRE(stddev == Approx(1.0).margin(0.02));
  // About 68.27% of a standard normal lies within one standard deviation.
  REQUIRE(static_cast<double>(within_one) / n == Approx(0.6827).margin(0.01));
  REQUIRE(randn({3}, DType::f64).dtype() == DType::f64);
}

TEST_CASE("rng: a batch shard reserves the global batch and starts at its own rows", "[rng]") {
  RngGuard guard;
  // One process: dropout on a [4, 6] tensor takes numbers 0..23 of blocks 0..5.
  manual_seed(3);
  const Tensor whole = rand({4, 6});
  const std::vector<double> expected = whole.to_host_f64();
  const uint64_t after = rng_state().offset;
  // Rows 2..3 of the same batch, as rank 1 of 2 computes them: numbers 12..23, the same offset after.
  manual_seed(3);
  {
    const BatchShardScope shard({.batch = 4, .first = 2, .count = 2});
    const uint64_t first = reserve_random(2 * 6);
    REQUIRE(first == 12);  // element 12, the first of block 3
    REQUIRE(rng_state().offset == after);
    const Tensor rows = rand({2, 6});  // the next reservation: a second tensor, same rule
    REQUIRE(rng_state().offset == 2 * after);
    (void)rows;
  }
  manual_seed(3);
  {
    const BatchShardScope shard({.batch = 4, .first = 2, .count = 2});
    const std::vector<double> rows = rand({2, 6}).to_host_f64();
    for (int64_t i = 0; i < 12; ++i) REQUIRE(rows[i] == expected[12 + i]);
  }
  // Outside the scope, reservations are plain again.
  manual_seed(3);
  REQUIRE(reserve_random(12) == 0);
  REQUIRE(rng_state().offset == 3);
}

TEST_CASE("rng: a shard whose rows start inside a Philox block draws the single process's numbers", "[rng]") {
  RngGuard guard;
  // [5, 3] per example: a rank's first row starts at element 3 first, a multiple of 4 only
  // when 4 divides first. Every shard of a batch of 5 must read the numbers of its own rows.
  manual_seed(11);
  const std::vector<double> whole = rand({5, 3}).to_host_f64();
  const RngState after = rng_state();
  for (const auto& [first, count] : std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 1}, {1, 2}, {2, 3}, {3, 2}, {4, 1}}) {
    INFO("rows " << first << " .. " << first + count - 1);
    manual_seed(11);
    const BatchShardScope shard({.batch = 5, .first = first, .count = count});
    const std::vector<double> rows = rand({count, 3}).to_host_f64();
    for (int64_t i = 0; i < count * 3; ++i) REQUIRE(rows[i] == whole[first * 3 + i]);
    REQUIRE(rng_state().offset == after.offset);  // the whole batch's blocks, as one process
  }
}

// manual_seed seeds the process, not only the calling thread: a thread's draws after it are the
// seeded stream from its start, whichever thread called it, and a thread that moves its own
// state (set_rng_state, as checkpoint's replay does) leaves the others' as they are.
TEST_CASE("rng: manual_seed on one thread seeds the draws of another", "[rng][threads]") {
  const auto draws_of_seed = [](uint64_t seed) {  // the reference: the stream by hand
    std::vector<double> expected;
    for (int64_t i = 0; i < 8; ++i) expected.push_back(expected_uniform(seed, 0, i));
    return expected;
  };
  RngGuard guard;
  manual_seed(1234);
  std::vector<double> on_thread;
  RngState thread_state_after;
  std::thread worker([&] {
    on_thread = rand({8}, DType::f64).to_host_f64();
    set_rng_state({99, 5});  // its own state only
    thread_state_after = rng_state();
  });
  worker.join();
  REQUIRE(on_thread == draws_of_seed(1234));
  REQUIRE(thread_state_after.seed == 99);
  REQUIRE(rng_state().seed == 1234);  // this thread's: untouched by the worker's set_rng_state
  REQUIRE(rng_state().offset == 0);
  REQUIRE(rand({8}, DType::f64).to_host_f64() == draws_of_seed(1234));
  // a thread started before the seed, drawing after it, draws the new seed's stream too
  std::promise<void> drawn, seeded;
  std::vector<double> late;
  std::thread waiting([&, ready = seeded.get_future()]() mutable {
    rand({3});  // its state moved on before the seed below
    drawn.set_value();
    ready.wait();
    late = rand({8}, DType::f64).to_host_f64();
  });
  drawn.get_future().wait();
  manual_seed(77);
  seeded.set_value();
  waiting.join();
  REQUIRE(late == draws_of_seed(77));
}
