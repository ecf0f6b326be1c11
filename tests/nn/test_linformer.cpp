// linformer_attention (nn/linformer.h): identity projections give plain softmax attention, random
// projections match a host loop, padded keys change nothing, dropout replays from the generator,
// and the errors (causal, shapes) name the function.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/linformer.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

void require_close(const std::vector<double>& a, const std::vector<double>& b, double tolerance) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("element " << i);
    REQUIRE(std::isfinite(a[i]));
    REQUIRE(a[i] == Approx(b[i]).margin(tolerance));
  }
}

// [rows, cols] with the identity in its first cols rows and `filler` below.
Tensor identity_on_top(int64_t rows, int64_t cols, double filler) {
  std::vector<double> values(rows * cols, filler);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (r < cols) values[r * cols + c] = r == c ? 1.0 : 0.0;
    }
  }
  return from_values(values, {rows, cols}, DType::f64);
}

// The Linformer formula with loops, for one head: q [Sq, d], k [Sk, d], v [Sk, dv], E, F [Sk,
// rank]: k'_r = sum_j E_jr k_j, v'_r = sum_j F_jr v_j, out_i = sum_r softmax_r(q_i . k'_r /
// sqrt(d)) v'_r.
std::vector<double> linformer_on_host(const std::vector<double>& q, const std::vector<double>& k,
                                      const std::vector<double>& v, const std::vector<double>& e,
                                      const std::vector<double>& f, int64_t sq, int64_t sk,
                                      int64_t d, int64_t dv, int64_t rank) {
  std::vector<double> pk(rank * d, 0.0), pv(rank * dv, 0.0), out(sq * dv, 0.0);
  for (int64_t r = 0; r < rank; ++r) {
    for (int64_t j = 0; j < sk; ++j) {
      for (int64_t c = 0; c < d; ++c) pk[r * d + c] += e[j * rank + r] * k[j * d + c];
      for (int64_t c = 0; c < dv; ++c) pv[r * dv + c] += f[j * rank + r] * v[j * dv + c];
    }
  }
  for (int64_t i = 0; i < sq; ++i) {
    std::vector<double> scores(rank);
    double top = -1e300, total = 0;
    for (int64_t r = 0; r < rank; ++r) {
      double s = 0;
      for (int64_t c = 0; c < d; ++c) s += q[i * d + c] * pk[r * d + c];
      scores[r] = s / std::sqrt(static_cast<double>(d));
      top = std::max(top, scores[r]);
    }
    for (double& s : scores) total += (s = std::exp(s - top));
    for (int64_t r = 0; r < rank; ++r) {
      for (int64_t c = 0; c < dv; ++c) out[i * dv + c] += scores[r] / total * pv[r * dv + c];
    }
  }
  return out;
}

std::vector<double> slice(const std::vector<double>& values, int64_t item, int64_t size) {
  return {values.begin() + item * size, values.begin() + (item + 1) * size};
}

}  // namespace

TEST_CASE("linformer: rank = Sk and E = F = identity is softmax attention", "[linformer]") {
  manual_seed(21);
  const Tensor q = uniform({2, 3, 4, 5}, -1, 1, DType::f64);
  const Tensor k = uniform({2, 3, 6, 5}, -1, 1, DType::f64);
  const Tensor v = uniform({2, 3, 6, 5}, -1, 1, DType::f64);
  // max_len 9 > Sk = 6: the rows past Sk (filled with 7) must be narrowed away.
  const Tensor eye = identity_on_top(9, 6, 7.0);
  const Tensor out = nn::linformer_attention(q, k, v, eye, eye, Tensor(), false, 0.0);
  REQUIRE(out.shape() == Shape{2, 3, 4, 5});
  const Tensor reference = nn::explicit_attention(q, k, v, Tensor(), false, 0.0).first;
  require_close(out.to_host_f64(), reference.to_host_f64(), 1e-12);
}

TEST_CASE("linformer: random projections match the host loop, with dv != d", "[linformer]") {
  manual_seed(23);
  const int64_t b = 2, h = 2, sq = 3, sk = 5, d = 4, dv = 3, rank = 3;
  const Tensor q = uniform({b, h, sq, d}, -1, 1, DType::f64);
  const Tensor k = uniform({b, h, sk, d}, -1, 1, DType::f64);
  const Tensor v = uniform({b, h, sk, dv}, -1, 1, DType::f64);
  const Tensor e = nn::linformer_projection(sk, rank, DType::f64);
  const Tensor f = nn::linformer_projection(sk, rank, DType::f64);
  const std::vector<double> out =
      nn::linformer_attention(q, k, v, e, f, Tensor(), false, 0.0).to_host_f64();
  REQUIRE(out.size() == static_cast<size_t>(b * h * sq * dv));
  const auto qs = q.to_host_f64(), ks = k.to_host_f64(), vs = v.to_host_f64();
  for (int64_t item = 0; item < b * h; ++item) {
    const auto expected = linformer_on_host(slice(qs, item, sq * d), slice(ks, item, sk * d),
                                            slice(vs, item, sk * dv), e.to_host_f64(),
                                            f.to_host_f64(), sq, sk, d, dv, rank);
    require_close(slice(out, item, sq * dv), expected, 1e-12);
  }
}

TEST_CASE("linformer: padded keys change nothing", "[linformer]") {
  manual_seed(29);
  const int64_t sk = 6, d = 4, rank = 4;
  const Tensor q = uniform({2, 2, 3, d}, -1, 1, DType::f64);
  const Tensor k = uniform({2, 2, sk, d}, -1, 1, DType::f64);
  const Tensor v = uniform({2, 2, sk, d}, -1, 1, DType::f64);
  const Tensor e = nn::linformer_projection(8, rank, DType::f64);
  const Tensor f = nn::linformer_projection(8, rank, DType::f64);
  const std::vector<int64_t> lengths = {6, 2};
  std::vector<bool> real;
  for (int64_t length : lengths) {
    for (int64_t j = 0; j < sk; ++j) real.push_back(j < length);
  }
  const Tensor padding = from_bools(real, {2, sk});
  const std::vector<double> out =
      nn::linformer_attention(q, k, v, e, f, padding, false, 0.0).to_host_f64();

  // Each item equals Linformer on its real keys only (E and F narrowed to its length).
  for (int64_t item = 0; item < 2; ++item) {
    const Tensor alone = nn::linformer_attention(
        q.narrow(0, item, 1), k.narrow(0, item, 1).narrow(2, 0, lengths[item]),
        v.narrow(0, item, 1).narrow(2, 0, lengths[item]), e, f, Tensor(), false, 0.0);
    require_close(slice(out, item, 2 * 3 * d), alone.to_host_f64(), 1e-12);
  }
  // New values at the padded positions: the same output.
  const Tensor k2 = where(padding.reshape({2, 1, sk, 1}), k, scalar(50.0, DType::f64));
  const Tensor v2 = where(padding.reshape({2, 1, sk, 1}), v, scalar(-50.0, DType::f64));
  require_close(nn::linformer_attention(q, k2, v2, e, f, padding, false, 0.0).to_host_f64(), out,
                1e-12);
  // Without the padding they do count (so the check above tests something).
  const std::vector<double> unpadded =
      nn::linformer_attention(q, k2, v2, e, f, Tensor(), false, 0.0).to_host_f64();
  REQUIRE(std::abs(unpadded.back() - out.back()) > 1e-3);
}

TEST_CASE("linformer: gradients reach q, k, v and both projections", "[linformer]") {
  manual_seed(31);
  Tensor q = uniform({1, 2, 3, 4}, -1, 1, DType::f64).requires_grad_();
  Tensor k = uniform({1, 2, 5, 4}, -1, 1, DType::f64).requires_grad_();
  Tensor v = uniform({1, 2, 5, 4}, -1, 1, DType::f64).requires_grad_();
  Tensor e = nn::linformer_projection(7, 2, DType::f64).requires_grad_();
  Tensor f = nn::linformer_projection(7, 2, DType::f64).requires_grad_();
  sum(nn::linformer_attention(q, k, v, e, f, Tensor(), false, 0.0)).backward();
  for (const Tensor& t : {q, k, v, e, f}) REQUIRE(t.grad().defined());
  // Rows of E and F past Sk take no part: their gradient is 0.
  const std::vector<double> de = e.grad().to_host_f64();
  for (int64_t i = 5 * 2; i < 7 * 2; ++i) REQUIRE(de[i] == 0.0);
}

TEST_CASE("linformer: dropout on the [Sq, rank] weights replays from the generator state",
          "[linformer]") {
  manual_seed(37);
  const Tensor q = uniform({2, 2, 4, 4}, -1, 1, DType::f64);
  const Tensor k = uniform({2, 2, 6, 4}, -1, 1, DType::f64);
  const Tensor v = uniform({2, 2, 6, 4}, -1, 1, DType::f64);
  const Tensor e = nn::linformer_projection(6, 3, DType::f64);
  const Tensor f = nn::linformer_projection(6, 3, DType::f64);
  set_rng_state({5, 0});
  const std::vector<double> first =
      nn::linformer_attention(q, k, v, e, f, Tensor(), false, 0.5).to_host_f64();
  set_rng_state({5, 0});
  const std::vector<double> again =
      nn::linformer_attention(q, k, v, e, f, Tensor(), false, 0.5).to_host_f64();
  REQUIRE(first == again);
  const std::vector<double> plain =
      nn::linformer_attention(q, k, v, e, f, Tensor(), false, 0.0).to_host_f64();
  REQUIRE(first != plain);
  // The same as dropping the weights by hand with the same state.
  const double scale = 0.5;  // 1 / sqrt(d)
  const Tensor pk = matmul(e.transpose(0, 1), k), pv = matmul(f.transpose(0, 1), v);
  set_rng_state({5, 0});
  const Tensor weights = dropout(softmax(matmul(q, pk.transpose(-1, -2)) * scale, -1), 0.5, true);
  require_close(first, matmul(weights, pv).to_host_f64(), 1e-12);
}

TEST_CASE("linformer: causal attention and bad shapes are tg::Errors naming linformer",
          "[linformer]") {
  const Tensor q = zeros({1, 2, 3, 4}, DType::f64), kv = zeros({1, 2, 5, 4}, DType::f64);
  const Tensor e = zeros({5, 2}, DType::f64);
  REQUIRE_THROWS_WITH(nn::linformer_attention(q, kv, kv, e, e, Tensor(), true, 0.0),
                      Catch::Contains("linformer") && Catch::Contains("causal"));
  // max_len 4 < Sk 5.
  REQUIRE_THROWS_WITH(
      nn::linformer_attention(q, kv, kv, zeros({4, 2}, DType::f64), e, Tensor(), false, 0.0),
      Catch::Contains("linformer_attention") && Catch::Contains("[4, 2]"));
  // Ranks of E and F differ.
  REQUIRE_THROWS_AS(
      nn::linformer_attention(q, kv, kv, e, zeros({5, 3}, DType::f64), Tensor(), false, 0.0),
      Error);
  // Head sizes of q and k differ.
  REQUIRE_THROWS_WITH(
      nn::linformer_attention(q, zeros({1, 2, 5, 3}, DType::f64), kv, e, e, Tensor(), false, 0.0),
      Catch::Contains("linformer_attention") && Catch::Contains("[1, 2, 5, 3]"));
  // key_padding of the wrong length.
  REQUIRE_THROWS_WITH(nn::linformer_attention(q, kv, kv, e, e, ones({1, 4}, DType::b8), false, 0.0),
                      Catch::Contains("key_padding"));
  REQUIRE_THROWS_AS(nn::linformer_attention(q, kv, kv, e, e, Tensor(), false, 1.0), Error);
}

TEST_CASE("linformer_projection: U(-1/sqrt(rank), 1/sqrt(rank)) from the global generator",
          "[linformer]") {
  manual_seed(41);
  const Tensor a = nn::linformer_projection(64, 16);
  REQUIRE(a.shape() == Shape{64, 16});
  REQUIRE(a.dtype() == DType::f32);
  const std::vector<double> values = a.to_host_f64();
  double lowest = 1, highest = -1;
  for (double x : values) lowest = std::min(lowest, x), highest = std::max(highest, x);
  REQUIRE(lowest >= -0.25);
  REQUIRE(highest <= 0.25);
  REQUIRE(lowest < -0.2);  // 1024 draws cover the range
  REQUIRE(highest > 0.2);
  manual_seed(41);
  REQUIRE(nn::linformer_projection(64, 16).to_host_f64() == values);
  REQUIRE(nn::linformer_projection(64, 16).to_host_f64() != values);  // the generator moved on
  REQUIRE(nn::linformer_projection(3, 2, DType::f64).dtype() == DType::f64);
  REQUIRE_THROWS_AS(nn::linformer_projection(0, 2), Error);
}

TEST_CASE("linformer module: a mask means what it means on the main path; [Sq, Sk] is refused",
          "[linformer]") {
  // B == Sq == Sk == 4: a 2-D mask is [Sq, Sk] (broadcast over batch and heads), never [B, Sk].
  manual_seed(29);
  nn::MultiHeadAttention mha(8, 2, 0.0, DType::f64,
                             {.kind = nn::AttentionKind::linformer, .rank = 3, .max_len = 6});
  const Tensor x = uniform({4, 4, 8}, -1, 1, DType::f64);
  REQUIRE_THROWS_WITH(mha.forward(x, nn::causal_mask(4, 4)),
                      Catch::Contains("linformer") && Catch::Contains("[4, 4]") &&
                          Catch::Contains("key padding mask"));
  // A padding mask [B, 1, 1, Sk] is the key padding of the op on the projected heads.
  const Tensor padding = nn::padding_mask({4, 2, 3, 1}, 4);
  const std::vector<double> got = mha.forward(x, padding).output.to_host_f64();
  const Tensor q = mha.split_heads(mha.q_proj->forward(x));
  const Tensor k = mha.split_heads(mha.k_proj->forward(x));
  const Tensor v = mha.split_heads(mha.v_proj->forward(x));
  const Tensor heads = nn::linformer_attention(q, k, v, mha.proj_k, mha.proj_v,
                                               padding.reshape({4, 4}), false, 0.0);
  require_close(got, mha.o_proj->forward(mha.merge_heads(heads)).to_host_f64(), 1e-12);
}

TEST_CASE("linformer: an empty sequence gives an empty output, or 0 without keys", "[linformer]") {
  const Tensor e = uniform({5, 2}, -1, 1, DType::f64);
  const Tensor some = uniform({1, 2, 3, 4}, -1, 1, DType::f64);
  const Tensor none = zeros({1, 2, 0, 4}, DType::f64);
  REQUIRE(nn::linformer_attention(none, some, some, e, e, Tensor(), false, 0.0).shape() ==
          Shape{1, 2, 0, 4});
  const Tensor no_key = nn::linformer_attention(some, none, none, e, e, Tensor(), false, 0.0);
  REQUIRE(no_key.shape() == Shape{1, 2, 3, 4});
  for (const double value : no_key.to_host_f64()) REQUIRE(value == 0.0);
}
