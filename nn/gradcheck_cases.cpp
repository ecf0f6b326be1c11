// Gradcheck cases for the nn modules. A module is built in f64 and its parameters are passed to
// gradcheck as inputs (they are the same tensors the module uses), so every weight is checked.
#include "tapegrad/nn/gradcheck_cases.h"

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/ops/ops.h"

namespace tg {
namespace {

using Inputs = std::vector<Tensor>;

// A case on a module made by `make` (in f64), the extra leaves from `make_leaves`, and a forward
// `run(module, leaves)`. The inputs are the extra leaves followed by every parameter.
template <typename M>
GradcheckCase module_case(std::string name, std::string shapes, std::function<std::shared_ptr<M>()> make,
                          std::function<Inputs()> make_leaves,
                          std::function<Tensor(const M&, const Inputs&)> run,
                          GradcheckOptions options = {}) {
  auto module = std::make_shared<std::shared_ptr<M>>();
  auto leaf_count = std::make_shared<size_t>(0);
  return make_case(std::move(name), std::move(shapes), [=] {
    *module = make();
    (*module)->to(DType::f64);
    Inputs inputs = make_leaves();
    *leaf_count = inputs.size();
    for (const Tensor& p : (*module)->parameters()) inputs.push_back(p);
    return inputs;
  }, [=](const Inputs& inputs) {
    return run(**module, Inputs(inputs.begin(), inputs.begin() + *leaf_count));
  }, options);
}

Inputs leaves(std::vector<Shape> shapes) {
  Inputs result;
  for (const Shape& shape : shapes) result.push_back(random_leaf(shape));
  return result;
}

// A row that may attend nothing: query 1 of each sequence sees no key.
Tensor mask_with_empty_row(int64_t sq, int64_t sk) {
  std::vector<bool> allowed(sq * sk, true);
  for (int64_t j = 0; j < sk; ++j) allowed[1 * sk + j] = false;
  return from_bools(allowed, {sq, sk});
}

void add_attention_cases(std::vector<GradcheckCase>& cases, bool fused) {
  const std::string path = fused ? "fused" : "explicit";
  auto mha = [fused] {
    auto m = std::make_shared<nn::MultiHeadAttention>(8, 2);
    m->use_fused = fused;
    return m;
  };
  using MHA = nn::MultiHeadAttention;
  // The mask is made when the case runs, on the device it runs on.
  auto self = [](std::function<Tensor()> make_mask, bool causal) {
    return [make_mask, causal](const MHA& m, const Inputs& x) {
      return m.forward(x[0], x[0], x[0], make_mask(), false, causal).output;
    };
  };
  const auto no_mask = [] { return Tensor(); };
  cases.push_back(module_case<MHA>("mha/" + path + "/self-no-mask", "x [2, 3, 8], 2 heads", mha,
                                   [] { return leaves({{2, 3, 8}}); }, self(no_mask, false)));
  cases.push_back(module_case<MHA>("mha/" + path + "/causal", "x [2, 4, 8], causal", mha,
                                   [] { return leaves({{2, 4, 8}}); }, self(no_mask, true)));
  cases.push_back(module_case<MHA>("mha/" + path + "/padding", "x [2, 4, 8], lengths 4, 2", mha,
                                   [] { return leaves({{2, 4, 8}}); }, self([] { return nn::padding_mask({4, 2}, 4); }, false)));
  cases.push_back(module_case<MHA>("mha/" + path + "/causal+padding", "x [2, 4, 8], lengths 3, 2", mha,
                                   [] { return leaves({{2, 4, 8}}); }, self([] { return nn::padding_mask({3, 2}, 4); }, true)));
  cases.push_back(module_case<MHA>("mha/" + path + "/fully-masked-row", "x [2, 3, 8], row 1 empty", mha,
                                   [] { return leaves({{2, 3, 8}}); }, self([] { return mask_with_empty_row(3, 3); }, false)));
  cases.push_back(module_case<MHA>("mha/" + path + "/cross-attention", "q [2, 3, 8], kv [2, 5, 8]", mha,
                                   [] { return leaves({{2, 3, 8}, {2, 5, 8}}); },
                                   [](const MHA& m, const Inputs& x) { return m.forward(x[0], x[1], x[1]).output; }));
  cases.push_back(module_case<MHA>("mha/" + path + "/cross-attention-padding", "q [2, 3, 8], kv [2, 5, 8], lengths 5, 1", mha,
                                   [] { return leaves({{2, 3, 8}, {2, 5, 8}}); },
                                   [](const MHA& m, const Inputs& x) {
                                     return m.forward(x[0], x[1], x[1], nn::padding_mask({5, 1}, 5)).output;
                                   }));
  if (fused) return;
  // need_weights' weights themselves (the explicit path, whatever use_fused says): averaged over
  // the heads as PyTorch returns them by default, and each head's.
  for (const bool average : {true, false}) {
    cases.push_back(module_case<MHA>(
        std::string("mha/weights/") + (average ? "averaged" : "per-head"),
        average ? "x [2, 4, 8], lengths 4, 3 -> [2, 4, 4]" : "x [2, 4, 8], lengths 4, 3 -> [2, 2, 4, 4]",
        mha, [] { return leaves({{2, 4, 8}}); },
        [average](const MHA& m, const Inputs& x) {
          return m.forward(x[0], x[0], x[0], nn::padding_mask({4, 3}, 4), /*need_weights=*/true,
                           /*is_causal=*/false, average).weights;
        }));
  }
}

// MultiHeadAttention with T5's bias (on the fused kernel, and on the explicit path) and with
// Shaw's relative keys: 4 buckets reaching 4 positions and clip 2, so that over 5 positions every
// bucket and every relative key is used, and the tables' gradients are checked with the rest.
void add_relative_position_module_cases(std::vector<GradcheckCase>& cases) {
  using MHA = nn::MultiHeadAttention;
  const nn::RelativePositions small{.buckets = 4, .max_distance = 4, .clip = 2};
  const std::vector<std::pair<std::string, nn::AttentionSpec>> specs = {
      {"t5", {.position = nn::PositionKind::t5, .relative = small}},
      {"local+t5", {.kind = nn::AttentionKind::local, .window = 3,
                    .position = nn::PositionKind::t5, .relative = small}},
      {"shaw", {.position = nn::PositionKind::shaw, .relative = small}},
      {"bigbird+shaw", {.kind = nn::AttentionKind::bigbird, .window = 2, .random_blocks = 1,
                        .global_tokens = 1, .seed = 2, .position = nn::PositionKind::shaw,
                        .relative = small}},
  };
  for (const auto& [name, spec] : specs) {
    for (const bool causal : {true, false}) {  // causal buckets, or bidirectional with padding
      for (const bool fused : {true, false}) {
        if (!fused && spec.position == nn::PositionKind::shaw) continue;  // always explicit
        const std::string path = fused ? "" : "/explicit";
        cases.push_back(module_case<MHA>(
            "mha/" + name + (causal ? "/causal" : "/padding") + path,
            std::string("x [2, 5, 8], 2 heads") + (causal ? ", causal" : ", lengths 5, 3"),
            [spec = spec, fused] {
              auto m = std::make_shared<MHA>(8, 2, 0.0, DType::f32, spec);
              m->use_fused = fused;
              return m;
            },
            [] { return leaves({{2, 5, 8}}); },
            [causal](const MHA& m, const Inputs& x) {
              return causal ? m.forward(x[0], Tensor(), true).output
                            : m.forward(x[0], nn::padding_mask({5, 3}, 5)).output;
            }));
      }
    }
  }
}

}  // namespace

std::vector<GradcheckCase> nn_gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  cases.push_back(module_case<nn::Linear>("nn/linear", "x [2, 4] -> 3", [] { return std::make_shared<nn::Linear>(4, 3); },
      [] { return leaves({{2, 4}}); }, [](const nn::Linear& m, const Inputs& x) { return m.forward(x[0]); }));
  cases.push_back(module_case<nn::LayerNorm>("nn/layer_norm", "x [3, 5]",
      [] {
        auto m = std::make_shared<nn::LayerNorm>(5);
        NoGrad no_grad;  // weights start at 1 and 0: move them off that point
        kernels(kCPU).copy(uniform({5}, 0.5, 1.5), m->weight);
        kernels(kCPU).copy(uniform({5}, -0.5, 0.5), m->bias);
        return m;
      },
      [] { return leaves({{3, 5}}); }, [](const nn::LayerNorm& m, const Inputs& x) { return m.forward(x[0]); }));
  cases.push_back(module_case<nn::Embedding>("nn/embedding", "ids [2, 3] (repeats) in 6 x 3",
      [] { return std::make_shared<nn::Embedding>(6, 3); }, [] { return Inputs{}; },
      [](const nn::Embedding& m, const Inputs&) { return m.forward(from_indices({1, 4, 1, 0, 5, 1}, {2, 3})); }));
  cases.push_back(module_case<nn::SinusoidalPositionalEncoding>("nn/positional_encoding", "x [2, 5, 6]",
      [] { return std::make_shared<nn::SinusoidalPositionalEncoding>(6, 16); },
      [] { return leaves({{2, 5, 6}}); },
      [](const nn::SinusoidalPositionalEncoding& m, const Inputs& x) { return m.forward(x[0]) * x[0]; }));

  add_attention_cases(cases, true);
  add_attention_cases(cases, false);

  cases.push_back(module_case<nn::MultiHeadAttention>("mha/fused/dropout", "x [2, 3, 8], p 0.3, training",
      [] { return std::make_shared<nn::MultiHeadAttention>(8, 2, 0.3); },
      [] { return leaves({{2, 3, 8}}); },
      [state = std::make_shared<RngState>(RngState{42, 0})](const nn::MultiHeadAttention& m, const Inputs& x) {
        set_rng_state(*state);  // the same dropout mask at every evaluation
        return m.forward(x[0]).output;
      }));
  cases.push_back(make_case("sdpa/causal+padding+dropout", "q, k, v [2, 2, 5, 3]",
      [] { return leaves({{2, 2, 5, 3}, {2, 2, 5, 3}, {2, 2, 5, 3}}); },
      [](const Inputs& x) {
        set_rng_state({7, 0});
        return scaled_dot_product_attention(x[0], x[1], x[2], nn::padding_mask({5, 3}, 5), true, 0.25);
      }));

  cases.push_back(make_case("packed_attention/causal+padding+dropout", "qkv [2, 5, 12], 2 heads",
      [] { return leaves({{2, 5, 12}}); },
      [](const Inputs& x) {
        set_rng_state({7, 0});
        return packed_self_attention(x[0], 2, nn::padding_mask({5, 3}, 5), true, 0.25);
      }));

  // The sparse layouts and ALiBi on the fused kernel: 70 positions span two query tiles of the
  // CPU kernel and two key tiles of the CUDA one, so skipped tiles are part of what is checked
  // (tests/ops/test_attention.cpp compares longer sequences with the explicit path).
  const std::vector<std::pair<std::string, SparsityLayout>> layouts = {
      {"local", {.kind = SparsityKind::local, .window = 9}},
      {"band", {.kind = SparsityKind::band, .window = 3, .dilation = 8}},
      {"bigbird", {.kind = SparsityKind::bigbird, .window = 3, .random_blocks = 1, .global_tokens = 2, .seed = 4}},
  };
  for (const auto& [name, layout] : layouts) {
    for (bool causal : {false, true}) {
      cases.push_back(make_case("sdpa/" + name + (causal ? "/causal" : ""), "q, k, v [1, 1, 70, 2]",
          [] { return leaves({{1, 1, 70, 2}, {1, 1, 70, 2}, {1, 1, 70, 2}}); },
          [layout = layout, causal](const Inputs& x) {
            return scaled_dot_product_attention(x[0], x[1], x[2], Tensor(), causal, 0.0, {}, layout);
          }));
    }
  }
  // MultiHeadAttention with each variant, through every weight (and Linformer's E and F).
  const std::vector<std::pair<std::string, nn::AttentionSpec>> variants = {
      {"local+rope", {.kind = nn::AttentionKind::local, .window = 2, .position = nn::PositionKind::rope}},
      {"bigbird+alibi", {.kind = nn::AttentionKind::bigbird, .window = 2, .random_blocks = 1,
                         .global_tokens = 1, .seed = 2, .position = nn::PositionKind::alibi}},
      {"linformer", {.kind = nn::AttentionKind::linformer, .rank = 2, .max_len = 6}},
      {"performer+rope", {.kind = nn::AttentionKind::performer, .features = 6, .seed = 3,
                          .position = nn::PositionKind::rope}},
      // The hash runs on the perturbed inputs here: no bucket margin of this case is near eps.
      {"reformer", {.kind = nn::AttentionKind::reformer, .buckets = 4, .rounds = 2, .seed = 3}},
  };
  for (const auto& [name, spec] : variants) {
    const bool causal = spec.kind != nn::AttentionKind::linformer;
    cases.push_back(module_case<nn::MultiHeadAttention>("mha/" + name, std::string("x [2, 5, 8], 2 heads") + (causal ? ", causal" : ", padding"),
        [spec = spec] { return std::make_shared<nn::MultiHeadAttention>(8, 2, 0.0, DType::f32, spec); },
        [] { return leaves({{2, 5, 8}}); },
        [causal](const nn::MultiHeadAttention& m, const Inputs& x) {
          return causal ? m.forward(x[0], Tensor(), true).output
                        : m.forward(x[0], nn::padding_mask({5, 3}, 5)).output;
        }));
  }
  cases.push_back(make_case("sdpa/alibi+padding", "q, k, v [2, 3, 6, 3]",
      [] { return leaves({{2, 3, 6, 3}, {2, 3, 6, 3}, {2, 3, 6, 3}}); },
      [](const Inputs& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], nn::padding_mask({6, 4}, 6), false, 0.0,
                                            {}, {}, /*alibi=*/true);
      }));

  cases.push_back(module_case<nn::TransformerEncoderLayer>("nn/transformer_encoder_layer", "x [2, 3, 8], 2 heads, mlp 16",
      [] { return std::make_shared<nn::TransformerEncoderLayer>(8, 2, 16); },
      [] { return leaves({{2, 3, 8}}); },
      [](const nn::TransformerEncoderLayer& m, const Inputs& x) { return m.forward(x[0], nn::padding_mask({3, 2}, 3)); }));

  nn::ModelConfig tiny;
  tiny.dim = 8;
  tiny.heads = 2;
  tiny.max_len = 16;
  GradcheckOptions fast;
  fast.fast = true;
  for (int64_t layers : {0, 1}) {
    nn::ModelConfig c = tiny;
    c.layers = layers;
    cases.push_back(module_case<nn::TextClassifier>("model/text_classifier/layers-" + std::to_string(layers),
        "ids [2, 4], lengths 4, 2, 3 classes",
        [c] { return std::make_shared<nn::TextClassifier>(10, 3, c); }, [] { return Inputs{}; },
        [](const nn::TextClassifier& m, const Inputs&) {
          return m.forward(from_indices({1, 5, 2, 9, 3, 3, 0, 0}, {2, 4}), {4, 2});
        }, layers == 0 ? GradcheckOptions{} : fast));
  }
  for (int64_t layers : {1, 2}) {
    nn::ModelConfig c = tiny;
    c.layers = layers;
    cases.push_back(module_case<nn::TimeSeriesModel>("model/timeseries/layers-" + std::to_string(layers),
        "x [2, 5, 3] -> horizon 2",
        [c] { return std::make_shared<nn::TimeSeriesModel>(3, 2, c); },
        [] { return leaves({{2, 5, 3}}); },
        [](const nn::TimeSeriesModel& m, const Inputs& x) { return m.forward(x[0]); },
        layers == 1 ? GradcheckOptions{} : fast));
  }
  {
    nn::ModelConfig c = tiny;
    c.layers = 2;
    cases.push_back(module_case<nn::CharLM>("model/char_lm", "ids [2, 5], vocab 7, 2 layers",
        [c] { return std::make_shared<nn::CharLM>(7, c); }, [] { return Inputs{}; },
        [](const nn::CharLM& m, const Inputs&) {
          return cross_entropy(m.forward(from_indices({1, 2, 3, 4, 5, 6, 0, 1, 2, 3}, {2, 5})),
                               from_indices({2, 3, 4, 5, 6, 0, 1, 2, 3, 4}, {2, 5}));
        }, fast));
  }
  add_relative_position_module_cases(cases);
  for (GradcheckCase& c : attention_variant_gradcheck_cases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace tg
