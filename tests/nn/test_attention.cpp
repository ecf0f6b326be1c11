// MultiHeadAttention's variants (nn/attention_spec.h): each kind runs the same attention on the
// fused path and on the explicit one (need_weights), registers the parameters its kind needs under
// their PyTorch-style names, and refuses combinations that cannot work.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
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
  const AttentionOutput explicit_path = mha.forward(x, x, x, mask, true, causal);
  REQUIRE(explicit_path.weights.defined());
  const std::vector<double> a = fused.to_host_f64(), b = explicit_path.output.to_host_f64();
  for (size_t e = 0; e < a.size(); ++e) REQUIRE(a[e] == Approx(b[e]).margin(1e-10));
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
  const std::vector<double> weights = mha.forward(x, x, x, Tensor(), true, false).weights.to_host_f64();
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
}

TEST_CASE("MultiHeadAttention: impossible variants are one clear error", "[mha-variants]") {
  REQUIRE_THROWS_AS(MultiHeadAttention(8, 2, 0.0, DType::f32, {.kind = AttentionKind::local, .window = 0}), Error);
  REQUIRE_THROWS_AS(MultiHeadAttention(6, 2, 0.0, DType::f32, {.position = PositionKind::rope}), Error);  // head_dim 3
}
