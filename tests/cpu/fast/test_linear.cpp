// The one-pass linear backward (cpu/fast/linear.cpp) against sums in double: dx = G W, dW = G^T x,
// db = the column sums of G, for shapes that give each thread several row blocks, one or none, rows
// not a multiple of 16, every subset of the three outputs, and G with zero rows (isolated rows
// with a gradient, runs, none); at 1, 2 and 3 threads, f32 and f64. A zero row of G leaves an
// infinite row of x out of dW.
// And the op: linear's gradients with the kernel against the same op on its plain path (two
// products and a sum, FastPathsOff), which takes the same inputs.
//
// Tolerance: each result is a sum of K products (dx: k = N; dW and db: k = M, in row blocks and
// then thread shares, any order), within (k + 4) u sum |a||b| (Higham's gamma_k, as
// tests/cpu/test_reference.cpp), with u the unit roundoff.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/tapegrad.h"
#include "tests/support/skip.h"
#include "tests/support/thread_counts.h"

using namespace tg;
using tg::testing::at_thread_counts;

namespace {

double unit_roundoff(DType dtype) { return dtype == DType::f32 ? 0x1.0p-24 : 0x1.0p-53; }

struct Shapes {
  int64_t m, n, k;  // g [m, n], x [m, k], weight [n, k]
};

// fast[i] within (terms + 4) u * bound[i] of exact[i]
void require_close(const Tensor& fast, const std::vector<double>& exact, const std::vector<double>& bound,
                   int64_t terms, DType dtype) {
  const std::vector<double> got = fast.to_host_f64();
  REQUIRE(got.size() == exact.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::abs(got[i] - exact[i]) <= (terms + 4) * unit_roundoff(dtype) * bound[i] + 1e-300);
  }
}

// Which rows of G are zero (a model that reads some positions only): none, all but every 64th
// (a forecast from the last of 64 positions), runs of 37 every 100 rows (padding), or all.
enum class ZeroRows { none, all_but_every_64th, runs, all };

bool is_zero_row(ZeroRows pattern, int64_t r) {
  switch (pattern) {
    case ZeroRows::none: return false;
    case ZeroRows::all_but_every_64th: return r % 64 != 63;
    case ZeroRows::runs: return r % 100 >= 63;
    case ZeroRows::all: return true;
  }
  return false;
}

void check_kernel(const Shapes& s, DType dtype, bool want_dx, bool want_dw, bool want_db,
                  ZeroRows pattern = ZeroRows::none) {
  INFO("m " << s.m << ", n " << s.n << ", k " << s.k << ", " << dtype_name(dtype) << ", dx " << want_dx
            << ", dW " << want_dw << ", db " << want_db << ", zero rows " << static_cast<int>(pattern));
  std::vector<double> g_values = uniform({s.m, s.n}, -1, 1, dtype, kCPU).to_host_f64();
  for (int64_t r = 0; r < s.m; ++r) {
    if (is_zero_row(pattern, r)) std::fill(g_values.begin() + r * s.n, g_values.begin() + (r + 1) * s.n, 0.0);
  }
  const Tensor g = from_values(g_values, {s.m, s.n}, dtype, kCPU);
  const Tensor x = uniform({s.m, s.k}, -1, 1, dtype, kCPU);
  const Tensor w = uniform({s.n, s.k}, -1, 1, dtype, kCPU);
  const std::vector<double> gv = g.to_host_f64(), xv = x.to_host_f64(), wv = w.to_host_f64();
  std::vector<double> dx(s.m * s.k), dx_bound(s.m * s.k), dw(s.n * s.k), dw_bound(s.n * s.k);
  std::vector<double> db(s.n), db_bound(s.n);
  for (int64_t r = 0; r < s.m; ++r) {
    for (int64_t j = 0; j < s.n; ++j) {
      for (int64_t c = 0; c < s.k; ++c) {
        dx[r * s.k + c] += gv[r * s.n + j] * wv[j * s.k + c];
        dx_bound[r * s.k + c] += std::abs(gv[r * s.n + j] * wv[j * s.k + c]);
        dw[j * s.k + c] += gv[r * s.n + j] * xv[r * s.k + c];
        dw_bound[j * s.k + c] += std::abs(gv[r * s.n + j] * xv[r * s.k + c]);
      }
      db[j] += gv[r * s.n + j];
      db_bound[j] += std::abs(gv[r * s.n + j]);
    }
  }
  at_thread_counts([&] {
    const Tensor out_dx = want_dx ? empty({s.m, s.k}, dtype, kCPU) : Tensor();
    const Tensor out_dw = want_dw ? empty({s.n, s.k}, dtype, kCPU) : Tensor();
    const Tensor out_db = want_db ? empty({s.n}, dtype, kCPU) : Tensor();
    REQUIRE(kernels(kCPU).linear_backward(g, x, w, out_dx, out_dw, out_db));
    if (want_dx) require_close(out_dx, dx, dx_bound, s.n, dtype);
    if (want_dw) require_close(out_dw, dw, dw_bound, s.m, dtype);
    if (want_db) require_close(out_db, db, db_bound, s.m, dtype);
  });
}

}  // namespace

TEST_CASE("linear backward in one pass: dx, dW and db against double sums", "[linear][cpu]") {
  // The kernel is a fast path: without AVX2 the op composes.
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  // Rows of 700 floats of G, x and dx (20 + 340 + 340: 2.8 KB): blocks of 176 rows, so 1000 rows
  // give each of 2 or 3 threads several blocks and a short last one (a narrow G keeps the double
  // sums of the reference cheap, which matters under the sanitizers); 7 rows give threads past
  // the first none; 40 x 384 x 128 is timeseries' projection on few rows; a dW of 384 x 400 (600
  // KB in f32) is past the kernel's 512 KB, so each thread's rows go in one block.
  for (const Shapes& s : {Shapes{1000, 20, 340}, Shapes{7, 5, 3}, Shapes{40, 384, 128}, Shapes{1, 1, 1},
                          Shapes{50, 384, 400}}) {
    for (DType dtype : {DType::f32, DType::f64}) {
      check_kernel(s, dtype, true, true, true);
    }
  }
  for (int mask = 0; mask < 7; ++mask) {  // every subset of the outputs, on the blocked shape
    check_kernel({1000, 20, 340}, DType::f32, mask & 1, mask & 2, mask & 4);
  }
  for (ZeroRows pattern : {ZeroRows::all_but_every_64th, ZeroRows::runs, ZeroRows::all}) {
    for (DType dtype : {DType::f32, DType::f64}) check_kernel({1000, 20, 340}, dtype, true, true, true, pattern);
    check_kernel({64, 20, 10}, DType::f32, true, true, true, pattern);
    check_kernel({100, 384, 400}, DType::f32, true, true, true, pattern);  // one block a thread
  }
  // The kernel declines what it does not compute; the op then multiplies (ops/matmul.cpp).
  const Tensor g = ones({4, 3}, DType::f16, kCPU), x = ones({4, 2}, DType::f16, kCPU);
  const Tensor w = ones({3, 2}, DType::f16, kCPU);
  REQUIRE_FALSE(kernels(kCPU).linear_backward(g, x, w, empty({4, 2}, DType::f16, kCPU), Tensor(), Tensor()));
  cpu::FastPathsOff off;
  const Tensor g32 = ones({4, 3}), x32 = ones({4, 2}), w32 = ones({3, 2});
  REQUIRE_FALSE(kernels(kCPU).linear_backward(g32, x32, w32, empty({4, 2}), Tensor(), Tensor()));
}

TEST_CASE("linear backward in one pass: a row of G that is zero leaves x's row out of dW", "[linear][cpu]") {
  if (tg::testing::skip_unless(cpu::fast_paths_enabled(), "this CPU has no AVX2 + FMA")) return;
  // Row 5 of x is infinite and its gradient zero: dW and db are those of the other rows, dx's row
  // 5 is 0 (the products would give 0 * inf = NaN in dW). A NaN in a row with a gradient stays.
  std::vector<double> g_values(8 * 3, 0.5), x_values(8 * 2, 1.0);
  std::fill(g_values.begin() + 5 * 3, g_values.begin() + 6 * 3, 0.0);
  x_values[5 * 2] = std::numeric_limits<double>::infinity();
  const Tensor g = from_values(g_values, {8, 3}, DType::f32, kCPU);
  const Tensor w = ones({3, 2});
  const Tensor dx = empty({8, 2}), dw = empty({3, 2}), db = empty({3});
  REQUIRE(kernels(kCPU).linear_backward(g, from_values(x_values, {8, 2}, DType::f32, kCPU), w, dx, dw, db));
  for (double v : dw.to_host_f64()) REQUIRE(v == 7 * 0.5);  // seven rows of 0.5 * 1
  for (double v : db.to_host_f64()) REQUIRE(v == 7 * 0.5);
  const std::vector<double> dx_values = dx.to_host_f64();
  for (int64_t r = 0; r < 8; ++r) REQUIRE(dx_values[r * 2] == (r == 5 ? 0.0 : 1.5));
  x_values[2 * 2] = std::nan("");  // row 2 has a gradient: its NaN reaches dW's first column
  REQUIRE(kernels(kCPU).linear_backward(g, from_values(x_values, {8, 2}, DType::f32, kCPU), w, dx, dw, db));
  REQUIRE(std::isnan(dw.to_host_f64()[0]));
}

TEST_CASE("linear and stacked_linear: gradients with the one-pass kernel and on the plain path agree",
          "[linear][cpu]") {
  // A 3-D input (rows from two dims), with and without bias, and a stacked projection of three.
  for (DType dtype : {DType::f32, DType::f64}) {
    const Tensor x0 = uniform({6, 50, 40}, -1, 1, dtype, kCPU);
    const Tensor w0 = uniform({24, 40}, -1, 1, dtype, kCPU);
    const Tensor b0 = uniform({24}, -1, 1, dtype, kCPU);
    const Tensor g = uniform({6, 50, 24}, -1, 1, dtype, kCPU);
    const Tensor gs = uniform({6, 50, 72}, -1, 1, dtype, kCPU);
    std::vector<std::vector<double>> grads[2];
    for (int plain = 0; plain < 2; ++plain) {
      std::optional<cpu::FastPathsOff> off;
      if (plain) off.emplace();
      Tensor x = x0.detach(), w = w0.detach(), b = b0.detach();
      x.requires_grad_(), w.requires_grad_(), b.requires_grad_();
      linear(x, w, b).backward(g);
      grads[plain] = {x.grad().to_host_f64(), w.grad().to_host_f64(), b.grad().to_host_f64()};
      x.zero_grad(), w.zero_grad();
      linear(x, w, Tensor()).backward(g);
      grads[plain].push_back(x.grad().to_host_f64());
      grads[plain].push_back(w.grad().to_host_f64());
      x.zero_grad();
      std::vector<Tensor> ws, bs;
      for (int i = 0; i < 3; ++i) {
        ws.push_back(w0.detach() * double(i + 1));
        bs.push_back(b0.detach() * double(i + 1));
        ws.back().requires_grad_(), bs.back().requires_grad_();
      }
      stacked_linear(x, ws, bs).backward(gs);
      grads[plain].push_back(x.grad().to_host_f64());
      for (int i = 0; i < 3; ++i) {
        grads[plain].push_back(ws[i].grad().to_host_f64());
        grads[plain].push_back(bs[i].grad().to_host_f64());
      }
    }
    // Both are sums of at most 300 products of entries within 1 (the rows: 6 x 50): within 304 u
    // of each other's exact value, so 608 u * 300 apart at most.
    const double tolerance = 608 * 300 * unit_roundoff(dtype);
    REQUIRE(grads[0].size() == grads[1].size());
    for (size_t t = 0; t < grads[0].size(); ++t) {
      INFO(dtype_name(dtype) << ", gradient " << t);
      REQUIRE(grads[0][t].size() == grads[1][t].size());
      for (size_t i = 0; i < grads[0][t].size(); ++i) REQUIRE(std::abs(grads[0][t][i] - grads[1][t][i]) <= tolerance);
    }
  }
}
