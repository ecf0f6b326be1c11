// The pool of runtime/thread_pool.h: the caller publishes a loop in one atomic word, and the caller and
// the workers claim its chunks from that word until none is left.
#include "tapegrad/runtime/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <iterator>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tapegrad/autograd/textbook.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cpu {
namespace {

using PoolClock = std::chrono::steady_clock;
constexpr auto kPoolSpin = std::chrono::microseconds(kSpinMicroseconds);

// Whether this thread is running a body of parallel_for: the caller during its loop, a worker
// always. A loop called from a body runs inline.
thread_local bool pool_in_body = false;

// One pause in a spin loop: tells the core (and its other hyperthread) that this thread waits.
void pool_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// The claim word of a loop: its generation (32 bits), its chunks (16 bits) and the next chunk not
// yet claimed (16 bits). One atomic, so that a thread that read the word of a loop that has since
// ended can never claim a chunk of it (its compare-exchange fails: the generation changed).
constexpr uint64_t pool_claim_word(uint64_t generation, uint64_t chunks) {
  return generation << 32 | chunks << 16;
}
constexpr int64_t pool_word_chunks(uint64_t word) {
  return static_cast<int64_t>(word >> 16 & 0xffff);
}
constexpr int64_t pool_word_next(uint64_t word) { return static_cast<int64_t>(word & 0xffff); }

// The size of the chunks a loop is cut into: about count / grain of them, at most
// kChunksPerThread a thread (at most 4 * kMaxThreads in all: they fit the word's 16 bits).
int64_t pool_chunk_size(int64_t count, int64_t grain, int threads) {
  const int64_t chunks = std::min<int64_t>(kChunksPerThread * threads, (count - 1) / grain + 1);
  return (count - 1) / chunks + 1;
}

class ThreadPool {
 public:
  ~ThreadPool();
  // Runs the loop on the caller and up to threads - 1 workers; false (nothing run) when another
  // user thread has the pool.
  bool try_run(int64_t count, int64_t grain, int threads, detail::LoopBody body);

 private:
  void start_workers(int workers);
  void worker_main(int id);
  void spin_for_loops(int id);
  bool run_claimed_chunks(int id);
  int64_t claim(int id);
  void run_chunk(int64_t chunk);
  void wait_for_chunks(int64_t chunks);

  std::mutex caller_;  // held by the user thread whose loop is published
  std::vector<std::thread> workers_;
  // The published loop: written by its caller before it publishes claim_word_, read by a thread
  // only after it claimed a chunk (the claim's acquire makes the writes visible), and kept until
  // every claimed chunk is done.
  detail::LoopBody body_{};
  int64_t count_ = 0, chunk_size_ = 0, chunks_ = 0;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> claim_word_{0};
  std::atomic<int> wanted_workers_{0};  // workers with a smaller id may take chunks
  std::atomic<uint32_t> done_{0};       // chunks finished (the caller sleeps on it)
  std::atomic<uint32_t> wake_{0};       // bumped at each loop (idle workers sleep on it)
  std::atomic<bool> failed_{false};     // a body threw: skip the chunks not started
  std::exception_ptr error_;            // the first exception, under error_mutex_
  std::mutex error_mutex_;
  std::atomic<bool> stopping_{false};
};

ThreadPool::~ThreadPool() {
  stopping_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

// Starts workers up to `workers`; stops early, quietly, when the system refuses a thread.
void ThreadPool::start_workers(int workers) {
  try {
    while (static_cast<int>(workers_.size()) < workers) {
      const int id = static_cast<int>(workers_.size());
      workers_.emplace_back([this, id] { worker_main(id); });
    }
  } catch (const std::system_error&) {  // fewer threads then; the caller takes their chunks
  }
}

bool ThreadPool::try_run(int64_t count, int64_t grain, int threads, detail::LoopBody body) {
  std::unique_lock<std::mutex> lock(caller_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  start_workers(threads - 1);
  body_ = body;
  count_ = count;
  chunk_size_ = pool_chunk_size(count, grain, threads);
  chunks_ = (count - 1) / chunk_size_ + 1;
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  done_.store(0, std::memory_order_relaxed);
  const int64_t helpers = std::min<int64_t>({threads - 1, chunks_ - 1, std::ssize(workers_)});
  wanted_workers_.store(static_cast<int>(helpers), std::memory_order_relaxed);
  generation_ = (generation_ + 1) & 0xffffffff;
  claim_word_.store(pool_claim_word(generation_, chunks_), std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  pool_in_body = true;
  run_claimed_chunks(-1);
  pool_in_body = false;
  wait_for_chunks(chunks_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return true;
}

// A worker: runs chunks while loops come, spins a little, then sleeps until the next loop.
void ThreadPool::worker_main(int id) {
  pool_in_body = true;
  uint32_t seen = wake_.load(std::memory_order_acquire);
  while (!stopping_.load(std::memory_order_acquire)) {
    if (id < wanted_workers_.load(std::memory_order_relaxed)) spin_for_loops(id);
    wake_.wait(seen, std::memory_order_acquire);  // returns at once if a loop came since `seen`
    seen = wake_.load(std::memory_order_acquire);
  }
}

// Runs the chunks of every loop published until kSpinMicroseconds pass without one.
void ThreadPool::spin_for_loops(int id) {
  PoolClock::time_point deadline = PoolClock::now() + kPoolSpin;
  while (!stopping_.load(std::memory_order_relaxed)) {
    if (run_claimed_chunks(id)) {
      deadline = PoolClock::now() + kPoolSpin;
    } else if (PoolClock::now() >= deadline) {
      return;
    } else {
      pool_pause();
    }
  }
}

// Claims and runs chunks of the published loop until none is left; whether it ran any.
bool ThreadPool::run_claimed_chunks(int id) {
  bool ran = false;
  for (int64_t chunk = claim(id); chunk >= 0; chunk = claim(id)) {
    run_chunk(chunk);
    ran = true;
  }
  return ran;
}

// The index of a chunk this thread now owns, or -1: none left, or worker `id` is not wanted
// (the caller is -1). The word is read before wanted_workers_, so a successful exchange on it
// means the count read belongs to the same loop (the next loop writes it only after this one).
int64_t ThreadPool::claim(int id) {
  uint64_t word = claim_word_.load(std::memory_order_acquire);
  while (pool_word_next(word) < pool_word_chunks(word)) {
    if (id >= wanted_workers_.load(std::memory_order_relaxed)) return -1;
    if (claim_word_.compare_exchange_weak(word, word + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
      return pool_word_next(word);
    }
  }
  return -1;
}

// Runs one claimed chunk (unless a body threw), keeping its exception, and counts it done.
void ThreadPool::run_chunk(int64_t chunk) {
  const int64_t begin = chunk * chunk_size_, end = std::min(count_, begin + chunk_size_);
  const auto chunks = static_cast<uint32_t>(chunks_);  // read now: the next loop may reuse it
  if (!failed_.load(std::memory_order_relaxed)) {
    try {
      body_.call(body_.context, begin, end);
    } catch (...) {
      const std::lock_guard<std::mutex> guard(error_mutex_);
      if (!error_) error_ = std::current_exception();
      failed_.store(true, std::memory_order_relaxed);
    }
  }
  if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) done_.notify_all();
}

// The caller, once nothing is left to claim: waits for the chunks other threads claimed.
void ThreadPool::wait_for_chunks(int64_t chunks) {
  const PoolClock::time_point deadline = PoolClock::now() + kPoolSpin;
  for (uint32_t done = done_.load(std::memory_order_acquire); done < chunks;
       done = done_.load(std::memory_order_acquire)) {
    if (PoolClock::now() < deadline) {
      pool_pause();
    } else {
      done_.wait(done, std::memory_order_acquire);
    }
  }
}

// The process's pool, started on first use and joined at exit.
ThreadPool& the_pool() {
  static ThreadPool pool;
  return pool;
}

}  // namespace

int64_t grain_for(double work_per_index, double inline_work) {
  constexpr int64_t kWhole = std::numeric_limits<int64_t>::max();
  if (!(work_per_index > 0)) return kWhole;  // no work: never worth a thread
  const double grain = std::floor(inline_work / work_per_index);
  if (grain >= 0x1p62) return kWhole;
  return std::max<int64_t>(1, static_cast<int64_t>(grain));
}

bool in_parallel_region() { return pool_in_body; }

namespace detail {

bool runs_inline(int64_t count, int64_t grain) {
  return count <= grain || pool_in_body || num_threads() <= 1 || textbook_mode();
}

void run_on_pool(int64_t count, int64_t grain, LoopBody body) {
  grain = std::max<int64_t>(grain, 1);  // a grain below 1 means 1: one index a chunk at least
  if (!the_pool().try_run(count, grain, num_threads(), body)) body.call(body.context, 0, count);
}

}  // namespace detail
}  // namespace tg::cpu
