// nn/attention_weights.h: the weights behind every kind of attention. Performer's and Linformer's
// implied matrices against values worked out by hand, and for every kind the identity that makes
// them the weights: the module's output is o_proj(merge_heads(weights @ v)).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention_weights.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
using namespace tg::nn;

namespace {

void require_weight_values(const Tensor& t, const std::vector<double>& expected,
                           double margin = 1e-12) {
  const std::vector<double> got = t.to_host_f64();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(expected[i]).margin(margin));
}

// The module's output rebuilt from the weights: o_proj(merge_heads(weights @ v)).
void require_weights_explain_output(const AttentionSpec& spec, bool causal, bool implied) {
  manual_seed(11);
  MultiHeadAttention mha(16, 4, 0.0, DType::f64, spec);
  mha.eval();
  NoGrad no_grad;
  const Tensor x = uniform({2, 12, 16}, -1, 1, DType::f64);
  const SelfAttentionWeights result = self_attention_weights(mha, x, Tensor(), causal);
  REQUIRE(result.implied == implied);
  REQUIRE(result.weights.shape() == Shape{2, 4, 12, 12});
  const Tensor v = mha.split_heads(mha.v_proj->forward(x));
  const Tensor rebuilt = mha.o_proj->forward(mha.merge_heads(matmul(result.weights, v)));
  require_weight_values(rebuilt, mha.forward(x, x, x, Tensor(), false, causal).output.to_host_f64(),
                 1e-10);
  if (causal) {  // nothing above the diagonal
    const std::vector<double> w = result.weights.to_host_f64();
    for (size_t row = 0; row < w.size() / 12; ++row) {
      for (size_t key = row % 12 + 1; key < 12; ++key) REQUIRE(w[row * 12 + key] == 0);
    }
  }
}

}  // namespace

TEST_CASE("performer_implied_weights: phi(q) phi(k)^T normalised per row, by hand",
          "[attention-weights]") {
  // d = 1, M = 1, w = 1: x' = x, log phi(x) = x - x^2 / 2, so every query weighs key j by
  // e_j = exp(b_j - b_j^2 / 2): e = exp(0.5), exp(-4), exp(0) for b = 1, -2, 0.
  const Tensor q = from_values({0.3, -1.0, 2.0}, {1, 1, 3, 1}, DType::f64);
  const Tensor k = from_values({1.0, -2.0, 0.0}, {1, 1, 3, 1}, DType::f64);
  const Tensor w = from_values({1.0}, {1, 1}, DType::f64);
  const double e0 = std::exp(0.5), e1 = std::exp(-4.0), e2 = 1.0, all = e0 + e1 + e2;
  require_weight_values(performer_implied_weights(q, k, w, false),
                 {e0 / all, e1 / all, e2 / all, e0 / all, e1 / all, e2 / all, e0 / all,
                  e1 / all, e2 / all});
  require_weight_values(performer_implied_weights(q, k, w, true),
                 {1, 0, 0, e0 / (e0 + e1), e1 / (e0 + e1), 0, e0 / all, e1 / all, e2 / all});
}

TEST_CASE("linformer_implied_weights: softmax over the projected keys, times F^T, by hand",
          "[attention-weights]") {
  // Rank 1: the softmax over one projected key is 1, so every row is F^T = proj_v[:, 0].
  const Tensor q = from_values({0.3, -1.0, 2.0}, {1, 1, 3, 1}, DType::f64);
  const Tensor k = from_values({1.0, -2.0, 0.0}, {1, 1, 3, 1}, DType::f64);
  const Tensor e1 = from_values({0.7, 0.1, -0.4, 9.0}, {4, 1}, DType::f64);  // max_len 4
  const Tensor f1 = from_values({0.5, -2.0, 3.0, 9.0}, {4, 1}, DType::f64);
  require_weight_values(linformer_implied_weights(q, k, e1, f1),
                 {0.5, -2.0, 3.0, 0.5, -2.0, 3.0, 0.5, -2.0, 3.0});
  // Rank 2, E = I: scores q k^T = [1, 2] (d = 1), softmax w = [1, e] / (1 + e); F = [[1, 2],
  // [3, 4]]: A = w F^T = [w0 + 2 w1, 3 w0 + 4 w1].
  const Tensor q1 = from_values({1.0}, {1, 1, 1, 1}, DType::f64);
  const Tensor k2 = from_values({1.0, 2.0}, {1, 1, 2, 1}, DType::f64);
  const Tensor e2 = from_values({1, 0, 0, 1}, {2, 2}, DType::f64);
  const Tensor f2 = from_values({1, 2, 3, 4}, {2, 2}, DType::f64);
  const double w0 = 1 / (1 + std::exp(1.0)), w1 = 1 - w0;
  require_weight_values(linformer_implied_weights(q1, k2, e2, f2), {w0 + 2 * w1, 3 * w0 + 4 * w1});
}

TEST_CASE("self_attention_weights: the output is o_proj(merge(weights @ v)) for every kind",
          "[attention-weights]") {
  require_weights_explain_output({}, false, false);
  require_weights_explain_output({}, true, false);
  require_weights_explain_output({.kind = AttentionKind::local, .window = 3}, true, false);
  require_weights_explain_output({.kind = AttentionKind::performer, .features = 24, .seed = 3},
                                 false, true);
  require_weights_explain_output({.kind = AttentionKind::performer, .features = 24, .seed = 3},
                                 true, true);
  require_weights_explain_output({.kind = AttentionKind::performer, .features = 8, .seed = 1,
                                  .position = PositionKind::rope}, true, true);
  require_weights_explain_output({.kind = AttentionKind::linformer, .rank = 5, .max_len = 16},
                                 false, true);
  require_weights_explain_output(
      {.kind = AttentionKind::reformer, .buckets = 4, .rounds = 2, .seed = 9}, true, true);
  require_weights_explain_output(
      {.kind = AttentionKind::reformer, .buckets = 4, .rounds = 3, .seed = 2}, false, true);
}

TEST_CASE("self_attention_weights: Performer's and Reformer's rows are distributions",
          "[attention-weights]") {
  manual_seed(3);
  NoGrad no_grad;
  const Tensor x = uniform({1, 10, 8}, -1, 1, DType::f64);
  for (const AttentionSpec& spec :
       {AttentionSpec{.kind = AttentionKind::performer, .features = 16, .seed = 4},
        AttentionSpec{.kind = AttentionKind::reformer, .buckets = 2, .rounds = 2, .seed = 4}}) {
    MultiHeadAttention mha(8, 2, 0.0, DType::f64, spec);
    const std::vector<double> w =
        self_attention_weights(mha, x, Tensor(), true).weights.to_host_f64();
    for (size_t row = 0; row < w.size() / 10; ++row) {
      double total = 0;
      for (size_t key = 0; key < 10; ++key) {
        REQUIRE(w[row * 10 + key] >= 0);
        total += w[row * 10 + key];
      }
      REQUIRE(total == Approx(1).margin(1e-12));
    }
  }
}

TEST_CASE("reformer_implied_weights: a huge expanded q is a tg::Error, never a wrapped S x S",
          "[attention-weights]") {
  const Tensor rotations = zeros({1, 4, 1});
  // S = 2^32: S x S is 2^64, which wraps to 0 in an int64.
  const Tensor long_q = zeros({1, 1, 1, 4}).expand({1, 1, int64_t{1} << 32, 4});
  REQUIRE_THROWS_WITH(reformer_implied_weights(long_q, rotations, false),
                      Catch::Contains("reformer_implied_weights: S x S"));
  // S x S fits, but [B, H, S, S] is far too large to hold: refused before anything is filled.
  const Tensor wide_q = zeros({1, 1, 1, 4}).expand({int64_t{1} << 30, int64_t{1} << 29, 2, 4});
  REQUIRE_THROWS_AS(reformer_implied_weights(wide_q, rotations, false), Error);
  const Tensor square_q = zeros({1, 1, 1, 4}).expand({1, 1, int64_t{1} << 31, 4});
  REQUIRE_THROWS_AS(reformer_implied_weights(square_q, rotations, false), Error);
}

TEST_CASE("self_attention_weights: a mask for an attention that takes none is an error",
          "[attention-weights]") {
  MultiHeadAttention mha(8, 2, 0.0, DType::f64,
                         {.kind = AttentionKind::performer, .features = 4, .seed = 1});
  const Tensor x = zeros({1, 3, 8}, DType::f64);
  REQUIRE_THROWS_WITH(self_attention_weights(mha, x, causal_mask(3, 3), false),
                      Catch::Contains("no mask is supported"));
}
