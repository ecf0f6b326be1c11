// The tape: accumulation, broadcasting, retain_graph, grad mode, memory release, format_tape.
// Expected gradients are derived by hand in the comments next to each check.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/skip.h"

using namespace tg;

namespace {

void require_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  REQUIRE(t.defined());
  const std::vector<double> got = t.to_host_f64();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(expected[i]).margin(tol));
  }
}

}  // namespace

TEST_CASE("tape: matmul, scale and sum give the hand-computed value and gradient", "[tape]") {
  // a = [[1,2,3],[4,5,6]], b = [[1,0],[0,1],[1,1]]
  // a @ b = [[1+3, 2+3], [4+6, 5+6]] = [[4,5],[10,11]]; c = 2 * sum = 2 * 30 = 60.
  // dc/da[i,k] = 2 * sum_j b[k,j] = 2 * [1, 1, 2] for each row.
  // dc/db[k,j] = 2 * sum_i a[i,k] = 2 * [5, 7, 9] repeated over j.
  Tensor a = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = from_values({1, 0, 0, 1, 1, 1}, {3, 2}).requires_grad_();
  Tensor c = sum(matmul(a, b) * 2.0);
  c.backward();
  REQUIRE(c.item() == 60.0);
  require_values(a.grad(), {2, 2, 4, 2, 2, 4});
  require_values(b.grad(), {10, 10, 14, 14, 18, 18});
}

TEST_CASE("tape: fan-out accumulates gradients (y = x*x + x)", "[tape]") {
  // dy/dx = 2x + 1, summed: x = [1, -2, 3] -> [3, -3, 7].
  Tensor x = from_values({1, -2, 3}, {3}).requires_grad_();
  Tensor y = sum(x * x + x);
  REQUIRE(y.item() == Approx((1 + 1) + (4 - 2) + (9 + 3)));
  y.backward();
  require_values(x.grad(), {3, -3, 7});
}

TEST_CASE("tape: fan-out through an intermediate node accumulates before propagating", "[tape]") {
  // h = 3x; y = h*h + h = 9x^2 + 3x; dy/dx = 18x + 3.
  Tensor x = from_values({0.5, 2}, {2}, DType::f64).requires_grad_();
  Tensor h = x * 3.0;
  Tensor y = sum(h * h + h);
  y.backward();
  require_values(x.grad(), {18 * 0.5 + 3, 18 * 2 + 3}, 1e-12);
  // Non-leaf tensors get no .grad.
  REQUIRE_FALSE(h.grad().defined());
}

TEST_CASE("tape: gradients accumulate across backward calls until zero_grad", "[tape]") {
  // y = sum(x^2 * 1.5): dy/dx = 3x.
  Tensor x = from_values({1, 2, -1}, {3}).requires_grad_();
  REQUIRE_FALSE(x.grad().defined());
  sum(x * x * 1.5).backward();
  require_values(x.grad(), {3, 6, -3});
  sum(x * x * 1.5).backward();
  require_values(x.grad(), {6, 12, -6});
  x.zero_grad();
  REQUIRE_FALSE(x.grad().defined());
  sum(x * x * 1.5).backward();
  require_values(x.grad(), {3, 6, -3});
}

TEST_CASE("tape: a stored grad is not changed in place by later accumulation", "[tape]") {
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  sum(x * 2.0).backward();
  Tensor first = x.grad();
  sum(x * 2.0).backward();
  require_values(first, {2, 2});
  require_values(x.grad(), {4, 4});
}

TEST_CASE("tape: broadcast gradient of (2,3) + (3) sums over rows", "[tape][broadcast]") {
  // L = sum((a + b) * w); dL/da = w; dL/db[j] = sum_i w[i, j].
  Tensor a = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor b = from_values({10, 20, 30}, {3}).requires_grad_();
  Tensor w = from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor sum_ab = a + b;
  REQUIRE(sum_ab.shape() == Shape{2, 3});
  require_values(sum_ab, {11, 22, 33, 14, 25, 36});
  sum(sum_ab * w).backward();
  REQUIRE(a.grad().shape() == Shape{2, 3});
  require_values(a.grad(), {1, 2, 3, 4, 5, 6});
  REQUIRE(b.grad().shape() == Shape{3});
  require_values(b.grad(), {1 + 4, 2 + 5, 3 + 6});
}

TEST_CASE("tape: broadcast gradient of (2,1) + (1,3) sums over each broadcast dim", "[tape][broadcast]") {
  // out[i, j] = a[i] + b[j]; L = sum(out * w); dL/da[i] = sum_j w[i,j], dL/db[j] = sum_i w[i,j].
  Tensor a = from_values({1, 2}, {2, 1}).requires_grad_();
  Tensor b = from_values({10, 20, 30}, {1, 3}).requires_grad_();
  Tensor w = from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor out = a + b;
  REQUIRE(out.shape() == Shape{2, 3});
  require_values(out, {11, 21, 31, 12, 22, 32});
  sum(out * w).backward();
  REQUIRE(a.grad().shape() == Shape{2, 1});
  require_values(a.grad(), {6, 15});
  REQUIRE(b.grad().shape() == Shape{1, 3});
  require_values(b.grad(), {5, 7, 9});
}

TEST_CASE("tape: broadcast of a scalar-shaped leaf sums over everything", "[tape][broadcast]") {
  // L = sum(x * s) with s of shape [] -> dL/ds = sum(x) = 10, dL/dx = s = 3.
  Tensor x = from_values({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor s = scalar(3.0).requires_grad_();
  sum(x * s).backward();
  REQUIRE(s.grad().shape() == Shape{});
  REQUIRE(s.grad().item() == Approx(10));
  require_values(x.grad(), {3, 3, 3, 3});
}

TEST_CASE("tape: backward twice without retain_graph throws tg::Error", "[tape][retain]") {
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  Tensor y = sum(x * x);
  y.backward();
  require_values(x.grad(), {2, 4});
  REQUIRE_THROWS_AS(y.backward(), Error);
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("retain_graph"));
}

TEST_CASE("tape: retain_graph=true allows a second backward and the grads double", "[tape][retain]") {
  // y = sum(x^3): dy/dx = 3x^2 = [3, 12]; twice: [6, 24].
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  Tensor y = sum(x * x * x);
  y.backward(Tensor(), /*retain_graph=*/true);
  require_values(x.grad(), {3, 12});
  y.backward(Tensor(), /*retain_graph=*/true);
  require_values(x.grad(), {6, 24});
  // A third time without retain still works (the graph was retained), then it is released.
  y.backward();
  require_values(x.grad(), {9, 36});
  REQUIRE_THROWS_AS(y.backward(), Error);
}

TEST_CASE("tape: backward of a non-scalar needs a gradient", "[tape][errors]") {
  Tensor x = from_values({1, 2, 3}, {3}).requires_grad_();
  Tensor y = x * 2.0;
  REQUIRE_THROWS_AS(y.backward(), Error);
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("[3]"));
  // With a gradient of the right shape it works: dL/dx = 2 * g.
  y.backward(from_values({1, 10, 100}, {3}));
  require_values(x.grad(), {2, 20, 200});
}

TEST_CASE("tape: backward with a gradient of the wrong shape or dtype throws", "[tape][errors]") {
  Tensor x = from_values({1, 2, 3, 4}, {2, 2}).requires_grad_();
  Tensor y = x * 2.0;
  REQUIRE_THROWS_AS(y.backward(ones({4})), Error);
  REQUIRE_THROWS_AS(y.backward(ones({2, 2, 1})), Error);
  REQUIRE_THROWS_AS(y.backward(ones({2, 2}, DType::f64)), Error);
  // The failed calls did not consume the graph.
  y.backward(ones({2, 2}));
  require_values(x.grad(), {2, 2, 2, 2});
}

TEST_CASE("tape: backward of a tensor that does not require grad throws", "[tape][errors]") {
  Tensor x = from_values({1, 2}, {2});
  REQUIRE_THROWS_AS(sum(x).backward(), Error);
  REQUIRE_THROWS_AS(Tensor().backward(), Error);
}

TEST_CASE("tape: backward of a leaf accumulates the seed into its own grad", "[tape]") {
  Tensor x = scalar(5.0).requires_grad_();
  x.backward();
  REQUIRE(x.grad().item() == 1.0);
  x.backward();
  REQUIRE(x.grad().item() == 2.0);
}

TEST_CASE("tape: backward from an intermediate tensor only reaches its own history", "[tape]") {
  // h = x * 2; y = h * 3 (recorded after h). h.backward(ones) must give dx = 2, not 6.
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  Tensor h = x * 2.0;
  Tensor y = h * 3.0;
  h.backward(ones({2}));
  require_values(x.grad(), {2, 2});
  REQUIRE(y.requires_grad());
}

TEST_CASE("tape: NoGrad records nothing", "[tape][grad_mode]") {
  Tensor x = from_values({1, 2, 3}, {3}).requires_grad_();
  const size_t before = tape_size();
  REQUIRE(grad_enabled());
  {
    NoGrad no_grad;
    REQUIRE_FALSE(grad_enabled());
    Tensor y = sum(exp(x) * x + x);
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(y.is_leaf());
    REQUIRE(tape_size() == before);
    REQUIRE_THROWS_AS(y.backward(), Error);
  }
  REQUIRE(grad_enabled());
  Tensor z = x * 2.0;
  REQUIRE(z.requires_grad());
  REQUIRE(tape_size() == before + 1);
}

TEST_CASE("tape: NoGrad nests and restores the previous mode", "[tape][grad_mode]") {
  {
    NoGrad outer;
    {
      NoGrad inner;
      REQUIRE_FALSE(grad_enabled());
    }
    REQUIRE_FALSE(grad_enabled());
  }
  REQUIRE(grad_enabled());
}

TEST_CASE("tape: EnableGrad inside NoGrad records again", "[tape][grad_mode]") {
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  const size_t before = tape_size();
  NoGrad no_grad;
  Tensor y;
  {
    EnableGrad enable;
    REQUIRE(grad_enabled());
    y = sum(x * x);
    REQUIRE(y.requires_grad());
    REQUIRE(tape_size() == before + 2);
  }
  REQUIRE_FALSE(grad_enabled());
  Tensor z = x * 3.0;
  REQUIRE_FALSE(z.requires_grad());
  y.backward();  // backward works inside NoGrad: it does not need grad mode
  require_values(x.grad(), {2, 4});
}

TEST_CASE("tape: detach stops gradients and shares storage", "[tape]") {
  // y = sum(detach(x) * x): only the second factor carries gradient, dy/dx = x.
  Tensor x = from_values({2, 3}, {2}).requires_grad_();
  Tensor d = x.detach();
  REQUIRE_FALSE(d.requires_grad());
  REQUIRE(d.is_leaf());
  REQUIRE(d.storage().get() == x.storage().get());
  sum(d * x).backward();
  require_values(x.grad(), {2, 3});
  // Detaching a non-leaf cuts the graph there: z = detach(x*x) * x -> dz/dx = x^2.
  x.zero_grad();
  Tensor z = sum((x * x).detach() * x);
  z.backward();
  require_values(x.grad(), {4, 9});
}

TEST_CASE("tape: requires_grad_ is for floating leaves only", "[tape][errors]") {
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  Tensor y = x * 2.0;
  REQUIRE_FALSE(y.is_leaf());
  REQUIRE_THROWS_AS(y.requires_grad_(), Error);
  REQUIRE_THROWS_AS(y.requires_grad_(false), Error);
  Tensor idx = from_indices({0, 1}, {2});
  REQUIRE_THROWS_AS(idx.requires_grad_(), Error);
  REQUIRE_THROWS_AS(from_bools({true}, {1}).requires_grad_(), Error);
  idx.requires_grad_(false);  // turning it off is allowed
  REQUIRE_FALSE(idx.requires_grad());
  // f64, f16 and bf16 leaves may require grad.
  REQUIRE(ones({2}, DType::f64).requires_grad_().requires_grad());
  REQUIRE(ones({2}, DType::f16).requires_grad_().requires_grad());
  REQUIRE(ones({2}, DType::bf16).requires_grad_().requires_grad());
}

TEST_CASE("tape: inputs that do not require grad get no grad and record nothing", "[tape]") {
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  Tensor c = from_values({5, 7}, {2});
  const size_t before = tape_size();
  Tensor k = c * c;  // nothing requires grad
  REQUIRE_FALSE(k.requires_grad());
  REQUIRE(tape_size() == before);
  sum(x * c).backward();
  require_values(x.grad(), {5, 7});
  REQUIRE_FALSE(c.grad().defined());
}

TEST_CASE("tape: saved tensors are freed by backward", "[tape][memory]") {
  const int64_t n = 256;
  const int64_t bytes = n * 4;  // f32
  const int64_t baseline = allocator_stats().current_bytes;
  {
    Tensor x = full({n}, 0.5).requires_grad_();
    REQUIRE(allocator_stats().current_bytes == baseline + bytes);
    // exp saves its output; mul saves both (detached) factors. The only owners of the two
    // exp outputs are the saved lists, so they live until backward releases them.
    Tensor s = sum(exp(x) * exp(x));
    // x + two exp outputs + the scalar sum (the product itself is not saved by sum).
    const int64_t scalar_bytes = 4;
    REQUIRE(allocator_stats().current_bytes == baseline + 3 * bytes + scalar_bytes);
    s.backward();
    // x, x.grad and s remain; every saved tensor and every backward temporary is gone.
    REQUIRE(allocator_stats().current_bytes == baseline + 2 * bytes + scalar_bytes);
    // d/dx exp(x)^2 = 2 exp(2x) = 2e at x = 0.5.
    for (double g : x.grad().to_host_f64()) REQUIRE(g == Approx(2 * std::exp(1.0)).epsilon(1e-5));
  }
  REQUIRE(allocator_stats().current_bytes == baseline);
}

TEST_CASE("tape: retain_graph keeps saved tensors until the output is dropped", "[tape][memory]") {
  const int64_t n = 128;
  const int64_t bytes = n * 4;
  const int64_t baseline = allocator_stats().current_bytes;
  {
    Tensor x = full({n}, 0.25).requires_grad_();
    Tensor s = sum(exp(x) * exp(x));
    s.backward(Tensor(), /*retain_graph=*/true);
    // x, x.grad, the scalar, and the two saved exp outputs.
    REQUIRE(allocator_stats().current_bytes == baseline + 4 * bytes + 4);
  }
  REQUIRE(allocator_stats().current_bytes == baseline);
}

TEST_CASE("tape: dropping the output frees the graph and its saved tensors", "[tape][memory]") {
  const size_t tape_before = tape_size();
  const int64_t baseline = allocator_stats().current_bytes;
  Tensor x = full({64}, 1.5).requires_grad_();
  const int64_t with_x = allocator_stats().current_bytes;
  {
    Tensor y = sum(exp(x) * x + x);
    REQUIRE(tape_size() == tape_before + 4);  // exp, mul, add, sum
    REQUIRE(allocator_stats().current_bytes > with_x);
  }
  // Nobody can reach the graph any more: no backward, yet it is gone.
  REQUIRE(tape_size() == tape_before);
  REQUIRE(allocator_stats().current_bytes == with_x);
  REQUIRE_FALSE(x.grad().defined());
  x = Tensor();
  REQUIRE(allocator_stats().current_bytes == baseline);
}

TEST_CASE("tape: tape_size counts live nodes after backward until the output is dropped", "[tape]") {
  const size_t before = tape_size();
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  {
    Tensor y = sum(x * x);
    REQUIRE(tape_size() == before + 2);
    y.backward();
    // The nodes stay alive (owned by y) but are released.
    REQUIRE(tape_size() == before + 2);
  }
  REQUIRE(tape_size() == before);
}

TEST_CASE("tape: format_tape lists op names with output shapes", "[tape][format]") {
  Tensor a = ones({2, 3}).requires_grad_();
  Tensor b = ones({3, 4}).requires_grad_();
  Tensor m = matmul(a, b);
  Tensor s = sum(m);
  const std::string text = format_tape();
  std::istringstream lines(text);
  std::string line;
  bool matmul_line = false, sum_line = false;
  while (std::getline(lines, line)) {
    if (line.find("matmul") != std::string::npos && line.find("[2, 4]") != std::string::npos &&
        line.find("f32") != std::string::npos) {
      matmul_line = true;
    }
    // sum to a scalar: output shape "[]".
    if (line.find(" sum ") != std::string::npos && line.find("[]") != std::string::npos) {
      sum_line = true;
    }
  }
  INFO(text);
  REQUIRE(matmul_line);
  REQUIRE(sum_line);
  // matmul saves both inputs: the matmul line reports (2*3 + 3*4) * 4 = 72 saved bytes.
  bool saved_ok = false;
  std::istringstream again(text);
  while (std::getline(again, line)) {
    if (line.find("matmul") != std::string::npos && line.find(" 72") != std::string::npos) saved_ok = true;
  }
  REQUIRE(saved_ok);
  s.backward();
  REQUIRE(format_tape().find("released") != std::string::npos);
}

TEST_CASE("tape: TapeScope gives a fresh tape and restores the outer one", "[tape]") {
  Tensor x = from_values({1, 2}, {2}).requires_grad_();
  Tensor outer = x * 2.0;
  const size_t outer_size = tape_size();
  {
    TapeScope scope;
    REQUIRE(tape_size() == 0);
    Tensor inner = sum(x * 3.0);
    REQUIRE(tape_size() == 2);
    inner.backward();
    require_values(x.grad(), {3, 3});
  }
  REQUIRE(tape_size() == outer_size);
  sum(outer).backward();
  require_values(x.grad(), {5, 5});
}

TEST_CASE("tape: a long chain back-propagates without recursion limits", "[tape]") {
  // y = x + 1 + 1 + ... (20000 times): dy/dx = 1.
  Tensor x = scalar(0.0, DType::f64).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = y + 1.0;
  REQUIRE(y.item() == 20000.0);
  y.backward();
  REQUIRE(x.grad().item() == 1.0);
}

// Run in a child process by the test below: a crash (stack overflow) must not take the whole
// test binary down with it. Hidden (the "." tag) so it does not run on its own.
TEST_CASE("tape: deep chain child", "[.deep_chain_child]") {
  Tensor x = scalar(0.0, DType::f64).requires_grad_();
  {
    Tensor y = x;
    for (int i = 0; i < 500000; ++i) y = y + 1.0;
    y.backward();
    REQUIRE(x.grad().item() == 1.0);
  }  // dropping y frees 500k nodes
  REQUIRE(tape_size() == 0);
}

TEST_CASE("tape: a very deep graph is freed without overflowing the stack", "[tape][memory]") {
  // backward walks the tape iteratively, so depth is no limit there; freeing the graph when its
  // output is dropped must not recurse once per node either (a 500k-node chain on an 8 MiB stack).
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string command = "'" + self + "' \"[.deep_chain_child]\" > /dev/null 2>&1";
  const int status = std::system(command.c_str());
  // The shell reports a child killed by signal N as exit code 128 + N (139 = SIGSEGV).
  const int exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  // 126: the shell found the binary but cannot execute it, as a cross-built one run under an
  // emulator (scripts/check-aarch64.sh), whose children the host's shell cannot start.
  if (tg::testing::skip_unless(exit_code != 126, "the shell cannot execute this binary")) return;
  INFO("child exit code " << exit_code << " (139 = SIGSEGV: freeing the graph recursed per node)");
  REQUIRE(exit_code == 0);
}

TEST_CASE("tape: backward refuses a node whose saved tensor was written in place since",
          "[tape][version]") {
  // y = sum(w * x): mul saves w and x; d y/dw = x = [3, 4] as the forward saw it.
  const Tensor w = from_values({1, 2}, {2}).requires_grad_();
  const Tensor x = from_values({3, 4}, {2});
  Tensor y = sum(w * x);
  x.fill_(0);  // the gradient would now be [0, 0], silently
  REQUIRE_THROWS_WITH(y.backward(),
                      Catch::Contains("modified by an in-place operation") &&
                          Catch::Contains("'mul'") && Catch::Contains("shape [2]") &&
                          Catch::Contains("at version 0, now version 1"));
  REQUIRE_FALSE(w.grad().defined());
  // A detach()ed handle shares the storage, and so its version.
  Tensor z = sum(w * x);
  x.detach().copy_(from_values({5, 6}, {2}));
  REQUIRE_THROWS_WITH(z.backward(), Catch::Contains("version 1, now version 2"));
  // A fresh forward after the write saves the new version and back-propagates: dz/dw = [5, 6].
  sum(w * x).backward();
  require_values(w.grad(), {5, 6});
}

TEST_CASE("tape: a write into a tensor no node saved does not trip the version check",
          "[tape][version]") {
  // add saves nothing: d sum(w + x)/dw = [1, 1] whatever x holds.
  const Tensor w = from_values({1, 2}, {2}).requires_grad_();
  const Tensor x = from_values({3, 4}, {2});
  Tensor y = sum(w + x);
  x.fill_(9);
  y.backward();
  require_values(w.grad(), {1, 1});
}

TEST_CASE("tape: retain_graph keeps checking versions on the second backward", "[tape][version]") {
  const Tensor w = from_values({2}, {1}).requires_grad_();
  Tensor y = sum(w * w);  // dy/dw = 2w = 4
  y.backward(Tensor(), true);
  require_values(w.grad(), {4});
  {
    NoGrad no_grad;
    w.fill_(5);  // an optimizer-like update of the leaf
  }
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("modified by an in-place operation"));
  require_values(w.grad(), {4});  // nothing was added
}

TEST_CASE("tape: threads back-propagating into one shared leaf lose no update",
          "[tape][threads]") {
  // Each backward of sum(w * c) adds c = [1, 2] to w.grad: 4 threads x 250 backwards each give
  // exactly [1000, 2000] (small integers: exact in f64 in any order).
  constexpr int threads = 4, iterations = 250;
  const Tensor w = from_values({0.5, -1.5}, {2}, DType::f64).requires_grad_();
  const Tensor c = from_values({1, 2}, {2}, DType::f64);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      for (int i = 0; i < iterations; ++i) sum(w * c).backward();
    });
  }
  for (std::thread& worker : workers) worker.join();
  require_values(w.grad(), {1.0 * threads * iterations, 2.0 * threads * iterations}, 0);
}

TEST_CASE("tape: a backward through another thread's graph is refused", "[tape][threads]") {
  const Tensor w = from_values({1}, {1}).requires_grad_();
  Tensor y = sum(w * 2.0);
  std::string message;
  std::thread other([&] {
    try {
      y.backward();
    } catch (const Error& error) {
      message = error.what();
    }
  });
  other.join();
  REQUIRE_THAT(message, Catch::Contains("not on this thread's tape"));
  y.backward();  // on its own thread it still works: dy/dw = 2
  require_values(w.grad(), {2});
}

TEST_CASE("tape: a gradient without elements reduces to zeros, with nothing large allocated",
          "[tape][broadcast]") {
  // x broadcast to [2^40, 0]: no elements, so dy/dx = 0. Reducing the [2^40, 0] gradient dim by
  // dim (the last first) would allocate [2^40, 1] partial sums, 4 TiB.
  const Tensor x = scalar(2.0).requires_grad_();
  const Tensor wide = x.expand({int64_t{1} << 40, 0});
  reset_allocator_stats();
  const int64_t before = allocator_stats().current_bytes;
  sum(wide).backward();
  require_values(x.grad(), {0});
  REQUIRE(allocator_stats().peak_bytes - before < 4096);
}

// A leaf's .grad owns its storage, as in PyTorch: a backward that hands its incoming gradient on
// unchanged (add's {g, g}, a reshape's view, a broadcast undone without a sum) must not make the
// caller's seed, or another leaf, share it.
TEST_CASE("tape: a leaf's first .grad owns its storage, apart from the seed and other leaves",
          "[tape][accumulate]") {
  const auto shares_storage = [](const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); };
  SECTION("a + b: the seed and the two leaves") {
    Tensor a = from_values({1, 2}, {2}).requires_grad_();
    Tensor b = from_values({3, 4}, {2}).requires_grad_();
    const Tensor seed = from_values({5, 6}, {2});
    backward(add(a, b), seed);
    REQUIRE_FALSE(shares_storage(a.grad(), seed));
    REQUIRE_FALSE(shares_storage(b.grad(), seed));
    REQUIRE_FALSE(shares_storage(a.grad(), b.grad()));
    NoGrad no_grad;
    seed.fill_(100);
    a.grad().fill_(-1);
    require_values(b.grad(), {5, 6});  // d(a + b)/db = 1: the seed as it was
    require_values(a.grad(), {-1, -1});
  }
  SECTION("a leaf root: backward(x, seed)") {
    Tensor x = from_values({1, 2, 3}, {3}).requires_grad_();
    const Tensor seed = from_values({7, 8, 9}, {3});
    backward(x, seed);
    REQUIRE_FALSE(shares_storage(x.grad(), seed));
    NoGrad no_grad;
    seed.fill_(0);
    require_values(x.grad(), {7, 8, 9});
  }
  SECTION("a reshape's view and a broadcast undone without a sum ([1, 3] -> [3])") {
    Tensor x = from_values({1, 2, 3, 4}, {2, 2}).requires_grad_();
    const Tensor seed = from_values({1, 2, 3, 4}, {4});
    backward(x.reshape({4}), seed);
    REQUIRE_FALSE(shares_storage(x.grad(), seed));
    Tensor a = from_values({1, 2, 3}, {3}).requires_grad_();
    Tensor b = from_values({4, 5, 6}, {1, 3}).requires_grad_();
    const Tensor row = from_values({1, 2, 3}, {1, 3});
    backward(add(a, b), row);  // a's gradient is row's [1, 3] as a [3]
    REQUIRE_FALSE(shares_storage(a.grad(), row));
    REQUIRE_FALSE(shares_storage(b.grad(), row));
    REQUIRE_FALSE(shares_storage(a.grad(), b.grad()));
    NoGrad no_grad;
    row.fill_(0);
    require_values(a.grad(), {1, 2, 3});
    require_values(b.grad(), {1, 2, 3});
  }
  SECTION("checkpoint's nested backward, and the gradients that add up later") {
    Tensor a = from_values({1, 2}, {2}).requires_grad_();
    Tensor b = from_values({3, 4}, {2}).requires_grad_();
    const Tensor seed = from_values({1, 1}, {2});
    const Tensor out = checkpoint([](const std::vector<Tensor>& in) { return add(in[0], in[1]); }, {a, b});
    backward(out, seed);
    REQUIRE_FALSE(shares_storage(a.grad(), seed));
    REQUIRE_FALSE(shares_storage(a.grad(), b.grad()));
    const Tensor first = a.grad();
    backward(add(a, b), seed);  // accumulated: a new tensor, the old handle unchanged
    require_values(a.grad(), {2, 2});
    require_values(first, {1, 1});
  }
}
