// int8 self-attention with q, k and v stacked as one product (nn/attention_int8.cpp): the same
// output as three products to the bit, the state dict unchanged, loads written through, and the
// fall back to three products wherever the stack no longer holds.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
using namespace tg::nn;

namespace {

constexpr int64_t kHidden = 24, kHeads = 3;

// x as query, key and value takes the stacked product (self-attention, forward_packed); an equal
// copy as key and value takes the three products of the unpacked path: the reference.
std::pair<std::vector<double>, std::vector<double>> stacked_and_separate(
    const MultiHeadAttention& mha, const Tensor& x, const Tensor& mask, bool causal) {
  NoGrad no_grad;
  const Tensor copy = x * 1.0;
  return {mha.forward(x, x, x, mask, false, causal).output.to_host_f64(),
          mha.forward(x, copy, copy, mask, false, causal).output.to_host_f64()};
}

std::vector<std::pair<std::string, Shape>> names_and_shapes(const Module& m) {
  std::vector<std::pair<std::string, Shape>> out;
  for (const auto& [name, t] : m.state_dict()) out.emplace_back(name, t.shape());
  return out;
}

// A model quantized in `mode` (static: calibrated on x).
std::shared_ptr<MultiHeadAttention> quantized(QuantMode mode, const Tensor& x) {
  manual_seed(11);
  auto mha = std::make_shared<MultiHeadAttention>(kHidden, kHeads);
  mha->eval();
  if (mode == QuantMode::dynamic) {
    quantize_dynamic(*mha);
  } else {
    quantize_static(*mha, [&] { mha->forward(x); });
  }
  return mha;
}

}  // namespace

TEST_CASE("int8 attention: q, k, v as one product equal three products to the bit",
          "[quantize][mha-variants][packed]") {
  manual_seed(3);
  const Tensor x = uniform({2, 37, kHidden}, -2, 2);
  const Tensor mask = padding_mask({37, 20}, 37);
  for (QuantMode mode : {QuantMode::dynamic, QuantMode::static_}) {
    const auto mha = quantized(mode, x);
    REQUIRE(mha->stacked_input_scale().has_value());
    REQUIRE(mha->q_proj->weight.storage() == mha->v_proj->weight.storage());  // one tensor
    for (bool causal : {false, true}) {
      for (const Tensor& m : {Tensor(), mask}) {
        INFO(quant_mode_name(mode) << ", causal " << causal << ", mask " << m.defined());
        const auto [stacked, separate] = stacked_and_separate(*mha, x, m, causal);
        REQUIRE(stacked == separate);
      }
    }
  }
}

TEST_CASE("int8 attention: the stack keeps the state dict, and loads write through it",
          "[quantize][mha-variants][packed]") {
  manual_seed(5);
  const Tensor x = uniform({1, 9, kHidden}, -1, 1);
  const auto mha = quantized(QuantMode::dynamic, x);
  // Another model's state, loaded into a stacked model of other weights (quantize_structure
  // stacks too): the outputs of the one whose state it is, to the bit.
  manual_seed(99);
  MultiHeadAttention loaded(kHidden, kHeads);
  quantize_structure(loaded, QuantMode::dynamic);
  REQUIRE(loaded.stacked_input_scale().has_value());
  REQUIRE(names_and_shapes(loaded) == names_and_shapes(*mha));
  // The names and order of an attention quantized Linear by Linear (nothing stacked).
  MultiHeadAttention unstacked(kHidden, kHeads);
  for (const auto& [path, linear] : named_linears(unstacked)) linear->quantize(QuantMode::dynamic);
  REQUIRE_FALSE(unstacked.stacked_input_scale().has_value());
  REQUIRE(names_and_shapes(unstacked) == names_and_shapes(*mha));

  loaded.load_state_dict(mha->state_dict());
  NoGrad no_grad;
  REQUIRE(loaded.forward(x).output.to_host_f64() == mha->forward(x).output.to_host_f64());
  unstacked.load_state_dict(mha->state_dict());
  REQUIRE(unstacked.forward(x).output.to_host_f64() == mha->forward(x).output.to_host_f64());
}

TEST_CASE("int8 attention: a projection out of the stack, or input scales that differ, take "
          "three products", "[quantize][mha-variants][packed]") {
  manual_seed(8);
  const Tensor x = uniform({2, 11, kHidden}, -1, 1);
  SECTION("k's weight replaced by a tensor of its own (other values)") {
    const auto mha = quantized(QuantMode::dynamic, x);
    const Tensor other = cat({mha->v_proj->weight}, 0);  // v's int8 weight, in storage of its own
    mha->k_proj->replace_in_place(
        [&](const Tensor& t) { return t.same(mha->k_proj->weight) ? other : Tensor(); });
    REQUIRE_FALSE(mha->stacked_input_scale().has_value());
    const auto [self, separate] = stacked_and_separate(*mha, x, Tensor(), true);
    REQUIRE(self == separate);  // the stacked rows still hold k's old weight: not read
  }
  SECTION("static input scales that differ after a load") {
    const auto mha = quantized(QuantMode::static_, x);
    REQUIRE(mha->stacked_input_scale().has_value());
    mha->v_proj->input_scale.copy_(mha->v_proj->input_scale * 2.0);
    REQUIRE_FALSE(mha->stacked_input_scale().has_value());
    const auto [self, separate] = stacked_and_separate(*mha, x, Tensor(), false);
    REQUIRE(self == separate);
  }
}
