// Gradcheck cases for the attention variants on split heads: Linformer (through q, k, v and both
// projections), Performer (through q, k and v; its features are a fixed buffer), Reformer's LSH
// attention (through q and v, its buckets held fixed), RoPE, and the learned relative positions
// (the fused kernel's relative bias, T5's lookup, Shaw's relative logits).
#include <string>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/gradcheck_cases.h"
#include "tapegrad/nn/linformer.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/nn/relative_position.h"
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

// Reformer: q [2, 2, 7, 4] and v [2, 2, 7, 3], hashed once when the case is made (2 rounds of 4
// buckets) and the buckets passed as a constant input: the hash is piecewise constant in q, so
// its true derivative is 0 wherever it is defined, and holding the sort fixed keeps a +-eps step
// from moving a position to another bucket (which would make the finite difference a jump, not
// a derivative). Chunks of 3 over 7 positions: 3 chunks, the last one padded with 2 slots.
void add_reformer_cases(std::vector<GradcheckCase>& cases) {
  const auto make = [](int64_t rounds) {
    return [rounds] {
      Inputs x = leaves({{2, 2, 7, 4}, {2, 2, 7, 3}});
      const Tensor rotations = nn::reformer_rotations(rounds, 4, 4, /*seed=*/7, DType::f64);
      x.push_back(nn::reformer_buckets(x[0], rotations));
      return x;
    };
  };
  const auto run = [](bool padded, bool causal, int64_t chunk) {
    return [padded, causal, chunk](const Inputs& x) {
      const Tensor padding =
          padded ? from_bools({true, true, true, true, true, true, true, true, true, true, true,
                               false, false, false}, {2, 7})
                 : Tensor();
      return nn::lsh_attention(x[0], x[1], x[2], padding, causal, chunk);
    };
  };
  const std::string shapes = "q [2, 2, 7, 4], v [2, 2, 7, 3], 4 buckets";
  cases.push_back(make_case("reformer/non-causal", shapes + ", 2 rounds, C 3", make(2),
                            run(false, false, 3)));
  cases.push_back(make_case("reformer/causal", shapes + ", 2 rounds, C 3", make(2),
                            run(false, true, 3)));
  cases.push_back(make_case("reformer/padding", shapes + ", 2 rounds, C 3, lengths 7, 4", make(2),
                            run(true, false, 3)));
  cases.push_back(make_case("reformer/one-chunk", shapes + ", 1 round, C 7", make(1),
                            run(false, true, 7)));
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

// The relative bias inside the fused kernel (a leaf [H, Sq + Sk - 1]: its gradient is dS summed
// along the diagonals), over 70 positions (two query tiles of the CPU kernel, two key tiles of the
// CUDA one) and with Sq != Sk; T5's lookup into its table; Shaw's relative logits.
void add_relative_bias_op_cases(std::vector<GradcheckCase>& cases) {
  for (const bool causal : {false, true}) {
    cases.push_back(make_case(std::string("sdpa/relative-bias") + (causal ? "/causal" : ""),
        "q, k, v [1, 1, 70, 2], relative bias [1, 139]",
        [] { return leaves({{1, 1, 70, 2}, {1, 1, 70, 2}, {1, 1, 70, 2}, {1, 139}}); },
        [causal](const Inputs& x) {
          return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), causal, 0.0, {}, {},
                                              false, x[3]);
        }));
  }
  cases.push_back(make_case("sdpa/relative-bias/cross+padding",
      "q [2, 2, 4, 3], k, v [2, 2, 6, 3], relative bias [2, 9], key lengths 6, 4",
      [] { return leaves({{2, 2, 4, 3}, {2, 2, 6, 3}, {2, 2, 6, 3}, {2, 9}}); },
      [](const Inputs& x) {
        const Tensor keys = from_bools({true, true, true, true, true, true, true, true, true, true,
                                        false, false}, {2, 1, 1, 6});
        return scaled_dot_product_attention(x[0], x[1], x[2], keys, false, 0.0, {}, {}, false,
                                            x[3]);
      }));
  cases.push_back(make_case("t5/relative-bias", "table [6, 3], Sq 4, Sk 9, max_distance 8",
      [] { return leaves({{6, 3}}); },
      [](const Inputs& x) { return nn::t5_relative_bias(x[0], 4, 9, true, 8) * 1.5; }));
  cases.push_back(make_case("shaw/relative-logits", "q [2, 5, 3], table [5, 3] (clip 2), Sk 6",
      [] { return leaves({{2, 5, 3}, {5, 3}}); },
      [](const Inputs& x) { return nn::shaw_relative_logits(x[0], x[1], 6); }));
}

}  // namespace

std::vector<GradcheckCase> attention_variant_gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  add_linformer_cases(cases);
  add_performer_cases(cases);
  add_reformer_cases(cases);
  add_rope_cases(cases);
  add_relative_bias_op_cases(cases);
  return cases;
}

}  // namespace tg
