// tg::Textbook (autograd/textbook.h): the scope counts on every thread; under it the fast paths
// are off, a GEMM gives the bits of the triple loop in cpu/reference.cpp (f32, f64, and f16
// through its f32 product), parallel loops stay on the calling thread, and the attention kernel
// gives the bits of the reference loops, forward and backward, dropout included.
#include <catch2/catch.hpp>

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/cpu/reference.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/thread_pool.h"
#include "tapegrad/runtime/threads.h"

using namespace tg;

namespace {

// C = A B by the reference triple loop, A [m, k] and B [k, n] contiguous, in their dtype.
Tensor textbook_reference_product(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
  const Tensor c = empty({m, n}, a.dtype(), kCPU);
  cpu::reference::gemm({.dtype = a.dtype(), .transpose_a = false, .transpose_b = false, .m = m,
                        .n = n, .k = k, .lda = k, .ldb = n, .ldc = n, .alpha = 1, .beta = 0,
                        .a = a.data(), .b = b.data(), .c = c.data(), .a_offsets = {0},
                        .b_offsets = {0}, .c_offsets = {0}});
  return c;
}

// Restores the thread count a test changed.
struct RestoredThreadCount {
  int before = num_threads();
  ~RestoredThreadCount() { set_num_threads(before); }
};

}  // namespace

TEST_CASE("Textbook: the mode is on while a scope is open, nested or on another thread", "[textbook]") {
  REQUIRE_FALSE(textbook_mode());
  {
    const Textbook outer;
    CHECK(textbook_mode());
    {
      const Textbook inner;
      CHECK(textbook_mode());
    }
    CHECK(textbook_mode());  // the inner scope's end leaves the outer one open
  }
  CHECK_FALSE(textbook_mode());
  std::optional<Textbook> elsewhere;
  std::thread([&] { elsewhere.emplace(); }).join();  // opened on another thread
  CHECK(textbook_mode());
  bool seen_there = false;
  std::thread([&] { seen_there = textbook_mode(); }).join();
  CHECK(seen_there);
  elsewhere.reset();
  CHECK_FALSE(textbook_mode());
}

TEST_CASE("Textbook: the fast paths are off, and a GEMM gives the reference triple loop's bits",
          "[textbook][matmul]") {
  manual_seed(41);
  const Tensor a = uniform({37, 129}, -1, 1, DType::f32, kCPU);
  const Tensor b = uniform({129, 41}, -1, 1, DType::f32, kCPU);
  const std::vector<double> expected = textbook_reference_product(a, b).to_host_f64();
  // Without the scope OpenBLAS sums in f32 register tiles: some of 1517 sums of 129 products
  // round differently from the reference's double sums, so the comparison below can fail.
  CHECK(matmul(a, b).to_host_f64() != expected);
  const Textbook textbook;
  CHECK_FALSE(cpu::fast_paths_enabled());
  CHECK(matmul(a, b).to_host_f64() == expected);
  // A transposed operand goes in as a flag; the loop sums in the same order, so the same bits.
  CHECK(matmul(a, b.transpose(0, 1).contiguous().transpose(0, 1)).to_host_f64() == expected);
  const Tensor a64 = a.to(DType::f64), b64 = b.to(DType::f64);
  CHECK(matmul(a64, b64).to_host_f64() == textbook_reference_product(a64, b64).to_host_f64());
  // f16: converted to f32, multiplied by the loop, rounded once to f16.
  const Tensor a16 = a.to(DType::f16), b16 = b.to(DType::f16);
  const Tensor via_f32 = textbook_reference_product(a16.to(DType::f32), b16.to(DType::f32)).to(DType::f16);
  CHECK(matmul(a16, b16).to_host_f64() == via_f32.to_host_f64());
}

TEST_CASE("Textbook: a parallel loop runs on the calling thread, whatever the thread count",
          "[textbook][threads]") {
  const RestoredThreadCount restore;
  set_num_threads(4);
  const Textbook textbook;
  std::mutex guard;
  std::set<std::thread::id> threads;
  int64_t covered = 0, calls = 0;
  cpu::parallel_for(1 << 20, 1, [&](int64_t begin, int64_t end) {
    const std::lock_guard<std::mutex> lock(guard);
    threads.insert(std::this_thread::get_id());
    covered += end - begin;
    ++calls;
  });
  CHECK(threads == std::set<std::thread::id>{std::this_thread::get_id()});
  CHECK(calls == 1);  // one body(0, count), as at one thread
  CHECK(covered == 1 << 20);
}

TEST_CASE("Textbook: the attention kernel gives the reference loops' bits, forward and backward",
          "[textbook][attention]") {
  manual_seed(42);
  const RestoredThreadCount restore;
  set_num_threads(2);
  const Tensor q = uniform({2, 3, 70, 16}, -1, 1, DType::f32, kCPU).requires_grad_();
  const Tensor k = uniform({2, 3, 70, 16}, -1, 1, DType::f32, kCPU).requires_grad_();
  const Tensor v = uniform({2, 3, 70, 8}, -1, 1, DType::f32, kCPU).requires_grad_();
  const Tensor grad_out = uniform({2, 3, 70, 8}, -1, 1, DType::f32, kCPU);
  const double dropout_p = 0.2;

  const Textbook textbook;
  const RngState before = rng_state();
  const Tensor out = scaled_dot_product_attention(q, k, v, Tensor(), true, dropout_p);
  sum(out * grad_out).backward();

  // The same problem handed to the reference loops, with the op's Philox numbers.
  set_rng_state(before);
  AttentionProblem problem{.q = q.detach(), .k = k.detach(), .v = v.detach(), .scale = 0.25,
                           .causal = true, .dropout_p = dropout_p};
  problem.seed = before.seed;
  problem.offset = reserve_random(2 * 3 * 70 * 70);
  const Tensor expected = empty({2, 3, 70, 8}, DType::f32, kCPU);
  const Tensor lse = empty({6, 70}, DType::f32, kCPU);
  cpu::reference::attention_forward(problem, expected, lse);
  CHECK(out.to_host_f64() == expected.to_host_f64());
  const Tensor dq = zeros(q.shape(), DType::f32, kCPU), dk = zeros(k.shape(), DType::f32, kCPU),
               dv = zeros(v.shape(), DType::f32, kCPU);
  cpu::reference::attention_backward(problem, grad_out, dq, dk, dv);
  CHECK(q.grad().to_host_f64() == dq.to_host_f64());
  CHECK(k.grad().to_host_f64() == dk.to_host_f64());
  CHECK(v.grad().to_host_f64() == dv.to_host_f64());
}
