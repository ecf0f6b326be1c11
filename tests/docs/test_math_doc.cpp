// docs/math.md derives each backward rule by hand and ends at a closed form. Here each closed form
// is evaluated as written there, in plain loops over doubles, and compared with what the library's
// backward() (or optimizer step) computes on a small input: softmax, log_softmax, cross-entropy,
// matmul (batched, one operand broadcast), linear, a broadcast input, layer norm, attention (the
// fused op and the explicit ops), Adam's bias-corrected steps, dropout's mask and GELU. Finite
// differences are gradcheck's job (tests/ops, tests/nn); these tests hold the page's formulas,
// not only the code, to the truth. The gradient checks run twice, on the normal path and under
// tg::Textbook (the plain kernels the page links).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

// Everything in one named namespace: in a unity batch, names of this file meet other files'.
namespace math_doc {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// n values of no pattern that matters, in about [-1.3, 1.3]; `phase` tells inputs apart.
std::vector<double> wavy(size_t n, double phase) {
  std::vector<double> values(n);
  for (size_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(i);
    values[i] = std::sin(1.3 * x + phase) + 0.3 * std::cos(0.7 * x * x + 2 * phase);
  }
  return values;
}

Tensor leaf(const std::vector<double>& values, const Shape& shape) {
  return from_values(values, shape, DType::f64).requires_grad_();
}

Tensor constant(const std::vector<double>& values, const Shape& shape) {
  return from_values(values, shape, DType::f64);
}

void require_close(const Tensor& got_tensor, const std::vector<double>& want, double margin = 1e-10) {
  const std::vector<double> got = got_tensor.to_host_f64();
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i);
    REQUIRE(got[i] == Approx(want[i]).epsilon(margin).margin(margin));
  }
}

// Runs `check` on the normal path, then under tg::Textbook (plain loops, explicit attention).
template <typename Check>
void on_both_paths(Check check) {
  {
    INFO("normal path");
    check();
  }
  {
    INFO("under tg::Textbook");
    Textbook textbook;
    check();
  }
}

// softmax of each row of x [rows, n], max-subtracted, as section 1 writes it.
std::vector<double> softmax_rows(const std::vector<double>& x, size_t rows, size_t n) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < rows; ++r) {
    double largest = kNegInf;
    for (size_t k = 0; k < n; ++k) largest = std::max(largest, x[r * n + k]);
    if (largest == kNegInf) continue;  // a fully masked row: 0
    double total = 0;
    for (size_t k = 0; k < n; ++k) total += std::exp(x[r * n + k] - largest);
    for (size_t k = 0; k < n; ++k) y[r * n + k] = std::exp(x[r * n + k] - largest) / total;
  }
  return y;
}


TEST_CASE("docs/math.md 1: softmax's backward is y * (g - sum(g * y)), summing to 0", "[docs][math]") {
  const size_t rows = 3, n = 5;
  std::vector<double> x = wavy(rows * n, 0.1);
  for (size_t k = 0; k < n; ++k) x[2 * n + k] += 1000;  // e^1000 overflows without the max
  const std::vector<double> g = wavy(rows * n, 0.7);
  const std::vector<double> y = softmax_rows(x, rows, n);
  std::vector<double> want(rows * n);
  for (size_t r = 0; r < rows; ++r) {
    double gy = 0;  // sum_i g_i y_i
    for (size_t i = 0; i < n; ++i) gy += g[r * n + i] * y[r * n + i];
    for (size_t j = 0; j < n; ++j) want[r * n + j] = y[r * n + j] * (g[r * n + j] - gy);
  }
  on_both_paths([&] {
    Tensor input = leaf(x, {3, 5});
    Tensor out = softmax(input, -1);
    require_close(out, y);
    out.backward(constant(g, {3, 5}));
    require_close(input.grad(), want);
    const std::vector<double> dx = input.grad().to_host_f64();
    for (size_t r = 0; r < rows; ++r) {
      double total = 0;
      for (size_t j = 0; j < n; ++j) total += dx[r * n + j];
      REQUIRE(total == Approx(0).margin(1e-12));
    }
  });
}

TEST_CASE("docs/math.md 1: log_softmax's backward is g - p sum(g)", "[docs][math]") {
  const size_t rows = 2, n = 4;
  const std::vector<double> x = wavy(rows * n, 0.4), g = wavy(rows * n, 1.9);
  const std::vector<double> p = softmax_rows(x, rows, n);
  std::vector<double> want(rows * n);
  for (size_t r = 0; r < rows; ++r) {
    double g_sum = 0;
    for (size_t i = 0; i < n; ++i) g_sum += g[r * n + i];
    for (size_t j = 0; j < n; ++j) want[r * n + j] = g[r * n + j] - p[r * n + j] * g_sum;
  }
  on_both_paths([&] {
    Tensor input = leaf(x, {2, 4});
    log_softmax(input, -1).backward(constant(g, {2, 4}));
    require_close(input.grad(), want);
  });
}

TEST_CASE("docs/math.md 2: cross-entropy's gradient is (softmax - onehot) / N, 0 for ignored rows",
          "[docs][math]") {
  const size_t rows = 4, classes = 5;
  const std::vector<double> z = wavy(rows * classes, 2.3);
  const std::vector<int64_t> target = {2, 0, -100, 4};  // row 2 ignored: N = 3
  const std::vector<double> p = softmax_rows(z, rows, classes);
  std::vector<double> want(rows * classes, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    if (target[r] < 0) continue;
    for (size_t j = 0; j < classes; ++j) {
      const double onehot = static_cast<int64_t>(j) == target[r] ? 1.0 : 0.0;
      want[r * classes + j] = (p[r * classes + j] - onehot) / 3.0;
    }
  }
  on_both_paths([&] {
    Tensor logits = leaf(z, {4, 5});
    cross_entropy(logits, from_indices(target, {4})).backward();
    require_close(logits.grad(), want);
  });
}

TEST_CASE("docs/math.md 3: matmul's dA = G B^T and dB = A^T G, B's summed over the batch it was "
          "broadcast along",
          "[docs][math]") {
  const size_t batch = 2, m = 3, k = 4, n = 2;
  const std::vector<double> a = wavy(batch * m * k, 0.2), b = wavy(k * n, 1.1);
  const std::vector<double> g = wavy(batch * m * n, 3.0);
  std::vector<double> want_a(a.size(), 0.0), want_b(b.size(), 0.0);
  for (size_t item = 0; item < batch; ++item) {
    const double* a_item = a.data() + item * m * k;
    const double* g_item = g.data() + item * m * n;
    for (size_t row = 0; row < m; ++row) {
      for (size_t col = 0; col < k; ++col) {
        double total = 0;  // (G B^T)_{row, col} = sum_j G_{row, j} B_{col, j}
        for (size_t j = 0; j < n; ++j) total += g_item[row * n + j] * b[col * n + j];
        want_a[item * m * k + row * k + col] = total;
      }
    }
    for (size_t row = 0; row < k; ++row) {
      for (size_t col = 0; col < n; ++col) {
        double total = 0;  // (A^T G)_{row, col} = sum_i A_{i, row} G_{i, col}, summed over items
        for (size_t i = 0; i < m; ++i) total += a_item[i * k + row] * g_item[i * n + col];
        want_b[row * n + col] += total;
      }
    }
  }
  on_both_paths([&] {
    Tensor lhs = leaf(a, {2, 3, 4}), rhs = leaf(b, {4, 2});
    matmul(lhs, rhs).backward(constant(g, {2, 3, 2}));
    require_close(lhs.grad(), want_a);
    require_close(rhs.grad(), want_b);
  });
}

TEST_CASE("docs/math.md 3: linear's dx = G W, dW = G^T x, db = the column sums of G", "[docs][math]") {
  const size_t rows = 5, in = 3, out = 2;
  const std::vector<double> x = wavy(rows * in, 0.5), w = wavy(out * in, 1.5), b = wavy(out, 2.5);
  const std::vector<double> g = wavy(rows * out, 3.5);
  std::vector<double> want_x(x.size(), 0.0), want_w(w.size(), 0.0), want_b(b.size(), 0.0);
  for (size_t r = 0; r < rows; ++r) {
    for (size_t i = 0; i < out; ++i) {
      const double grad = g[r * out + i];
      for (size_t c = 0; c < in; ++c) {
        want_x[r * in + c] += grad * w[i * in + c];  // (G W)_{r, c}
        want_w[i * in + c] += grad * x[r * in + c];  // (G^T x)_{i, c}
      }
      want_b[i] += grad;  // sum over rows
    }
  }
  on_both_paths([&] {
    Tensor input = leaf(x, {5, 3}), weight = leaf(w, {2, 3}), bias = leaf(b, {2});
    linear(input, weight, bias).backward(constant(g, {5, 2}));
    require_close(input.grad(), want_x);
    require_close(weight.grad(), want_w);
    require_close(bias.grad(), want_b);
  });
}

TEST_CASE("docs/math.md 4: a broadcast input's gradient is summed over the dims it was broadcast "
          "along",
          "[docs][math]") {
  // a [4, 3, 5] * b [3, 1]: b lacks dim 0 and has size 1 in dim 2, so db [3, 1] sums over both.
  const size_t outer = 4, mid = 3, inner = 5;
  const std::vector<double> a = wavy(outer * mid * inner, 0.3), b = wavy(mid, 1.3);
  const std::vector<double> g = wavy(a.size(), 2.1);
  std::vector<double> want_a(a.size()), want_b(mid, 0.0);
  for (size_t n = 0; n < outer; ++n) {
    for (size_t j = 0; j < mid; ++j) {
      for (size_t l = 0; l < inner; ++l) {
        const size_t at = (n * mid + j) * inner + l;
        want_a[at] = g[at] * b[j];   // d(a * b)/da = b, in the output's shape already
        want_b[j] += g[at] * a[at];  // d(a * b)/db = a, summed over the copies of b
      }
    }
  }
  on_both_paths([&] {
    Tensor lhs = leaf(a, {4, 3, 5}), rhs = leaf(b, {3, 1});
    mul(lhs, rhs).backward(constant(g, {4, 3, 5}));
    require_close(lhs.grad(), want_a);
    REQUIRE(rhs.grad().shape() == Shape{3, 1});
    require_close(rhs.grad(), want_b);
  });
}

TEST_CASE("docs/math.md 5: layer norm's dx = r (g' - mean(g') - xhat mean(g' xhat)), g' = g gamma",
          "[docs][math]") {
  const size_t rows = 3, n = 6;
  const double eps = 1e-5;
  std::vector<double> x = wavy(rows * n, 0.6);
  for (size_t k = 0; k < n; ++k) x[n + k] = 50 + 20 * x[n + k];  // a row far from mean 0, var 1
  for (size_t k = 0; k < n; ++k) x[2 * n + k] *= 1e-3;            // one where eps matters
  const std::vector<double> gamma = wavy(n, 1.7), beta = wavy(n, 2.9), g = wavy(rows * n, 0.9);
  std::vector<double> want_x(x.size()), want_gamma(n, 0.0), want_beta(n, 0.0);
  for (size_t r = 0; r < rows; ++r) {
    const double* row = x.data() + r * n;
    double mu = 0, var = 0;
    for (size_t k = 0; k < n; ++k) mu += row[k] / n;
    for (size_t k = 0; k < n; ++k) var += (row[k] - mu) * (row[k] - mu) / n;
    const double rstd = 1 / std::sqrt(var + eps);
    std::vector<double> xhat(n), g_prime(n);
    double mean_g = 0, mean_gx = 0;
    for (size_t k = 0; k < n; ++k) {
      xhat[k] = (row[k] - mu) * rstd;
      g_prime[k] = g[r * n + k] * gamma[k];
      mean_g += g_prime[k] / n;
      mean_gx += g_prime[k] * xhat[k] / n;
      want_gamma[k] += g[r * n + k] * xhat[k];
      want_beta[k] += g[r * n + k];
    }
    for (size_t j = 0; j < n; ++j) want_x[r * n + j] = rstd * (g_prime[j] - mean_g - xhat[j] * mean_gx);
  }
  on_both_paths([&] {
    Tensor input = leaf(x, {3, 6}), weight = leaf(gamma, {6}), bias = leaf(beta, {6});
    layer_norm(input, {6}, weight, bias, eps).backward(constant(g, {3, 6}));
    require_close(input.grad(), want_x, 1e-9);
    require_close(weight.grad(), want_gamma);
    require_close(bias.grad(), want_beta);
  });
}

TEST_CASE("docs/math.md 6: attention's dV = P^T dO, dS = P * (dP - rowsum(dP * P)), dQ = s dS K, "
          "dK = s dS^T Q; D_i = dO_i . O_i",
          "[docs][math]") {
  const size_t heads = 2, sq = 3, sk = 5, d = 4, dv = 3;
  const double s = 1 / std::sqrt(static_cast<double>(d));
  const std::vector<double> q = wavy(heads * sq * d, 0.15), k = wavy(heads * sk * d, 1.25);
  const std::vector<double> v = wavy(heads * sk * dv, 2.35), d_out = wavy(heads * sq * dv, 3.45);
  // Query i may not see key j where allowed is false: a different pattern in each row.
  std::vector<bool> allowed(sq * sk, true);
  allowed[0 * sk + 4] = allowed[1 * sk + 0] = allowed[1 * sk + 2] = allowed[2 * sk + 1] = false;

  std::vector<double> want_out(heads * sq * dv), want_q(q.size()), want_k(k.size(), 0.0);
  std::vector<double> want_v(v.size(), 0.0);
  for (size_t h = 0; h < heads; ++h) {
    const double* qh = q.data() + h * sq * d;
    const double* kh = k.data() + h * sk * d;
    const double* vh = v.data() + h * sk * dv;
    const double* d_oh = d_out.data() + h * sq * dv;
    std::vector<double> scores(sq * sk);  // S = s Q K^T, -inf where masked
    for (size_t i = 0; i < sq; ++i) {
      for (size_t j = 0; j < sk; ++j) {
        double dot = 0;
        for (size_t c = 0; c < d; ++c) dot += qh[i * d + c] * kh[j * d + c];
        scores[i * sk + j] = allowed[i * sk + j] ? s * dot : kNegInf;
      }
    }
    const std::vector<double> probs = softmax_rows(scores, sq, sk);  // P
    std::vector<double> d_probs(sq * sk), d_scores(sq * sk);
    for (size_t i = 0; i < sq; ++i) {
      for (size_t c = 0; c < dv; ++c) {
        double total = 0;  // O = P V
        for (size_t j = 0; j < sk; ++j) total += probs[i * sk + j] * vh[j * dv + c];
        want_out[(h * sq + i) * dv + c] = total;
      }
      for (size_t j = 0; j < sk; ++j) {
        double dot = 0;  // dP = dO V^T
        for (size_t c = 0; c < dv; ++c) dot += d_oh[i * dv + c] * vh[j * dv + c];
        d_probs[i * sk + j] = dot;
      }
      double row_sum = 0;  // rowsum(dP * P)
      for (size_t j = 0; j < sk; ++j) row_sum += d_probs[i * sk + j] * probs[i * sk + j];
      double out_dot = 0;  // D_i = dO_i . O_i, the shortcut
      for (size_t c = 0; c < dv; ++c) out_dot += d_oh[i * dv + c] * want_out[(h * sq + i) * dv + c];
      REQUIRE(out_dot == Approx(row_sum).margin(1e-12));
      for (size_t j = 0; j < sk; ++j) {  // dS = P * (dP - rowsum(dP * P))
        d_scores[i * sk + j] = probs[i * sk + j] * (d_probs[i * sk + j] - row_sum);
      }
    }
    for (size_t j = 0; j < sk; ++j) {
      for (size_t c = 0; c < dv; ++c) {
        double total = 0;  // dV = P^T dO
        for (size_t i = 0; i < sq; ++i) total += probs[i * sk + j] * d_oh[i * dv + c];
        want_v[(h * sk + j) * dv + c] = total;
      }
    }
    for (size_t i = 0; i < sq; ++i) {
      for (size_t c = 0; c < d; ++c) {
        double total = 0;  // dQ = s dS K
        for (size_t j = 0; j < sk; ++j) total += d_scores[i * sk + j] * kh[j * d + c];
        want_q[(h * sq + i) * d + c] = s * total;
      }
    }
    for (size_t j = 0; j < sk; ++j) {
      for (size_t c = 0; c < d; ++c) {
        double total = 0;  // dK = s dS^T Q
        for (size_t i = 0; i < sq; ++i) total += d_scores[i * sk + j] * qh[i * d + c];
        want_k[(h * sk + j) * d + c] = s * total;
      }
    }
  }

  const Tensor mask = from_bools(allowed, {3, 5});
  const Tensor grad_out = constant(d_out, {1, 2, 3, 3});
  on_both_paths([&] {
    for (const bool fused : {true, false}) {
      INFO((fused ? "scaled_dot_product_attention" : "explicit_attention"));
      Tensor query = leaf(q, {1, 2, 3, 4}), key = leaf(k, {1, 2, 5, 4}), value = leaf(v, {1, 2, 5, 3});
      const Tensor out = fused ? scaled_dot_product_attention(query, key, value, mask)
                               : nn::explicit_attention(query, key, value, mask, false, 0.0).first;
      require_close(out, want_out);
      out.backward(grad_out);
      require_close(query.grad(), want_q);
      require_close(key.grad(), want_k);
      require_close(value.grad(), want_v);
    }
  });
}

TEST_CASE("docs/math.md 7: under a constant gradient Adam's bias-corrected m_hat = g and v_hat = g^2, "
          "so every step is lr g / (|g| + eps)",
          "[docs][math]") {
  // Uncorrected, the first step would be lr 0.1 g / (sqrt(0.001) |g| + eps), about 3.2 lr; and
  // for g = 1e-7 the eps term shows: the step is lr / 1.1, not lr.
  const std::vector<double> start = {0.5, -2.0, 1.25, 0.0};
  const std::vector<double> gradient = {0.3, -1e-7, 4.0, -0.02};
  const double lr = 0.01, eps = 1e-8;
  for (const DType dtype : {DType::f64, DType::f32}) {  // f32: the vectorised loop too
    INFO(dtype_name(dtype));
    const double margin = dtype == DType::f64 ? 1e-12 : 1e-6;
    Tensor param = from_values(start, {4}, dtype).requires_grad_();
    const Tensor slope = from_values(gradient, {4}, dtype);
    Adam adam({param}, lr, {0.9, 0.999}, eps);
    std::vector<double> expected = param.to_host_f64();
    for (int step = 1; step <= 5; ++step) {
      INFO("step " << step);
      adam.zero_grad();
      sum(mul(param, slope)).backward();  // the gradient is `slope`, every step
      adam.step();
      for (size_t i = 0; i < expected.size(); ++i) {
        expected[i] -= lr * gradient[i] / (std::abs(gradient[i]) + eps);
      }
      require_close(param, expected, margin);
    }
  }
}

TEST_CASE("docs/math.md 8: dropout keeps x / (1 - p) or 0, its mask averages 1, and dx = g * mask",
          "[docs][math]") {
  manual_seed(11);
  const double p = 0.25;
  const std::vector<double> x = wavy(1000, 0.8), g = wavy(1000, 1.8);
  Tensor input = leaf(x, {1000});
  const Tensor out = dropout(input, p, /*training=*/true);
  out.backward(constant(g, {1000}));
  const std::vector<double> y = out.to_host_f64(), dx = input.grad().to_host_f64();
  size_t kept = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    INFO("element " << i << ": x " << x[i] << ", y " << y[i]);
    const bool is_kept = y[i] != 0;
    kept += is_kept ? 1 : 0;
    const double mask = is_kept ? 1 / (1 - p) : 0.0;
    REQUIRE(y[i] == Approx(x[i] * mask).margin(1e-12));
    REQUIRE(dx[i] == Approx(g[i] * mask).margin(1e-12));
  }
  REQUIRE(kept > 700);  // about 750 of 1000 kept: the mask's mean kept / (1000 (1 - p)) near 1
  REQUIRE(kept < 800);

  // E[y] = x: over many elements of x = 1 the mean of y is near 1 (its standard deviation here is
  // sqrt(p / (1 - p) / n) = 0.0018).
  const Tensor mean_out = mean(dropout(ones({100000}, DType::f64), p, true));
  REQUIRE(mean_out.to_host_f64()[0] == Approx(1.0).margin(0.01));
}

TEST_CASE("docs/math.md 9: GELU's derivative is Phi(x) + x phi(x)", "[docs][math]") {
  std::vector<double> x;
  for (int i = -16; i <= 16; ++i) x.push_back(0.25 * i + 0.01);
  x.push_back(0.0);
  std::vector<double> want(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double cdf = 0.5 * (1 + std::erf(x[i] / std::numbers::sqrt2));
    const double pdf = std::exp(-0.5 * x[i] * x[i]) / std::sqrt(2 * std::numbers::pi);
    want[i] = cdf + x[i] * pdf;
  }
  REQUIRE(want.back() == 0.5);  // gelu'(0) = Phi(0)
  on_both_paths([&] {
    for (const DType dtype : {DType::f64, DType::f32}) {  // f32: the vectorised backward too
      INFO(dtype_name(dtype));
      Tensor input = from_values(x, {static_cast<int64_t>(x.size())}, dtype).requires_grad_();
      sum(gelu(input)).backward();
      require_close(input.grad(), want, dtype == DType::f64 ? 1e-12 : 1e-6);
    }
  });
}

}  // namespace math_doc
