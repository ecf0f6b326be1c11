// MultiHeadAttention's variants (nn/attention_spec.h): each kind runs the same attention on the
// fused path and on the explicit one (need_weights), registers the parameters its kind needs under
// their PyTorch-style names, and refuses combinations that cannot work.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
using namespace tg::nn;

namespace {

std::set<std::string> names_of(const Module& m) {
  std::set<std::string> names;
  for (const auto& [name, tensor] : m.state_dict()) names.insert(name);
  return names;
}

// The fused path and the explicit one (need_weights) of the same module on the same input.
void require_paths_agree(const AttentionSpec& spec, bool causal, const Tensor& mask = Tensor()) {
  manual_seed(5);
  MultiHeadAttention mha(16, 4, 0.0, DType::f64, spec);
  const Tensor x = uniform({2, 150, 16}, -1, 1, DType::f64);
  const Tensor fused = mha.forward(x, x, x, mask, false, causal).output;
  const AttentionOutput explicit_path = mha.forward(x, x, x, mask, true, causal, false);
  REQUIRE(explicit_path.weights.defined());
  const std::vector<double> a = fused.to_host_f64(), b = explicit_path.output.to_host_f64();
  for (size_t e = 0; e < a.size(); ++e) REQUIRE(a[e] == Approx(b[e]).margin(1e-10));
}

// The op of every node behind `out`, once each.
std::vector<std::string> ops_behind(const Tensor& out) {
  std::vector<std::string> ops;
  std::vector<const Node*> pending{out.grad_fn().get()}, seen;
  while (!pending.empty()) {
    const Node* node = pending.back();
    pending.pop_back();
    if (!node || std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
    seen.push_back(node);
    ops.push_back(node->op);
    for (const Edge& edge : node->inputs) pending.push_back(edge.node.get());
  }
  return ops;
}

}  // namespace

TEST_CASE("MultiHeadAttention: sparse layouts and ALiBi, fused and explicit agree", "[mha-variants]") {
  require_paths_agree({.kind = AttentionKind::local, .window = 10}, true);
  require_paths_agree({.kind = AttentionKind::band, .window = 3, .dilation = 4}, false);
  require_paths_agree({.kind = AttentionKind::bigbird, .window = 4, .random_blocks = 1,
                       .global_tokens = 2, .seed = 3},
                      false, padding_mask({150, 120}, 150));
  require_paths_agree({.position = PositionKind::alibi}, true);
  require_paths_agree({.kind = AttentionKind::local, .window = 7, .position = PositionKind::alibi}, false);
}

TEST_CASE("MultiHeadAttention: the explicit path's weights vanish outside the layout", "[mha-variants]") {
  manual_seed(6);
  MultiHeadAttention mha(8, 2, 0.0, DType::f64, {.kind = AttentionKind::local, .window = 3});
  const Tensor x = uniform({1, 12, 8}, -1, 1, DType::f64);
  const std::vector<double> weights = mha.forward(x, x, x, Tensor(), true, false, false).weights.to_host_f64();
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < 12; ++i) {
      double row = 0;
      for (int64_t j = 0; j < 12; ++j) {
        const double w = weights[(h * 12 + i) * 12 + j];
        if (std::abs(i - j) >= 3) REQUIRE(w == 0.0);
        else REQUIRE(w > 0.0);
        row += w;
      }
      REQUIRE(row == Approx(1.0));
    }
  }
}

TEST_CASE("MultiHeadAttention: state_dict names of each kind", "[mha-variants]") {
  const std::set<std::string> projections = {
      "q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
      "v_proj.weight", "v_proj.bias", "o_proj.weight", "o_proj.bias"};
  REQUIRE(names_of(MultiHeadAttention(8, 2)) == projections);
  REQUIRE(names_of(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::local, .window = 4})) == projections);
  REQUIRE(names_of(MultiHeadAttention(8, 2, 0.0, DType::f32, {.position = PositionKind::alibi})) == projections);
  REQUIRE(names_of(MultiHeadAttention(8, 2, 0.0, DType::f32, {.position = PositionKind::rope})) == projections);
  std::set<std::string> linformer = projections, performer = projections;
  linformer.insert({"proj_k", "proj_v"});
  performer.insert("projection_matrix");
  const MultiHeadAttention with_projections(8, 2, 0.0, DType::f32,
                                            {.kind = AttentionKind::linformer, .rank = 3, .max_len = 10});
  REQUIRE(names_of(with_projections) == linformer);
  REQUIRE(with_projections.proj_k.shape() == Shape{10, 3});
  REQUIRE(with_projections.proj_v.requires_grad());
  const MultiHeadAttention with_features(8, 2, 0.0, DType::f32,
                                         {.kind = AttentionKind::performer, .features = 5, .seed = 1});
  REQUIRE(names_of(with_features) == performer);
  REQUIRE(with_features.projection_matrix.shape() == Shape{5, 4});  // [features, head_dim]
  REQUIRE(with_features.parameters().size() == 8);                  // a buffer, not trained
}

TEST_CASE("MultiHeadAttention: impossible variants are one clear error", "[mha-variants]") {
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::local, .window = 0}), Error);
  REQUIRE_THROWS_AS(MultiHeadAttention(6, 2, 0.0, DType::f32, {.position = PositionKind::rope}), Error);  // head_dim 3
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::linformer, .rank = 0, .max_len = 4}), Error);
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::performer, .features = 0}), Error);
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::performer, .features = 4,
                                                                .position = PositionKind::alibi}), Error);
  // Linformer and Performer take a key padding mask, nothing else
  MultiHeadAttention linformer(8, 2, 0.0, DType::f32, {.kind = AttentionKind::linformer, .rank = 2, .max_len = 6});
  const Tensor x = zeros({2, 5, 8});
  REQUIRE_NOTHROW(linformer.forward(x, padding_mask({5, 3}, 5)));
  REQUIRE_THROWS_AS(linformer.forward(x, causal_mask(5, 5)), Error);
  REQUIRE_THROWS_AS(linformer.forward(x, Tensor(), true), Error);
}

TEST_CASE("MultiHeadAttention: a performer refuses dropout in training with one error", "[mha-variants]") {
  // FAVOR+ never forms the [Sq, Sk] weights that dropout drops: training with dropout > 0 is an
  // error, not dropout silently skipped. In eval mode dropout plays no part, so the module gives
  // what the same module with dropout 0 gives in training.
  manual_seed(10);
  PerformerAttention with_dropout(8, 2, 6, 21, 0.1);
  manual_seed(10);
  const PerformerAttention without(8, 2, 6, 21, 0.0);  // the same weights and features
  const Tensor x = uniform({2, 5, 8}, -1, 1);
  REQUIRE(with_dropout.is_training());
  REQUIRE_THROWS_WITH(with_dropout.forward(x),
                      "MultiHeadAttention (performer): dropout 0.1 cannot be applied in training: "
                      "FAVOR+ never forms the [Sq, Sk] attention weights that dropout drops (use "
                      "dropout 0 with performer attention)");
  REQUIRE_THROWS_AS(with_dropout.forward(x, Tensor(), true), Error);  // causal alike
  with_dropout.eval();
  REQUIRE(with_dropout.forward(x).output.to_host_f64() == without.forward(x).output.to_host_f64());
  // Linformer has its [Sq, rank] weights to drop: dropout stays allowed there.
  REQUIRE_NOTHROW(LinformerAttention(8, 2, 5, 3, 0.1).forward(x));
}

TEST_CASE("MultiHeadAttention: RoPE makes scores depend on relative position only", "[mha-variants]") {
  // The same key and query content at every position: with RoPE, the weights of query i on key j
  // are a function of i - j, so row i + 1 is row i shifted by one (away from the edges).
  manual_seed(8);
  MultiHeadAttention mha(8, 2, 0.0, DType::f64, {.position = PositionKind::rope});
  const Tensor token = uniform({1, 1, 8}, -1, 1, DType::f64);
  const Tensor x = token.expand({1, 6, 8}).contiguous();
  const Tensor scores_of = mha.forward(x, x, x, Tensor(), true, false, false).weights;  // [1, 2, 6, 6]
  const std::vector<double> w = scores_of.to_host_f64();
  // softmax rows differ in length only through their normaliser; compare ratios w_ij / w_ii.
  // Without RoPE every score would be equal (every ratio 1): the rotation must make them differ.
  double spread = 0;
  for (int64_t j = 0; j < 6; ++j) spread = std::max(spread, std::abs(std::log(w[3 * 6 + j] / w[3 * 6 + 3])));
  REQUIRE(spread > 1e-3);
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 1; i < 5; ++i) {
      for (int64_t j = 1; j < 5; ++j) {
        const double here = w[(h * 6 + i) * 6 + j] / w[(h * 6 + i) * 6 + i];
        const double next = w[(h * 6 + i + 1) * 6 + j + 1] / w[(h * 6 + i + 1) * 6 + i + 1];
        REQUIRE(here == Approx(next).epsilon(1e-9));
      }
    }
  }
}

TEST_CASE("LinformerAttention and PerformerAttention: the variants as modules", "[mha-variants]") {
  manual_seed(9);
  LinformerAttention linformer(8, 2, 12, 4);
  REQUIRE(linformer.proj_k.shape() == Shape{12, 4});
  REQUIRE(linformer.forward(zeros({3, 12, 8})).output.shape() == Shape{3, 12, 8});

  PerformerAttention performer(8, 2, 6, 21);
  const Tensor before = performer.projection_matrix;
  const std::vector<double> drawn = before.to_host_f64();
  const Tensor x = uniform({2, 5, 8}, -1, 1);
  const std::vector<double> out = performer.forward(x).output.to_host_f64();
  performer.redraw_features(22);  // new features, the same tensor
  REQUIRE(performer.projection_matrix.data() == before.data());
  REQUIRE(performer.projection_matrix.to_host_f64() != drawn);
  REQUIRE(performer.forward(x).output.to_host_f64() != out);
  performer.redraw_features(21);  // the first seed again: the first features and output
  REQUIRE(performer.projection_matrix.to_host_f64() == drawn);
  REQUIRE(performer.forward(x).output.to_host_f64() == out);
  REQUIRE_THROWS_AS(linformer.redraw_features(1), Error);
}

TEST_CASE("MultiHeadAttention: forward_packed and the four projections agree, outputs and gradients",
          "[mha-variants][packed]") {
  // query, key and value the same tensor: forward_packed (one stacked GEMM and
  // packed_self_attention, on the CPU); an equal copy as key and value: the four projections
  // (three linears and scaled_dot_product_attention). f64 tight, f32 to rounding.
  for (const DType dtype : {DType::f64, DType::f32}) {
    const double margin = dtype == DType::f64 ? 1e-12 : 2e-5;
    for (bool causal : {false, true}) {
      INFO(dtype_name(dtype) << ", causal " << causal);
      manual_seed(6);
      MultiHeadAttention mha(16, 4, 0.0, dtype);
      const Tensor values = uniform({2, 70, 16}, -1, 1, dtype);
      const Tensor probe = uniform({2, 70, 16}, -1, 1, dtype);
      const Tensor mask = padding_mask({70, 41}, 70);
      const auto run = [&](bool packed) {
        Tensor x = values.detach().contiguous().requires_grad_();
        const Tensor other = x * 1.0;  // the same values, another tensor
        const Tensor out = packed ? mha.forward(x, x, x, mask, false, causal).output
                                  : mha.forward(x, other, other, mask, false, causal).output;
        const std::vector<std::string> ops = ops_behind(out);  // the path each run took
        REQUIRE(std::count(ops.begin(), ops.end(), "packed_self_attention") == (packed ? 1 : 0));
        for (const Tensor& p : mha.parameters()) p.zero_grad();
        sum(out * probe).backward();
        std::vector<std::vector<double>> results{out.to_host_f64(), x.grad().to_host_f64()};
        for (const Tensor& p : mha.parameters()) results.push_back(p.grad().to_host_f64());
        return results;
      };
      const auto packed = run(true), separate = run(false);
      REQUIRE(packed.size() == separate.size());
      for (size_t t = 0; t < packed.size(); ++t) {
        INFO("result " << t << " (output, dx, then each parameter's gradient)");
        REQUIRE(packed[t].size() == separate[t].size());
        for (size_t e = 0; e < packed[t].size(); ++e) {
          REQUIRE(packed[t][e] == Approx(separate[t][e]).margin(margin));
        }
      }
    }
  }
}

TEST_CASE("MultiHeadAttention: the packed projection is what self-attention records", "[mha-variants][packed]") {
  MultiHeadAttention mha(8, 2);
  const Tensor x = uniform({1, 5, 8}, -1, 1).requires_grad_();
  const std::vector<std::string> ops = ops_behind(mha.forward(x, Tensor(), true).output);
  REQUIRE(std::count(ops.begin(), ops.end(), "stacked_linear") == 1);
  REQUIRE(std::count(ops.begin(), ops.end(), "packed_self_attention") == 1);
  REQUIRE(std::count(ops.begin(), ops.end(), "linear") == 1);  // o_proj
}

TEST_CASE("ReformerAttention: shared QK (no k_proj), its rotations a buffer, the same attention "
          "as reformer_attention on its projections", "[mha-variants][reformer]") {
  manual_seed(12);
  const ReformerAttention reformer(8, 2, 4, 3, /*seed=*/6);
  REQUIRE(names_of(reformer) == std::set<std::string>{"q_proj.weight", "q_proj.bias",
                                                      "v_proj.weight", "v_proj.bias",
                                                      "o_proj.weight", "o_proj.bias",
                                                      "random_rotations"});
  REQUIRE(reformer.k_proj == nullptr);
  REQUIRE(reformer.random_rotations.shape() == Shape{3, 4, 2});  // [rounds, head_dim, buckets/2]
  REQUIRE(reformer.random_rotations.to_host_f64() ==
          reformer_rotations(3, 4, 4, 6).to_host_f64());
  REQUIRE(reformer.parameters().size() == 6);  // the rotations are not trained
  const Tensor x = uniform({2, 7, 8}, -1, 1);
  for (const bool causal : {false, true}) {
    const Tensor q = reformer.split_heads(reformer.q_proj->forward(x));
    const Tensor v = reformer.split_heads(reformer.v_proj->forward(x));
    const Tensor by_hand = reformer.o_proj->forward(reformer.merge_heads(
        reformer_attention(q, v, reformer.random_rotations, Tensor(), causal)));
    REQUIRE(reformer.forward(x, Tensor(), causal).output.to_host_f64() == by_hand.to_host_f64());
  }
  REQUIRE_NOTHROW(reformer.forward(x, padding_mask({7, 3}, 7)));
}

TEST_CASE("ReformerAttention: self-attention only, key padding only, no ALiBi",
          "[mha-variants][reformer]") {
  const ReformerAttention reformer(8, 2, 4, 1, 6);
  const Tensor x = zeros({2, 5, 8});
  REQUIRE_THROWS_WITH(reformer.forward(x, zeros({2, 5, 8}), x, Tensor()),
                      Catch::Contains("MultiHeadAttention (reformer)") &&
                          Catch::Contains("key [2, 5, 8] must be the query tensor"));
  REQUIRE_THROWS_WITH(reformer.forward(x, causal_mask(5, 5)),
                      Catch::Contains("MultiHeadAttention (reformer)"));
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::reformer,
                                                               .buckets = 3, .rounds = 1}), Error);
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::reformer,
                                                               .buckets = 4, .rounds = 0}), Error);
  REQUIRE_THROWS_WITH(
      MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::reformer, .buckets = 4,
                                                 .rounds = 1, .position = PositionKind::alibi}),
      Catch::Contains("reformer form no such scores"));
}

// need_weights' weights as torch.nn.MultiheadAttention returns them: averaged over the heads by
// default (average_attn_weights), each head's on request; the same dropout masks in both.
TEST_CASE("MultiHeadAttention: need_weights averages the heads by default, as PyTorch",
          "[mha-weights]") {
  manual_seed(31);
  const int64_t heads = 4;
  MultiHeadAttention mha(16, heads, /*dropout=*/0.25, DType::f64);
  mha.train();
  struct Case {
    const char* name;
    int64_t sq, sk;
    Tensor mask;
    bool causal;
  };
  const std::vector<Case> cases = {
      {"self, padding", 5, 5, padding_mask({5, 3}, 5), false},
      {"self, causal", 5, 5, Tensor(), true},
      {"cross-attention", 3, 6, padding_mask({6, 2}, 6), false},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    const Tensor q = uniform({2, c.sq, 16}, -1, 1, DType::f64);
    const Tensor kv = c.sq == c.sk ? q : uniform({2, c.sk, 16}, -1, 1, DType::f64);
    manual_seed(7);
    const AttentionOutput per_head = mha(q, kv, kv, c.mask, true, c.causal, false);
    manual_seed(7);
    const AttentionOutput averaged = mha(q, kv, kv, c.mask, /*need_weights=*/true, c.causal);
    REQUIRE(per_head.weights.shape() == Shape{2, heads, c.sq, c.sk});
    REQUIRE(averaged.weights.shape() == Shape{2, c.sq, c.sk});
    REQUIRE(averaged.output.to_host_f64() == per_head.output.to_host_f64());  // the same masks
    // The mean of the heads, summed here element by element.
    const std::vector<double> each = per_head.weights.to_host_f64();
    const std::vector<double> mean_of_heads = averaged.weights.to_host_f64();
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < c.sq; ++i) {
        for (int64_t j = 0; j < c.sk; ++j) {
          double total = 0;
          for (int64_t h = 0; h < heads; ++h) total += each[((b * heads + h) * c.sq + i) * c.sk + j];
          REQUIRE(mean_of_heads[(b * c.sq + i) * c.sk + j] == Approx(total / heads).margin(1e-15));
        }
      }
    }
  }
  // Without need_weights there are none, averaged or not (the fused kernel ran); kinds that form
  // no weights (Linformer) return none either way.
  const Tensor x = uniform({2, 5, 16}, -1, 1, DType::f64);
  REQUIRE_FALSE(mha(x, x, x).weights.defined());
  LinformerAttention linformer(16, heads, 8, 4, 0.0, DType::f64);
  REQUIRE_FALSE(linformer(x, x, x, Tensor(), true).weights.defined());
}

TEST_CASE("MultiHeadAttention: the averaged weights' gradient is a quarter of each head's",
          "[mha-weights]") {
  manual_seed(32);
  MultiHeadAttention mha(16, 4, 0.0, DType::f64);
  const Tensor x = uniform({2, 5, 16}, -1, 1, DType::f64).requires_grad_();
  const Tensor upstream = uniform({2, 5, 5}, -1, 1, DType::f64);
  const Tensor mask = padding_mask({5, 4}, 5);
  sum(mha(x, x, x, mask, true).weights * upstream).backward();
  const Tensor through_average = x.grad().clone();
  const Tensor q_grad = mha.q_proj->weight.grad().clone();
  x.zero_grad();
  mha.zero_grad();
  // d mean_h(W_h) / d W_h = 1 / heads: the same upstream gradient, a quarter of it, on every head.
  sum(mha(x, x, x, mask, true, false, false).weights * upstream.unsqueeze(1) * 0.25).backward();
  const std::vector<double> a = through_average.to_host_f64(), b = x.grad().to_host_f64();
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(1e-14));
  const std::vector<double> qa = q_grad.to_host_f64(), qb = mha.q_proj->weight.grad().to_host_f64();
  for (size_t i = 0; i < qa.size(); ++i) REQUIRE(qa[i] == Approx(qb[i]).margin(1e-14));
  REQUIRE(std::any_of(a.begin(), a.end(), [](double g) { return g != 0; }));
}
