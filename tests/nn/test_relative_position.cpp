// Learned relative positions (nn/relative_position.h) and MultiHeadAttention with them: T5's
// buckets against values worked out by hand from its formula, the [heads, Sq + Sk - 1] bias and
// its gradient to the table, Shaw's relative logits against plain loops, and the modules: fused
// and explicit paths agree, Shaw's attention equals a reference written out in loops, the tables'
// names and gradients, and the refused combinations.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/gradcheck.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/relative_position.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
using namespace tg::nn;

namespace {

// (relative position j - i, bucket) pairs.
using Buckets = std::vector<std::pair<int64_t, int64_t>>;

void require_buckets(const Buckets& expected, bool bidirectional, int64_t buckets,
                     int64_t distance) {
  for (const auto& [relative, bucket] : expected) {
    INFO("relative position " << relative << (bidirectional ? ", bidirectional" : ", causal"));
    REQUIRE(t5_relative_position_bucket(relative, bidirectional, buckets, distance) == bucket);
  }
}

}  // namespace

// T5's defaults, 32 buckets and max_distance 128. Bidirectional: 16 buckets a side, 8 exact
// distances, then 8 + floor(ln(n / 8) / ln(128 / 8) * 8), at most 15; keys after the query add 16.
TEST_CASE("t5 buckets: T5's defaults, bidirectional, worked out by hand", "[relative-position]") {
  require_buckets({{0, 0}, {-1, 1}, {-7, 7},
                   {-8, 8},     // ln(1) = 0
                   {-15, 9},    // ln(15/8) / ln 16 * 8 = 1.81
                   {-16, 10},   // ln 2 / ln 16 * 8 = 2 exactly
                   {-31, 11},   // 3.91
                   {-32, 12},   // 4
                   {-64, 14},   // 6
                   {-90, 14},   // 6.98
                   {-91, 15},   // 7.02
                   {-127, 15},  // 7.98
                   {-128, 15},  // 8, capped at 15
                   {-100000, 15},
                   {1, 17}, {7, 23}, {8, 24},
                   {16, 26},    // 16 + 8 + 2
                   {20, 26},    // 16 + 8 + floor(2.64)
                   {128, 31}, {5000, 31}},
                  true, 32, 128);
}

// Causal (unidirectional): keys after the query fall in bucket 0; 32 buckets, 16 exact distances,
// then 16 + floor(ln(n / 16) / ln(128 / 16) * 16), at most 31.
TEST_CASE("t5 buckets: T5's defaults, causal, worked out by hand", "[relative-position]") {
  require_buckets({{5, 0}, {1, 0}, {0, 0}, {-3, 3}, {-15, 15},
                   {-16, 16},   // ln(1) = 0
                   {-20, 17},   // ln 1.25 / ln 8 * 16 = 1.72
                   {-32, 21},   // ln 2 / ln 8 * 16 = 5.33
                   {-64, 26},   // 10.67
                   {-100, 30},  // 14.10
                   {-127, 31},  // 15.94
                   {-128, 31},  // 16, capped at 31
                   {-1000000, 31}},
                  false, 32, 128);
}

// 8 buckets, max_distance 16, bidirectional: 4 a side, 2 exact, then 2 + floor(ln(n/2)/ln 8 * 2).
TEST_CASE("t5 buckets: a small table, every bucket in range", "[relative-position]") {
  require_buckets({{0, 0}, {-1, 1}, {-2, 2}, {-3, 2}, {-4, 2},  // 0.39, 0.67
                   {-6, 3},                                      // ln 3 / ln 8 * 2 = 1.06
                   {-15, 3}, {-16, 3},                           // 1.94; 2, capped at 3
                   {1, 5}, {2, 6}, {6, 7}, {40, 7}},
                  true, 8, 16);
  for (const bool bidirectional : {true, false}) {
    int64_t previous = 0;
    for (int64_t distance = 0; distance < 300; ++distance) {  // monotone in distance, in range
      const int64_t bucket = t5_relative_position_bucket(-distance, bidirectional, 32, 128);
      REQUIRE(bucket >= previous);
      REQUIRE(bucket < 32);
      previous = bucket;
    }
  }
  REQUIRE_THROWS_WITH(t5_relative_position_bucket(1, true, 3, 128),
                      Catch::Contains("num_buckets >= 4"));
  REQUIRE_THROWS_WITH(t5_relative_position_bucket(1, true, 32, 16),
                      Catch::Contains("max_distance"));
}

TEST_CASE("t5_relative_bias: each offset reads its bucket's row; the gradient sums per bucket",
          "[relative-position]") {
  // table [8 buckets, 2 heads] = 10 b + h; Sq 3, Sk 5: offsets j - i from -2 to 4
  std::vector<double> values;
  for (int b = 0; b < 8; ++b) values.insert(values.end(), {10.0 * b, 10.0 * b + 1});
  const Tensor table = from_values(values, {8, 2}, DType::f64).requires_grad_();
  const Tensor bias = t5_relative_bias(table, 3, 5, true, 16);
  REQUIRE(bias.shape() == Shape{2, 7});
  // buckets of offsets -2 .. 4 (8 buckets, max_distance 16, bidirectional, above): 2 1 0 5 6 6 6
  const std::vector<int64_t> bucket_of = {2, 1, 0, 5, 6, 6, 6};
  const std::vector<double> got = bias.to_host_f64();
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t o = 0; o < 7; ++o) REQUIRE(got[h * 7 + o] == 10.0 * bucket_of[o] + h);
  }
  // d sum(bias * w) / d table[b, h] = the sum of w over the offsets in bucket b
  std::vector<double> weights(14);
  for (size_t e = 0; e < weights.size(); ++e) weights[e] = static_cast<double>(e + 1);
  sum(bias * from_values(weights, {2, 7}, DType::f64)).backward();
  std::vector<double> expected(16, 0.0);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t o = 0; o < 7; ++o) expected[bucket_of[o] * 2 + h] += weights[h * 7 + o];
  }
  REQUIRE(table.grad().to_host_f64() == expected);
}

TEST_CASE("t5_relative_bias: Sq + Sk - 1 past int64, or too large to hold, is a tg::Error",
          "[relative-position]") {
  const Tensor table = zeros({8, 2}, DType::f64);
  REQUIRE_THROWS_WITH(t5_relative_bias(table, INT64_MAX, 2, true, 16),
                      Catch::Contains("t5_relative_bias: Sq + Sk - 1"));
  REQUIRE_THROWS_AS(t5_relative_bias(table, int64_t{1} << 62, 1, true, 16), Error);
}

TEST_CASE("shaw_relative_logits: q_i . a_{clip(j - i)} against plain loops",
          "[relative-position]") {
  manual_seed(4);
  const int64_t clip = 2, width = 2 * clip + 1, d = 3, sq = 6, sk = 7;
  const Tensor q = uniform({2, sq, d}, -1, 1, DType::f64);
  const Tensor table = uniform({width, d}, -1, 1, DType::f64);
  const std::vector<double> got = shaw_relative_logits(q, table, sk).to_host_f64();
  const std::vector<double> qs = q.to_host_f64(), rows = table.to_host_f64();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        const int64_t r = std::clamp<int64_t>(j - i, -clip, clip) + clip;
        double expected = 0;
        for (int64_t c = 0; c < d; ++c) expected += qs[(b * sq + i) * d + c] * rows[r * d + c];
        REQUIRE(got[(b * sq + i) * sk + j] == Approx(expected).margin(1e-14));
      }
    }
  }
  // in bf16 (mixed precision): a bf16 result close to the f64 one
  const Tensor half = shaw_relative_logits(q.to(DType::bf16), table.to(DType::bf16), sk);
  REQUIRE(half.dtype() == DType::bf16);
  const std::vector<double> rounded = half.to_host_f64();
  for (size_t e = 0; e < got.size(); ++e) REQUIRE(rounded[e] == Approx(got[e]).margin(3e-2));
  REQUIRE_THROWS_AS(shaw_relative_logits(q, zeros({4, d}, DType::f64), sk), Error);  // even rows
  REQUIRE_THROWS_AS(shaw_relative_logits(q, zeros({width, d + 1}, DType::f64), sk), Error);
}

namespace {

// The fused path and the explicit one (need_weights) of the same module on the same input.
void require_paths_agree(const AttentionSpec& spec, bool causal, const Tensor& mask = Tensor()) {
  manual_seed(5);
  MultiHeadAttention mha(16, 4, 0.0, DType::f64, spec);
  const Tensor x = uniform({2, 150, 16}, -1, 1, DType::f64);
  const std::vector<double> fused = mha.forward(x, x, x, mask, false, causal).output.to_host_f64();
  const std::vector<double> dense = mha.forward(x, x, x, mask, true, causal).output.to_host_f64();
  for (size_t e = 0; e < fused.size(); ++e) REQUIRE(fused[e] == Approx(dense[e]).margin(1e-10));
}

}  // namespace

TEST_CASE("MultiHeadAttention with T5's bias: the fused kernel and the explicit path agree",
          "[relative-position][mha-variants]") {
  // 150 positions: offsets past max_distance, the kernel's query and key tiles
  const AttentionSpec t5{.position = PositionKind::t5,
                         .relative = {.buckets = 8, .max_distance = 40}};
  require_paths_agree(t5, true);
  require_paths_agree(t5, false, padding_mask({150, 97}, 150));
  AttentionSpec local = t5;
  local.kind = AttentionKind::local;
  local.window = 20;
  require_paths_agree(local, false);
  require_paths_agree({.position = PositionKind::shaw, .relative = {.clip = 5}}, true);  // explicit
}

TEST_CASE("MultiHeadAttention with T5's bias: the packed projection and the four agree, and so "
          "do the table's gradients", "[relative-position][mha-variants][packed]") {
  manual_seed(12);
  MultiHeadAttention mha(8, 2, 0.0, DType::f64, {.position = PositionKind::t5});
  const Tensor x = uniform({2, 70, 8}, -1, 1, DType::f64);
  const Tensor probe = uniform({2, 70, 8}, -1, 1, DType::f64);
  std::vector<std::vector<double>> outputs, grads;
  for (const bool packed : {true, false}) {
    mha.zero_grad();
    // one tensor as query, key and value: forward_packed; equal copies: the four projections
    const Tensor out = packed ? mha.forward(x, Tensor(), true).output
                              : mha.forward(x, x.clone(), x.clone(), Tensor(), false, true).output;
    sum(out * probe).backward();
    outputs.push_back(out.to_host_f64());
    grads.push_back(mha.relative_attention_bias->weight.grad().to_host_f64());
  }
  for (size_t e = 0; e < outputs[0].size(); ++e) {
    REQUIRE(outputs[0][e] == Approx(outputs[1][e]).margin(1e-12));
  }
  for (size_t e = 0; e < grads[0].size(); ++e) {
    REQUIRE(grads[0][e] == Approx(grads[1][e]).margin(1e-12));
  }
  // causal buckets: a key after its query is never seen, so some bucket gets a gradient and
  // none is NaN
  REQUIRE(std::any_of(grads[0].begin(), grads[0].end(), [](double g) { return g != 0.0; }));
}

namespace {

// Rows of a [B, S, hidden] tensor's head h as [S][head_dim] host values.
std::vector<std::vector<double>> head_rows(const std::vector<double>& t, int64_t b, int64_t h,
                                           int64_t seq, int64_t hidden, int64_t head_dim) {
  std::vector<std::vector<double>> rows(seq, std::vector<double>(head_dim));
  for (int64_t s = 0; s < seq; ++s) {
    for (int64_t c = 0; c < head_dim; ++c) {
      rows[s][c] = t[(b * seq + s) * hidden + h * head_dim + c];
    }
  }
  return rows;
}

}  // namespace

// Shaw et al.'s equations (2) and (3) with a^K only, in loops over the module's projections:
// e_ij = q_i (k_j + a^K_{clip(j - i, -k, k)})^T / sqrt(d), causal, softmax, sum_j alpha_ij v_j.
TEST_CASE("MultiHeadAttention with Shaw's relative keys equals the paper's equations in loops",
          "[relative-position][mha-variants]") {
  manual_seed(13);
  const int64_t hidden = 8, heads = 2, head_dim = 4, seq = 9, clip = 3;
  MultiHeadAttention mha(hidden, heads, 0.0, DType::f64,
                         {.position = PositionKind::shaw, .relative = {.clip = clip}});
  const Tensor x = uniform({2, seq, hidden}, -1, 1, DType::f64);
  const std::vector<double> q = mha.q_proj->forward(x).to_host_f64();
  const std::vector<double> k = mha.k_proj->forward(x).to_host_f64();
  const std::vector<double> v = mha.v_proj->forward(x).to_host_f64();
  const std::vector<double> a = mha.relative_key->weight.to_host_f64();  // [2 clip + 1, head_dim]
  std::vector<double> context(2 * seq * hidden, 0.0);  // heads merged: [B, S, hidden]
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      const auto qs = head_rows(q, b, h, seq, hidden, head_dim);
      const auto ks = head_rows(k, b, h, seq, hidden, head_dim);
      const auto vs = head_rows(v, b, h, seq, hidden, head_dim);
      for (int64_t i = 0; i < seq; ++i) {
        std::vector<double> e(i + 1);  // causal: keys 0 .. i
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t r = std::clamp<int64_t>(j - i, -clip, clip) + clip;
          for (int64_t c = 0; c < head_dim; ++c) {
            e[j] += qs[i][c] * (ks[j][c] + a[r * head_dim + c]);
          }
          e[j] /= std::sqrt(static_cast<double>(head_dim));
        }
        const double top = *std::max_element(e.begin(), e.end());
        double total = 0;
        for (double& score : e) total += (score = std::exp(score - top));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < head_dim; ++c) {
            context[(b * seq + i) * hidden + h * head_dim + c] += e[j] / total * vs[j][c];
          }
        }
      }
    }
  }
  const Tensor expected = mha.o_proj->forward(from_values(context, {2, seq, hidden}, DType::f64));
  const std::vector<double> got = mha.forward(x, Tensor(), true).output.to_host_f64();
  const std::vector<double> want = expected.to_host_f64();
  for (size_t e = 0; e < got.size(); ++e) REQUIRE(got[e] == Approx(want[e]).margin(1e-12));
}

TEST_CASE("MultiHeadAttention: T5's and Shaw's tables, their names, shapes and gradients",
          "[relative-position][mha-variants]") {
  const auto names_of = [](const Module& m) {
    std::map<std::string, Shape> names;
    for (const auto& [name, tensor] : m.state_dict()) names[name] = tensor.shape();
    return names;
  };
  manual_seed(14);
  MultiHeadAttention t5(8, 2, 0.0, DType::f32, {.position = PositionKind::t5});
  REQUIRE(names_of(t5).at("relative_attention_bias.weight") == Shape{32, 2});  // T5's defaults
  REQUIRE(names_of(t5).size() == 9);
  MultiHeadAttention shaw(8, 2, 0.0, DType::f32, {.position = PositionKind::shaw});
  REQUIRE(names_of(shaw).at("relative_key.weight") == Shape{33, 4});  // 2 * 16 + 1, head_dim
  REQUIRE(names_of(shaw).size() == 9);
  // drawn N(0, hidden^-1/2) and N(0, head_dim^-1/2): not N(0, 1)
  const std::vector<double> drawn = t5.relative_attention_bias->weight.to_host_f64();
  double square = 0;
  for (const double w : drawn) square += w * w;
  REQUIRE(std::sqrt(square / drawn.size()) < 0.6);
  const Tensor x = uniform({2, 6, 8}, -1, 1);
  for (MultiHeadAttention* mha : {&t5, &shaw}) {
    sum(mha->forward(x, padding_mask({6, 4}, 6)).output).backward();
    const Tensor& table =
        mha == &t5 ? t5.relative_attention_bias->weight : shaw.relative_key->weight;
    const std::vector<double> grad = table.grad().to_host_f64();
    REQUIRE(std::any_of(grad.begin(), grad.end(), [](double g) { return g != 0.0; }));
  }
}

TEST_CASE("MultiHeadAttention: T5 and Shaw refuse attention without scores and bad numbers",
          "[relative-position][mha-variants]") {
  for (const PositionKind position : {PositionKind::t5, PositionKind::shaw}) {
    REQUIRE_THROWS_WITH(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::performer,
                                           .features = 4, .position = position}),
                        Catch::Contains("do not form"));
    REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::linformer,
                                         .rank = 2, .max_len = 6, .position = position}),
                      Error);
  }
  REQUIRE_THROWS_WITH(MultiHeadAttention(8, 2, 0.0, DType::f32,
                                         {.position = PositionKind::t5,
                                          .relative = {.buckets = 2}}),
                      Catch::Contains("buckets >= 4"));
  REQUIRE_THROWS_WITH(MultiHeadAttention(8, 2, 0.0, DType::f32,
                                         {.position = PositionKind::shaw, .relative = {.clip = 0}}),
                      Catch::Contains("clipping distance >= 1"));
}

TEST_CASE("shaw_relative_logits: a clip past the context reads only the distances that occur",
          "[relative-position]") {
  // Values against plain loops with k = 40 > S, and a query offset (decoding's newest rows).
  manual_seed(6);
  const int64_t clip = 40, d = 3, sq = 3, sk = 7, offset = 4;
  const Tensor q = uniform({2, sq, d}, -1, 1, DType::f64);
  const Tensor table = uniform({2 * clip + 1, d}, -1, 1, DType::f64);
  const std::vector<double> got = shaw_relative_logits(q, table, sk, offset).to_host_f64();
  const std::vector<double> qs = q.to_host_f64(), rows = table.to_host_f64();
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        const int64_t r = std::clamp<int64_t>(j - (i + offset), -clip, clip) + clip;
        double expected = 0;
        for (int64_t c = 0; c < d; ++c) expected += qs[(b * sq + i) * d + c] * rows[r * d + c];
        REQUIRE(got[(b * sq + i) * sk + j] == Approx(expected).margin(1e-14));
      }
    }
  }
  // The gradient in f64 against finite differences, for q and every row of the table (the rows
  // no pair reads get 0), with a clip inside the context and one past it.
  for (const int64_t k : {int64_t{2}, int64_t{40}}) {
    INFO("clip " << k);
    const Tensor q_leaf = uniform({2, 4, d}, -1, 1, DType::f64).requires_grad_();
    const Tensor table_leaf = uniform({2 * k + 1, d}, -1, 1, DType::f64).requires_grad_();
    const GradcheckResult result = gradcheck(
        [](const std::vector<Tensor>& in) { return shaw_relative_logits(in[0], in[1], 5, 1); },
        {q_leaf, table_leaf});
    INFO(result.message);
    REQUIRE(result.passed);
  }
}

TEST_CASE("shaw_relative_logits: memory does not grow with the clip beyond the table itself",
          "[relative-position]") {
  // At S = 16 only 31 distances exist. With k = 65,536 the product against all 2k + 1 rows formed
  // [B, S, 131,073] scores and their gradient; now the step's peak may exceed that of k = 16 by
  // the table's size (its gradient) and no more.
  manual_seed(7);
  const int64_t seq = 16, d = 8;
  const Tensor q = uniform({2, seq, d}, -1, 1).requires_grad_();
  const auto peak_growth = [&](int64_t clip) {
    const Tensor table = uniform({2 * clip + 1, d}, -1, 1).requires_grad_();
    const int64_t before = allocator_stats().current_bytes;
    reset_allocator_stats();
    sum(shaw_relative_logits(q, table, seq)).backward();
    return std::pair{allocator_stats().peak_bytes - before,
                     static_cast<int64_t>(table.numel() * sizeof(float))};
  };
  const auto [small, small_table] = peak_growth(16);
  const auto [large, large_table] = peak_growth(65536);
  INFO("peak growth " << small << " bytes at k = 16, " << large << " at k = 65536 (table "
                      << large_table << " bytes)");
  REQUIRE(large <= small + large_table);
}
