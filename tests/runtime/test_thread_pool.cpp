// The CPU kernels' thread pool (runtime/thread_pool.h): every index runs exactly once, in chunks fixed
// by (count, grain, threads); small loops, nested loops and one thread run inline on the caller;
// a body's exception reaches the caller and leaves the pool usable; two user threads may call it
// at once.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iterator>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/runtime/thread_pool.h"
#include "tapegrad/runtime/threads.h"

using tg::cpu::parallel_for;

namespace {

// What one parallel_for did: how often each index ran, the ranges, the threads that ran them.
// Written from several threads, checked afterwards on the test's thread (Catch2 is not
// thread-safe).
struct PoolRecord {
  explicit PoolRecord(int64_t count) : hits(static_cast<size_t>(count)) {}
  std::vector<std::atomic<int>> hits;
  std::mutex mutex;
  std::set<std::pair<int64_t, int64_t>> ranges;
  std::set<std::thread::id> threads;
  std::atomic<bool> bad_range{false};

  void run(int64_t begin, int64_t end) {
    if (begin < 0 || begin >= end || end > static_cast<int64_t>(hits.size())) bad_range = true;
    for (int64_t i = std::max<int64_t>(begin, 0); i < end && i < std::ssize(hits); ++i) ++hits[i];
    const std::lock_guard<std::mutex> guard(mutex);
    ranges.insert({begin, end});
    threads.insert(std::this_thread::get_id());
  }
  bool each_index_once() const {
    for (const std::atomic<int>& hit : hits) {
      if (hit != 1) return false;
    }
    return true;
  }
};

// Runs parallel_for(count, grain) at `threads` threads and returns what it did.
std::unique_ptr<PoolRecord> record_loop(int64_t count, int64_t grain, int threads) {
  tg::set_num_threads(threads);
  auto record = std::make_unique<PoolRecord>(count);
  parallel_for(count, grain, [&](int64_t begin, int64_t end) { record->run(begin, end); });
  return record;
}

// Restores the thread count a test case found.
struct PoolThreadsRestored {
  int before = tg::num_threads();
  ~PoolThreadsRestored() { tg::set_num_threads(before); }
};

}  // namespace

TEST_CASE("thread pool: every index runs exactly once, for many counts, grains and threads",
          "[threads][thread-pool]") {
  PoolThreadsRestored restore;
  for (int threads : {1, 2, 3, 4, 8}) {
    for (int64_t count : {0, 1, 2, 3, 7, 64, 1000, 4097, 100003}) {
      for (int64_t grain : {1, 3, 64, 1000}) {
        INFO(threads << " threads, count " << count << ", grain " << grain);
        const auto record = record_loop(count, grain, threads);
        REQUIRE_FALSE(record->bad_range);
        REQUIRE(record->each_index_once());
        // At most kChunksPerThread chunks a thread, and never more threads than asked for.
        REQUIRE(std::ssize(record->ranges) <= tg::cpu::kChunksPerThread * threads);
        REQUIRE(std::ssize(record->threads) <= threads);
        if (count > 0 && (count <= grain || threads == 1)) {  // inline: one call on the caller
          REQUIRE(record->ranges == std::set<std::pair<int64_t, int64_t>>{{0, count}});
          REQUIRE(*record->threads.begin() == std::this_thread::get_id());
        }
      }
    }
  }
}

TEST_CASE("thread pool: the chunks depend on count, grain and threads, not on who ran them",
          "[threads][thread-pool]") {
  PoolThreadsRestored restore;
  // 1000 indices, grain 10, 3 threads: 12 chunks (kChunksPerThread a thread) of ceil(1000 / 12).
  const auto first = record_loop(1000, 10, 3);
  REQUIRE(std::ssize(first->ranges) == 12);
  for (const auto& [begin, end] : first->ranges) {
    REQUIRE(begin % 84 == 0);
    REQUIRE(end == std::min<int64_t>(begin + 84, 1000));
  }
  for (int run = 0; run < 20; ++run) REQUIRE(record_loop(1000, 10, 3)->ranges == first->ranges);
  // Few grains: one chunk a grain, at least half a grain each (here 2 of 150).
  REQUIRE(record_loop(300, 200, 8)->ranges ==
          std::set<std::pair<int64_t, int64_t>>{{0, 150}, {150, 300}});
}

TEST_CASE("thread pool: the workers take part, and no more of them than set_num_threads says",
          "[threads][thread-pool]") {
  PoolThreadsRestored restore;
  // Bodies that sleep: a worker has time to wake and claim chunks, even on a busy machine.
  const auto sleepy_loop = [](int threads) {
    tg::set_num_threads(threads);
    auto record = std::make_unique<PoolRecord>(16);
    parallel_for(16, 1, [&](int64_t begin, int64_t end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      record->run(begin, end);
    });
    return record;
  };
  for (int threads : {4, 2, 1, 3}) {  // the count changes between calls
    INFO(threads << " threads");
    const auto record = sleepy_loop(threads);
    REQUIRE(record->each_index_once());
    REQUIRE(std::ssize(record->threads) <= threads);
    if (threads > 1) REQUIRE(record->threads.size() > 1);
  }
}

TEST_CASE("thread pool: a loop inside a body runs inline on that body's thread",
          "[threads][thread-pool]") {
  PoolThreadsRestored restore;
  tg::set_num_threads(4);
  REQUIRE_FALSE(tg::cpu::in_parallel_region());
  std::atomic<bool> nested_ok{true}, region_seen{true};
  PoolRecord outer(64);
  parallel_for(64, 1, [&](int64_t begin, int64_t end) {
    region_seen = region_seen && tg::cpu::in_parallel_region();
    std::vector<std::pair<int64_t, int64_t>> calls;
    const std::thread::id body_thread = std::this_thread::get_id();
    parallel_for(1000, 1, [&](int64_t b, int64_t e) {
      calls.push_back({b, e});
      if (std::this_thread::get_id() != body_thread) nested_ok = false;
    });
    if (calls != std::vector<std::pair<int64_t, int64_t>>{{0, 1000}}) nested_ok = false;
    outer.run(begin, end);
  });
  REQUIRE(nested_ok);
  REQUIRE(region_seen);
  REQUIRE(outer.each_index_once());
  REQUIRE_FALSE(tg::cpu::in_parallel_region());
}

TEST_CASE("thread pool: a body's exception reaches the caller and the pool stays usable",
          "[threads][thread-pool]") {
  PoolThreadsRestored restore;
  for (int threads : {1, 2, 4}) {
    INFO(threads << " threads");
    tg::set_num_threads(threads);
    for (int round = 0; round < 10; ++round) {
      const auto throwing = [](int64_t begin, int64_t end) {
        if (begin <= 500 && 500 < end) tg::fail("index 500 is bad");
      };
      REQUIRE_THROWS_AS(parallel_for(1000, 1, throwing), tg::Error);
      REQUIRE_THROWS_WITH(parallel_for(1000, 1, throwing), "index 500 is bad");
      const auto other = [](int64_t, int64_t) { throw std::out_of_range("every chunk throws"); };
      REQUIRE_THROWS_AS(parallel_for(1000, 1, other), std::out_of_range);
      REQUIRE(record_loop(1000, 1, threads)->each_index_once());  // usable again
    }
  }
}

TEST_CASE("thread pool: two user threads may run loops at once (one inline, or in turn)",
          "[threads][thread-pool]") {
  PoolThreadsRestored restore;
  tg::set_num_threads(3);
  std::atomic<int> failures{0};
  const auto user = [&failures] {
    for (int round = 0; round < 200; ++round) {
      PoolRecord record(5000);
      parallel_for(5000, 50, [&](int64_t begin, int64_t end) { record.run(begin, end); });
      if (record.bad_range || !record.each_index_once()) ++failures;
    }
  };
  std::thread first(user), second(user);
  first.join();
  second.join();
  REQUIRE(failures == 0);
}

TEST_CASE("thread pool: grain_for is the most indices within the inline work, at least 1",
          "[threads][thread-pool]") {
  REQUIRE(tg::cpu::grain_for(1024, 1 << 15) == 32);
  REQUIRE(tg::cpu::grain_for(3, 10) == 3);
  REQUIRE(tg::cpu::grain_for(1 << 20, 1 << 15) == 1);  // one index is already above the threshold
  REQUIRE(tg::cpu::grain_for(0, 1 << 15) == INT64_MAX);  // no work: never split
  // A loop of total work W runs inline exactly when W <= the threshold.
  for (int64_t per_index : {1, 7, 100, 4096}) {
    const int64_t grain = tg::cpu::grain_for(static_cast<double>(per_index), 1 << 15);
    REQUIRE(grain * per_index <= (1 << 15));
    REQUIRE((grain + 1) * per_index > (1 << 15));
  }
}
