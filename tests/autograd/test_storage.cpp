// Allocator counters: exact byte counts for known sizes, peaks, allocation counts, reset.
#include <catch2/catch.hpp>

#include <memory>

#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

TEST_CASE("storage: current bytes are exact for known sizes and dtypes", "[storage]") {
  const int64_t baseline = allocator_stats().current_bytes;
  {
    Tensor a = zeros({10, 10});  // 100 f32 = 400 bytes
    REQUIRE(allocator_stats().current_bytes == baseline + 400);
    Tensor b = zeros({3, 5}, DType::f64);  // 15 * 8 = 120
    REQUIRE(allocator_stats().current_bytes == baseline + 520);
    Tensor c = zeros({7}, DType::f16);  // 14
    Tensor d = zeros({7}, DType::bf16);  // 14
    Tensor e = zeros({2, 2}, DType::i64);  // 32
    Tensor f = zeros({9}, DType::b8);  // 9
    REQUIRE(allocator_stats().current_bytes == baseline + 520 + 14 + 14 + 32 + 9);
    REQUIRE(a.storage()->nbytes() == 400);
    REQUIRE(f.storage()->nbytes() == 9);
    REQUIRE(a.device() == kCPU);
  }
  REQUIRE(allocator_stats().current_bytes == baseline);
}

TEST_CASE("storage: views and copies of handles allocate nothing", "[storage]") {
  Tensor a = zeros({4, 6});
  reset_allocator_stats();
  const AllocatorStats before = allocator_stats();
  {
    Tensor same = a;
    Tensor t = a.transpose(0, 1);
    Tensor v = a.view({24});
    Tensor n = a.narrow(1, 2, 3);
    Tensor e = a.unsqueeze(0).expand({5, 4, 6});
    Tensor d = a.detach();
    REQUIRE(t.storage().get() == a.storage().get());
    REQUIRE(allocator_stats().current_bytes == before.current_bytes);
    REQUIRE(allocator_stats().allocations == 0);
  }
  // contiguous() of a non-contiguous view allocates exactly one copy of 24 f32.
  Tensor copy = a.transpose(0, 1).contiguous();
  REQUIRE(allocator_stats().allocations == 1);
  REQUIRE(allocator_stats().current_bytes == before.current_bytes + 96);
}

TEST_CASE("storage: allocations are counted and peak tracks the maximum", "[storage]") {
  reset_allocator_stats();
  const int64_t start = allocator_stats().current_bytes;
  REQUIRE(allocator_stats().allocations == 0);
  REQUIRE(allocator_stats().peak_bytes == start);
  {
    Tensor a = zeros({10, 10});  // 400
    REQUIRE(allocator_stats().allocations == 1);
    {
      Tensor b = ones({25}, DType::f64);  // 200
      REQUIRE(allocator_stats().allocations == 2);
      REQUIRE(allocator_stats().current_bytes == start + 600);
      REQUIRE(allocator_stats().peak_bytes == start + 600);
    }
    REQUIRE(allocator_stats().current_bytes == start + 400);
    REQUIRE(allocator_stats().peak_bytes == start + 600);  // peak stays
    Tensor c = zeros({50});  // 200: back to 600, not above
    REQUIRE(allocator_stats().peak_bytes == start + 600);
    Tensor d = zeros({1});  // 4: new peak 604
    REQUIRE(allocator_stats().peak_bytes == start + 604);
    REQUIRE(allocator_stats().allocations == 4);
  }
  REQUIRE(allocator_stats().current_bytes == start);
  // Freeing does not count as an allocation.
  REQUIRE(allocator_stats().allocations == 4);
}

TEST_CASE("storage: reset_allocator_stats sets peak to current and zeroes allocations", "[storage]") {
  Tensor keep = zeros({10, 10});
  {
    Tensor big = zeros({1000});  // 4000 bytes, freed below
  }
  reset_allocator_stats();
  AllocatorStats stats = allocator_stats();
  REQUIRE(stats.peak_bytes == stats.current_bytes);
  REQUIRE(stats.allocations == 0);
  {
    Tensor small = zeros({2});  // 8
    stats = allocator_stats();
    REQUIRE(stats.peak_bytes == stats.current_bytes);
    REQUIRE(stats.allocations == 1);
  }
  const int64_t current = allocator_stats().current_bytes;
  REQUIRE(allocator_stats().peak_bytes == current + 8);
  reset_allocator_stats();
  REQUIRE(allocator_stats().peak_bytes == current);
}

TEST_CASE("storage: from_values goes through an f64 staging buffer", "[storage]") {
  reset_allocator_stats();
  const int64_t start = allocator_stats().current_bytes;
  Tensor x = from_values({1, 2, 3, 4}, {4});  // f64 staging (32 bytes), then the f32 result (16)
  REQUIRE(allocator_stats().current_bytes == start + 16);
  REQUIRE(allocator_stats().peak_bytes == start + 48);
  REQUIRE(allocator_stats().allocations == 2);
  Tensor y = from_values({1, 2, 3, 4}, {4}, DType::f64);  // f64 directly: one allocation
  REQUIRE(allocator_stats().allocations == 3);
  REQUIRE(allocator_stats().current_bytes == start + 16 + 32);
}

TEST_CASE("storage: empty tensors count an allocation of zero bytes", "[storage]") {
  reset_allocator_stats();
  const int64_t start = allocator_stats().current_bytes;
  {
    Tensor e = zeros({0, 5});
    REQUIRE(e.numel() == 0);
    REQUIRE(e.storage()->nbytes() == 0);
    REQUIRE(allocator_stats().current_bytes == start);
    REQUIRE(allocator_stats().allocations == 1);
  }
  REQUIRE(allocator_stats().current_bytes == start);
}

TEST_CASE("storage: a Storage object counts its own bytes", "[storage]") {
  const int64_t start = allocator_stats().current_bytes;
  {
    auto storage = std::make_shared<Storage>(1000, kCPU);
    REQUIRE(storage->nbytes() == 1000);
    REQUIRE(storage->data() != nullptr);
    REQUIRE(allocator_stats().current_bytes == start + 1000);
  }
  REQUIRE(allocator_stats().current_bytes == start);
}

TEST_CASE("storage: the version starts at 0 and counts in-place writes for every view",
          "[storage][version]") {
  const Tensor t = zeros({2, 2});
  REQUIRE(t.version() == 0);
  t.storage()->bump_version();
  REQUIRE(t.version() == 1);
  const Tensor view = t.transpose(0, 1);
  view.fill_(3);  // through a view: the one storage's counter
  REQUIRE(t.version() == 2);
  REQUIRE(view.version() == 2);
  REQUIRE(t.clone().version() == 0);  // a copy is a new storage
  REQUIRE(empty({3}).version() == 0);
}
