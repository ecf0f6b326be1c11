// matmul and linear against a naive triple loop in f64, over 2-D, batched, broadcast-batched,
// 1-D and transposed operands; errors; gradients.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

// Deterministic values that are not all simple: sin of the index, scaled.
std::vector<double> pattern(int64_t n, double phase) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(0.7 * static_cast<double>(i) + phase) * 2.0;
  return v;
}

// Naive row-major product of one [m, k] and one [k, n] matrix.
std::vector<double> naive_matmul(const std::vector<double>& a, const std::vector<double>& b,
                                 int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * b[p * n + j];
      c[i * n + j] = acc;
    }
  return c;
}

void require_close(const std::vector<double>& got, const std::vector<double>& expected,
                   double tol) {
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << ", expected " << expected[i]);
    REQUIRE(std::fabs(got[i] - expected[i]) <= tol * (1.0 + std::fabs(expected[i])));
  }
}

}  // namespace

TEST_CASE("matmul: 2-D matches a naive triple loop in f32 and f64", "[matmul]") {
  for (const auto& [m, k, n] : std::vector<std::array<int64_t, 3>>{
           {2, 3, 4}, {1, 1, 1}, {5, 1, 3}, {7, 13, 1}, {17, 31, 9}, {64, 48, 33}}) {
    INFO("m=" << m << " k=" << k << " n=" << n);
    const auto av = pattern(m * k, 0.1), bv = pattern(k * n, 1.3);
    const auto expected = naive_matmul(av, bv, m, k, n);
    Tensor a64 = from_values(av, {m, k}, DType::f64), b64 = from_values(bv, {k, n}, DType::f64);
    Tensor c64 = matmul(a64, b64);
    REQUIRE(c64.shape() == Shape{m, n});
    REQUIRE(c64.dtype() == DType::f64);
    require_close(c64.to_host_f64(), expected, 1e-12);
    // f32 inputs hold rounded values: compare with the naive product of the rounded inputs.
    Tensor a32 = from_values(av, {m, k}), b32 = from_values(bv, {k, n});
    Tensor c32 = matmul(a32, b32);
    REQUIRE(c32.dtype() == DType::f32);
    require_close(c32.to_host_f64(), naive_matmul(a32.to_host_f64(), b32.to_host_f64(), m, k, n), 1e-5);
  }
}

TEST_CASE("matmul: a small product by hand", "[matmul]") {
  // [[1,2],[3,4]] @ [[5,6],[7,8]] = [[19,22],[43,50]]
  Tensor a = from_values({1, 2, 3, 4}, {2, 2});
  Tensor b = from_values({5, 6, 7, 8}, {2, 2});
  REQUIRE(matmul(a, b).to_host_f64() == std::vector<double>{19, 22, 43, 50});
}

TEST_CASE("matmul: batched operands multiply item by item", "[matmul][batched]") {
  const int64_t batch = 3, m = 4, k = 5, n = 2;
  const auto av = pattern(batch * m * k, 0.4), bv = pattern(batch * k * n, 2.2);
  Tensor a = from_values(av, {batch, m, k}, DType::f64);
  Tensor b = from_values(bv, {batch, k, n}, DType::f64);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{batch, m, n});
  std::vector<double> expected;
  for (int64_t i = 0; i < batch; ++i) {
    const std::vector<double> ai(av.begin() + i * m * k, av.begin() + (i + 1) * m * k);
    const std::vector<double> bi(bv.begin() + i * k * n, bv.begin() + (i + 1) * k * n);
    const auto ci = naive_matmul(ai, bi, m, k, n);
    expected.insert(expected.end(), ci.begin(), ci.end());
  }
  require_close(c.to_host_f64(), expected, 1e-12);
}

TEST_CASE("matmul: broadcast batch dims ((2,1,3,4) @ (5,4,2) -> (2,5,3,2))", "[matmul][batched]") {
  const auto av = pattern(2 * 1 * 3 * 4, 0.3), bv = pattern(5 * 4 * 2, 0.9);
  Tensor a = from_values(av, {2, 1, 3, 4}, DType::f64);
  Tensor b = from_values(bv, {5, 4, 2}, DType::f64);
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{2, 5, 3, 2});
  const std::vector<double> got = c.to_host_f64();
  for (int64_t i = 0; i < 2; ++i) {
    const std::vector<double> ai(av.begin() + i * 12, av.begin() + (i + 1) * 12);
    for (int64_t j = 0; j < 5; ++j) {
      const std::vector<double> bj(bv.begin() + j * 8, bv.begin() + (j + 1) * 8);
      const auto expected = naive_matmul(ai, bj, 3, 4, 2);
      const std::vector<double> item(got.begin() + (i * 5 + j) * 6, got.begin() + (i * 5 + j + 1) * 6);
      INFO("batch item " << i << ", " << j);
      require_close(item, expected, 1e-12);
    }
  }
  // A 2-D operand against a batched one broadcasts too: [3,4] @ [5,4,2] -> [5,3,2].
  Tensor a2 = a.narrow(0, 1, 1).squeeze(0).squeeze(0);  // a[1, 0]
  Tensor c2 = matmul(a2, b);
  REQUIRE(c2.shape() == Shape{5, 3, 2});
  for (int64_t j = 0; j < 5; ++j) {
    const std::vector<double> bj(bv.begin() + j * 8, bv.begin() + (j + 1) * 8);
    const std::vector<double> ai(av.begin() + 12, av.begin() + 24);
    const auto expected = naive_matmul(ai, bj, 3, 4, 2);
    const auto all = c2.to_host_f64();
    require_close(std::vector<double>(all.begin() + j * 6, all.begin() + (j + 1) * 6), expected, 1e-12);
  }
}

TEST_CASE("matmul: 1-D operands as in torch.matmul", "[matmul][vector]") {
  // M = [[1,2,3],[4,5,6]], v = [1,0,-1], u = [2,1].
  Tensor M = from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor v = from_values({1, 0, -1}, {3});
  Tensor u = from_values({2, 1}, {2});
  SECTION("matrix @ vector") {
    Tensor r = matmul(M, v);
    REQUIRE(r.shape() == Shape{2});
    REQUIRE(r.to_host_f64() == std::vector<double>{1 - 3, 4 - 6});
  }
  SECTION("vector @ matrix") {
    Tensor r = matmul(u, M);
    REQUIRE(r.shape() == Shape{3});
    REQUIRE(r.to_host_f64() == std::vector<double>{2 + 4, 4 + 5, 6 + 6});
  }
  SECTION("vector @ vector gives a 0-d scalar") {
    Tensor w = from_values({4, 5, 6}, {3});
    Tensor r = matmul(v, w);  // 1*4 + 0*5 - 1*6 = -2
    REQUIRE(r.shape() == Shape{});
    REQUIRE(r.item() == -2.0);
    // A strided vector (a column of M: [2, 5], stride 3) dotted with u: 2*2 + 1*5 = 9.
    REQUIRE(matmul(u, M.narrow(1, 1, 1).squeeze(1)).item() == 9.0);
  }
  SECTION("vector @ batched matrix and batched matrix @ vector") {
    Tensor B = stack({M, M * 2.0}, 0);  // [2, 2, 3]
    Tensor r = matmul(u, B);            // [2, 3]
    REQUIRE(r.shape() == Shape{2, 3});
    REQUIRE(r.to_host_f64() == std::vector<double>{6, 9, 12, 12, 18, 24});
    Tensor s = matmul(B, v);  // [2, 2]
    REQUIRE(s.shape() == Shape{2, 2});
    REQUIRE(s.to_host_f64() == std::vector<double>{-2, -2, -4, -4});
  }
  SECTION("a strided vector (a column of a matrix)") {
    Tensor col = M.narrow(1, 1, 1).squeeze(1);  // [2, 5], stride 3
    REQUIRE(col.strides() == Shape{3});
    Tensor N = from_values({1, 1, 2, 2, 3, 3}, {3, 2});  // [3, 2] @ col = [7, 14, 21]
    REQUIRE(matmul(N, col).to_host_f64() == std::vector<double>{7, 14, 21});
    Tensor row = M.transpose(0, 1).narrow(0, 2, 1).squeeze(0);  // [3, 6], stride 3
    REQUIRE(row.strides() == Shape{3});
    REQUIRE(matmul(row, from_values({1, 1, 1, 0, 0, 1}, {2, 3})).to_host_f64() ==
            std::vector<double>{3, 3, 9});
  }
}

TEST_CASE("matmul: transposed and strided views give the same values as contiguous copies", "[matmul][strides]") {
  const int64_t m = 6, k = 5, n = 7;
  Tensor at = from_values(pattern(k * m, 0.5), {k, m}, DType::f64);  // will be used as at^T
  Tensor bt = from_values(pattern(n * k, 1.7), {n, k}, DType::f64);
  Tensor a = at.transpose(0, 1);  // [m, k], column-major
  Tensor b = bt.transpose(0, 1);  // [k, n], column-major
  REQUIRE_FALSE(a.is_contiguous());
  const auto expected = naive_matmul(a.contiguous().to_host_f64(), b.contiguous().to_host_f64(), m, k, n);
  require_close(matmul(a, b).to_host_f64(), expected, 1e-12);
  require_close(matmul(a.contiguous(), b).to_host_f64(), expected, 1e-12);
  require_close(matmul(a, b.contiguous()).to_host_f64(), expected, 1e-12);
  REQUIRE(matmul(a, b).to_host_f64() == matmul(a.contiguous(), b.contiguous()).to_host_f64());

  // Narrowed views (leading dimension larger than the width), transposed or not.
  Tensor big = from_values(pattern(10 * 12, 0.2), {10, 12}, DType::f64);
  Tensor window = big.narrow(0, 2, m).narrow(1, 3, k);  // [6, 5], ld 12, offset
  Tensor window_t = big.narrow(0, 1, k).narrow(1, 4, n);  // [5, 7], ld 12
  const auto expected2 = naive_matmul(window.contiguous().to_host_f64(), window_t.contiguous().to_host_f64(), m, k, n);
  require_close(matmul(window, window_t).to_host_f64(), expected2, 1e-12);
  Tensor wt = big.narrow(0, 0, k).narrow(1, 5, m).transpose(0, 1);  // [6, 5] transposed, ld 12
  require_close(matmul(wt, b).to_host_f64(),
                naive_matmul(wt.contiguous().to_host_f64(), b.contiguous().to_host_f64(), m, k, n), 1e-12);

  // Views that are neither row- nor column-major: expanded rows and every-other-column.
  Tensor expanded = from_values(pattern(k, 0.8), {1, k}, DType::f64).expand({m, k});
  require_close(matmul(expanded, b).to_host_f64(),
                naive_matmul(expanded.contiguous().to_host_f64(), b.contiguous().to_host_f64(), m, k, n), 1e-12);
  Tensor stepped = from_values(pattern(m * 2 * k, 0.6), {m, k, 2}, DType::f64).narrow(2, 0, 1).squeeze(2);
  REQUIRE(stepped.strides() == Shape{2 * k, 2});
  require_close(matmul(stepped, b).to_host_f64(),
                naive_matmul(stepped.contiguous().to_host_f64(), b.contiguous().to_host_f64(), m, k, n), 1e-12);

  // Batched transposes: a [2, m, k] seen through transpose(-1, -2) of [2, k, m].
  Tensor batched_t = from_values(pattern(2 * k * m, 0.9), {2, k, m}, DType::f64).transpose(-1, -2);
  Tensor c = matmul(batched_t, b);
  REQUIRE(c.shape() == Shape{2, m, n});
  require_close(c.to_host_f64(), matmul(batched_t.contiguous(), b.contiguous()).to_host_f64(), 1e-12);
  // ... and a batch dim that is not outermost in memory: permute a [m, 2, k] to [2, m, k].
  Tensor inner_batch = from_values(pattern(m * 2 * k, 1.1), {m, 2, k}, DType::f64).permute({1, 0, 2});
  require_close(matmul(inner_batch, b).to_host_f64(), matmul(inner_batch.contiguous(), b.contiguous()).to_host_f64(), 1e-12);
}

TEST_CASE("matmul: shape mismatches throw with the shapes in the message", "[matmul][errors]") {
  Tensor a = zeros({2, 3});
  Tensor b = zeros({4, 5});
  REQUIRE_THROWS_AS(matmul(a, b), Error);
  REQUIRE_THROWS_WITH(matmul(a, b), Catch::Contains("[2, 3]") && Catch::Contains("[4, 5]"));
  REQUIRE_THROWS_WITH(matmul(a, zeros({2})), Catch::Contains("[2, 3]"));
  // Batch dims that do not broadcast.
  REQUIRE_THROWS_AS(matmul(zeros({2, 3, 4}), zeros({3, 4, 5})), Error);
  // 0-d operands.
  REQUIRE_THROWS_AS(matmul(scalar(1), zeros({2})), Error);
  REQUIRE_THROWS_AS(matmul(zeros({2}), scalar(1)), Error);
  REQUIRE_THROWS_AS(matmul(Tensor(), zeros({2, 2})), Error);
}

TEST_CASE("matmul: dtype mismatch throws", "[matmul][errors]") {
  REQUIRE_THROWS_AS(matmul(zeros({2, 3}), zeros({3, 2}, DType::f64)), Error);
  REQUIRE_THROWS_WITH(matmul(zeros({2, 3}), zeros({3, 2}, DType::f64)),
                      Catch::Contains("f32") && Catch::Contains("f64"));
}

TEST_CASE("matmul: empty dims", "[matmul]") {
  // k = 0: the product of empty sums is zero.
  Tensor c = matmul(zeros({2, 0}), zeros({0, 3}));
  REQUIRE(c.shape() == Shape{2, 3});
  REQUIRE(c.to_host_f64() == std::vector<double>(6, 0.0));
  REQUIRE(matmul(zeros({0, 4}), zeros({4, 3})).shape() == Shape{0, 3});
}

TEST_CASE("matmul: gradients by hand", "[matmul][grad]") {
  // L = sum(A @ B * W): dA = (W) B^T, dB = A^T (W).
  Tensor A = from_values({1, 2, 3, 4, 5, 6}, {2, 3}, DType::f64).requires_grad_();
  Tensor B = from_values({1, -1, 2, 0, 0.5, 3}, {3, 2}, DType::f64).requires_grad_();
  Tensor W = from_values({1, 2, 3, 4}, {2, 2}, DType::f64);
  sum(matmul(A, B) * W).backward();
  // dA[i, p] = sum_j W[i, j] B[p, j]
  std::vector<double> dA(6), dB(6);
  const std::vector<double> a = A.to_host_f64(), b = B.to_host_f64(), w = W.to_host_f64();
  for (int i = 0; i < 2; ++i)
    for (int p = 0; p < 3; ++p)
      for (int j = 0; j < 2; ++j) dA[i * 3 + p] += w[i * 2 + j] * b[p * 2 + j];
  for (int p = 0; p < 3; ++p)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < 2; ++i) dB[p * 2 + j] += a[i * 3 + p] * w[i * 2 + j];
  require_close(A.grad().to_host_f64(), dA, 1e-12);
  require_close(B.grad().to_host_f64(), dB, 1e-12);
}

TEST_CASE("matmul: broadcast-batched gradients reduce to the input shapes", "[matmul][grad]") {
  // L = sum(A @ B) with A [2,1,3,4], B [5,4,2]:
  // dA[i,0,r,p] = sum over the 5 broadcast items and the 2 columns of B[j,p,c] = sum_{j,c} B[j,p,c]
  // dB[j,p,c]   = sum over the 2 batch items and the 3 rows of A[i,0,r,p]   = sum_{i,r} A[i,0,r,p]
  const auto av = pattern(24, 0.3), bv = pattern(40, 0.9);
  Tensor A = from_values(av, {2, 1, 3, 4}, DType::f64).requires_grad_();
  Tensor B = from_values(bv, {5, 4, 2}, DType::f64).requires_grad_();
  sum(matmul(A, B)).backward();
  REQUIRE(A.grad().shape() == Shape{2, 1, 3, 4});
  REQUIRE(B.grad().shape() == Shape{5, 4, 2});
  std::vector<double> row_sum_b(4, 0.0), col_sum_a(4, 0.0);
  for (int j = 0; j < 5; ++j)
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 2; ++c) row_sum_b[p] += bv[j * 8 + p * 2 + c];
  for (int i = 0; i < 2; ++i)
    for (int r = 0; r < 3; ++r)
      for (int p = 0; p < 4; ++p) col_sum_a[p] += av[i * 12 + r * 4 + p];
  std::vector<double> dA(24), dB(40);
  for (int e = 0; e < 24; ++e) dA[e] = row_sum_b[e % 4];
  for (int j = 0; j < 5; ++j)
    for (int p = 0; p < 4; ++p)
      for (int c = 0; c < 2; ++c) dB[j * 8 + p * 2 + c] = col_sum_a[p];
  require_close(A.grad().to_host_f64(), dA, 1e-12);
  require_close(B.grad().to_host_f64(), dB, 1e-12);
}

TEST_CASE("matmul: gradients of 1-D operands keep their shapes", "[matmul][grad]") {
  // L = sum(M @ v): dv[p] = sum_i M[i, p], dM[i, p] = v[p].
  Tensor M = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).requires_grad_();
  Tensor v = from_values({1, 0, -1}, {3}).requires_grad_();
  sum(matmul(M, v)).backward();
  REQUIRE(v.grad().shape() == Shape{3});
  REQUIRE(v.grad().to_host_f64() == std::vector<double>{5, 7, 9});
  REQUIRE(M.grad().to_host_f64() == std::vector<double>{1, 0, -1, 1, 0, -1});
  // L = v . w (1-D @ 1-D): dv = w, dw = v.
  v.zero_grad();
  Tensor w = from_values({4, 5, 6}, {3}).requires_grad_();
  matmul(v, w).backward();
  REQUIRE(v.grad().to_host_f64() == std::vector<double>{4, 5, 6});
  REQUIRE(w.grad().to_host_f64() == std::vector<double>{1, 0, -1});
}

TEST_CASE("matmul: gradients through transposed inputs", "[matmul][grad]") {
  // L = sum(X^T @ Y) with X [3, 2] used as [2, 3], Y [3, 2]:
  // d/dX^T [i, p] = sum_j Y[p, j] -> dX[p, i] = sum_j Y[p, j].
  Tensor X = from_values({1, 2, 3, 4, 5, 6}, {3, 2}).requires_grad_();
  Tensor Y = from_values({1, 2, 3, 4, 5, 6}, {3, 2});
  sum(matmul(X.transpose(0, 1), Y)).backward();
  REQUIRE(X.grad().to_host_f64() == std::vector<double>{3, 3, 7, 7, 11, 11});
}

TEST_CASE("linear: matches matmul with the transposed weight plus bias", "[matmul][linear]") {
  const int64_t batch = 4, in = 5, out = 3;
  Tensor x = from_values(pattern(batch * in, 0.1), {batch, in}, DType::f64);
  Tensor w = from_values(pattern(out * in, 0.7), {out, in}, DType::f64);
  Tensor b = from_values({0.5, -1, 2}, {out}, DType::f64);
  Tensor y = linear(x, w, b);
  REQUIRE(y.shape() == Shape{batch, out});
  // Naive: y[r, o] = sum_i x[r, i] w[o, i] + b[o].
  const auto xv = x.to_host_f64(), wv = w.to_host_f64(), bv = b.to_host_f64();
  std::vector<double> expected(batch * out);
  for (int64_t r = 0; r < batch; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = bv[o];
      for (int64_t i = 0; i < in; ++i) acc += xv[r * in + i] * wv[o * in + i];
      expected[r * out + o] = acc;
    }
  require_close(y.to_host_f64(), expected, 1e-12);
  require_close((matmul(x, w.transpose(0, 1)) + b).to_host_f64(), expected, 1e-12);
  // Without bias.
  require_close(linear(x, w).to_host_f64(), matmul(x, w.transpose(0, 1)).to_host_f64(), 1e-12);
  // Extra leading dims and 1-D input.
  Tensor x3 = x.view({2, 2, in});
  Tensor y3 = linear(x3, w, b);
  REQUIRE(y3.shape() == Shape{2, 2, out});
  require_close(y3.to_host_f64(), expected, 1e-12);
  Tensor y1 = linear(x.narrow(0, 1, 1).squeeze(0), w, b);
  REQUIRE(y1.shape() == Shape{out});
  require_close(y1.to_host_f64(), std::vector<double>(expected.begin() + out, expected.begin() + 2 * out), 1e-12);
  // A non-contiguous input.
  Tensor xt = from_values(pattern(batch * in, 0.1), {in, batch}, DType::f64).transpose(0, 1);
  require_close(linear(xt, w, b).to_host_f64(), (matmul(xt.contiguous(), w.transpose(0, 1)) + b).to_host_f64(), 1e-12);
}

TEST_CASE("linear with no inputs or no outputs: as torch.nn.functional.linear", "[matmul][linear]") {
  // y [2, 3, out] = x [2, 3, in] W^T + b; with in = 0 every sum is empty: y is the bias
  for (const auto& [in, out] : std::vector<std::array<int64_t, 2>>{{0, 4}, {5, 0}, {0, 0}}) {
    INFO("in " << in << ", out " << out);
    const Tensor x = ones({2, 3, in}).requires_grad_(true), w = ones({out, in}).requires_grad_(true);
    const Tensor b = full({out}, 1.5).requires_grad_(true);
    const Tensor y = linear(x, w, b);
    REQUIRE(y.shape() == Shape{2, 3, out});
    REQUIRE(y.to_host_f64() == std::vector<double>(static_cast<size_t>(6 * out), in == 0 ? 1.5 : 0.0));
    backward(sum(y * y));  // dy = 2 y: db = 6 positions x 3 = 18 each; dx and dW empty or zero
    REQUIRE(x.grad().shape() == x.shape());
    REQUIRE(w.grad().shape() == w.shape());
    REQUIRE(b.grad().to_host_f64() == std::vector<double>(static_cast<size_t>(out), 18.0));
  }
  const Tensor none = linear(zeros({0, 0}), zeros({4, 0}), Tensor());  // no rows either
  REQUIRE(none.shape() == Shape{0, 4});
}

TEST_CASE("linear: errors", "[matmul][linear][errors]") {
  Tensor x = zeros({4, 5});
  REQUIRE_THROWS_AS(linear(x, zeros({3, 4})), Error);
  REQUIRE_THROWS_WITH(linear(x, zeros({3, 4})), Catch::Contains("[4, 5]") && Catch::Contains("[3, 4]"));
  REQUIRE_THROWS_AS(linear(x, zeros({3, 5}), zeros({4})), Error);
  REQUIRE_THROWS_AS(linear(x, zeros({3, 5}, DType::f64)), Error);
  REQUIRE_THROWS_AS(linear(x, zeros({5})), Error);
}

TEST_CASE("linear: gradients equal those of matmul + bias", "[matmul][linear][grad]") {
  // L = sum(linear(x, W, b) * G): dx = G W, dW = G^T x, db = column sums of G.
  const int64_t rows = 3, in = 4, out = 2;
  Tensor x = from_values(pattern(rows * in, 0.2), {rows, in}, DType::f64).requires_grad_();
  Tensor W = from_values(pattern(out * in, 1.0), {out, in}, DType::f64).requires_grad_();
  Tensor b = from_values({0.1, 0.2}, {out}, DType::f64).requires_grad_();
  Tensor G = from_values(pattern(rows * out, 2.5), {rows, out}, DType::f64);
  sum(linear(x, W, b) * G).backward();
  const auto g = G.to_host_f64(), w = W.to_host_f64(), xv = x.to_host_f64();
  std::vector<double> dx(rows * in, 0.0), dW(out * in, 0.0), db(out, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      db[o] += g[r * out + o];
      for (int64_t i = 0; i < in; ++i) {
        dx[r * in + i] += g[r * out + o] * w[o * in + i];
        dW[o * in + i] += g[r * out + o] * xv[r * in + i];
      }
    }
  require_close(x.grad().to_host_f64(), dx, 1e-12);
  require_close(W.grad().to_host_f64(), dW, 1e-12);
  require_close(b.grad().to_host_f64(), db, 1e-12);
  REQUIRE(b.grad().shape() == Shape{out});
}
