// Gradcheck cases for the attention variants on split heads: Linformer (through q, k, v and both
// projections), Performer (through q, k and v; its features are a fixed buffer) and RoPE.
#include <string>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/gradcheck_cases.h"
#include "tapegrad/nn/linformer.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/nn/rope.h"
#include "tapegrad/ops/ops.h"

namespace tg {
namespace {

using Inputs = std::vector<Tensor>;

Inputs leaves(const std::vector<Shape>& shapes) {
  Inputs result;
  for (const Shape& shape : shapes) result.push_back(random_leaf(shape));
  return result;
}

// Key padding [2, 5] for lengths 5 and 2, made when the case runs (on its device).
Tensor keys_5_and_2() {
  return from_bools({true, true, true, true, true, true, true, false, false, false}, {2, 5});
}

void add_linformer_cases(std::vector<GradcheckCase>& cases) {
  // q [2, 2, 3, 4], k and v [2, 2, 5, 4], proj_k and proj_v [6, 3] (max_len 6 > Sk: narrowed).
  const auto make = [] {
    return leaves({{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}, {6, 3}, {6, 3}});
  };
  const std::string shapes = "q [2, 2, 3, 4], kv [2, 2, 5, 4], E, F [6, 3]";
  cases.push_back(make_case("linformer/qkv+projections", shapes, make, [](const Inputs& x) {
    return nn::linformer_attention(x[0], x[1], x[2], x[3], x[4], Tensor(), false, 0.0);
  }));
  cases.push_back(
      make_case("linformer/padding", shapes + ", lengths 5, 2", make, [](const Inputs& x) {
        return nn::linformer_attention(x[0], x[1], x[2], x[3], x[4], keys_5_and_2(), false, 0.0);
      }));
  cases.push_back(make_case("linformer/dropout", shapes + ", p 0.3", make, [](const Inputs& x) {
    set_rng_state({11, 0});  // the same dropout mask at every evaluation
    return nn::linformer_attention(x[0], x[1], x[2], x[3], x[4], Tensor(), false, 0.3);
  }));
}

void add_performer_cases(std::vector<GradcheckCase>& cases) {
  // q [2, 2, 3, 4] (or [2, 2, 5, 4]), k and v [2, 2, 5, 4]; 6 features (a full block and a
  // truncated one) as a fourth input that does not require grad.
  const auto make = [](int64_t queries) {
    return [queries] {
      Inputs x = leaves({{2, 2, queries, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}});
      x.push_back(nn::performer_features(6, 4, /*seed=*/3, DType::f64));
      return x;
    };
  };
  const auto run = [](bool padded, bool causal) {
    return [padded, causal](const Inputs& x) {
      return nn::performer_attention(x[0], x[1], x[2], x[3], padded ? keys_5_and_2() : Tensor(),
                                     causal);
    };
  };
  const std::string short_q = "q [2, 2, 3, 4], kv [2, 2, 5, 4], M 6";
  const std::string long_q = "q, kv [2, 2, 5, 4], M 6";
  cases.push_back(make_case("performer/non-causal", short_q, make(3), run(false, false)));
  cases.push_back(
      make_case("performer/padding", short_q + ", lengths 5, 2", make(3), run(true, false)));
  cases.push_back(make_case("performer/causal", long_q, make(5), run(false, true)));
  cases.push_back(make_case("performer/causal-cross", short_q, make(3), run(false, true)));
  cases.push_back(
      make_case("performer/causal+padding", long_q + ", lengths 5, 2", make(5), run(true, true)));
  // Keys far from the origin: the stabilizer's shift is large and decides which key is the maximum.
  cases.push_back(make_case(
      "performer/large-keys", "q [2, 2, 3, 4], kv [2, 2, 5, 4] * 6, M 6",
      [] {
        Inputs x = leaves({{2, 2, 3, 4}, {2, 2, 5, 4}, {2, 2, 5, 4}});
        x[1] = uniform({2, 2, 5, 4}, -6.0, 6.0, DType::f64).requires_grad_();
        x.push_back(nn::performer_features(6, 4, /*seed=*/5, DType::f64));
        return x;
      },
      run(false, false)));
}

void add_rope_cases(std::vector<GradcheckCase>& cases) {
  const auto on_leaves = [&](std::string name, std::string text, std::vector<Shape> shapes,
                             GradcheckFn fn) {
    cases.push_back(make_case(std::move(name), std::move(text),
                              [shapes] { return leaves(shapes); }, std::move(fn)));
  };
  on_leaves("rope/offset-0", "x [2, 3, 5, 6]", {{2, 3, 5, 6}},
            [](const Inputs& x) { return nn::apply_rope(x[0]); });
  on_leaves("rope/offset-7", "x [4, 8]", {{4, 8}},
            [](const Inputs& x) { return nn::apply_rope(x[0], 7) * x[0]; });
  on_leaves("rope/scores", "q [2, 3, 4], k [2, 5, 4], q offset 4", {{2, 3, 4}, {2, 5, 4}},
            [](const Inputs& x) {
              return matmul(nn::apply_rope(x[0], 4), nn::apply_rope(x[1]).transpose(-1, -2));
            });
}

}  // namespace

std::vector<GradcheckCase> attention_variant_gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  add_linformer_cases(cases);
  add_performer_cases(cases);
  add_rope_cases(cases);
  return cases;
}

}  // namespace tg
