// The models' state_shapes() (a state_dict's names and shapes, computed without building the
// model) against state_dict() of built models, for many configs and every attention variant: the
// two cannot drift apart.
#include <catch2/catch.hpp>

#include <algorithm>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/nn/models.h"

using namespace tg;

namespace {

nn::StateShapes shapes_of(const nn::NamedTensors& tensors) {
  nn::StateShapes shapes;
  for (const auto& [name, t] : tensors) shapes.emplace_back(name, t.shape());
  return shapes;
}

nn::ModelConfig config_with(int64_t dim, int64_t heads, int64_t layers,
                            const nn::AttentionSpec& attention = {}) {
  nn::ModelConfig config;
  config.dim = dim;
  config.heads = heads;
  config.layers = layers;
  config.max_len = 16;
  config.attention = attention;
  return config;
}

// The shapes from state_shapes() equal state_dict()'s, in order; its parameters equal
// named_parameters() (so an optimizer's parameter i is entry i, what the checkpoint checks of
// "optimizer.<i>.*" rely on) and its buffers named_buffers().
void require_same_shapes(const nn::ModelStateShapes& declared, const nn::Module& model) {
  REQUIRE(declared.state_dict() == shapes_of(model.state_dict()));
  REQUIRE(declared.parameters == shapes_of(model.named_parameters()));
  REQUIRE(declared.buffers == shapes_of(model.named_buffers()));
}

nn::AttentionSpec spec_of(nn::AttentionKind kind, nn::PositionKind position = nn::PositionKind::sinusoidal) {
  nn::AttentionSpec spec;
  spec.kind = kind;
  spec.position = position;
  spec.window = 3;
  spec.dilation = kind == nn::AttentionKind::band ? 2 : 1;
  if (kind == nn::AttentionKind::bigbird) {
    spec.random_blocks = 1;
    spec.global_tokens = 2;
  }
  spec.rank = kind == nn::AttentionKind::linformer ? 5 : 0;
  spec.features = kind == nn::AttentionKind::performer ? 6 : 0;
  spec.buckets = kind == nn::AttentionKind::reformer ? 6 : 0;
  spec.rounds = kind == nn::AttentionKind::reformer ? 2 : 0;
  spec.seed = 7;
  return spec;
}

// Every model (each with its single-attention and its encoder-layer form) with `spec`.
void require_every_model_matches(const nn::AttentionSpec& spec) {
  for (const int64_t layers : {0, 2}) {
    INFO("TextClassifier, layers " << layers);
    const nn::ModelConfig config = config_with(8, 2, layers, spec);
    require_same_shapes(nn::TextClassifier::state_shapes(11, 3, config), nn::TextClassifier(11, 3, config));
  }
  for (const int64_t layers : {1, 2}) {
    INFO("TimeSeriesModel, layers " << layers);
    const nn::ModelConfig config = config_with(8, 2, layers, spec);
    require_same_shapes(nn::TimeSeriesModel::state_shapes(3, 2, config), nn::TimeSeriesModel(3, 2, config));
  }
  INFO("CharLM, 2 layers");
  const nn::ModelConfig config = config_with(8, 2, 2, spec);
  require_same_shapes(nn::CharLM::state_shapes(7, config), nn::CharLM(7, config));
}

}  // namespace

TEST_CASE("state_shapes equals state_dict: TextClassifier", "[models][checkpoint]") {
  for (const int64_t layers : {0, 1, 2}) {
    for (const bool checkpointed : {false, true}) {
      INFO("layers " << layers << ", checkpoint_layers " << checkpointed);
      const nn::ModelConfig config = config_with(8, 2, layers);
      nn::TextClassifier model(11, 3, config);
      model.checkpoint_layers = checkpointed;
      require_same_shapes(nn::TextClassifier::state_shapes(11, 3, config), model);
    }
  }
  // One class is a model the constructor accepts, so state_shapes does too.
  const nn::ModelConfig config = config_with(12, 3, 1);
  require_same_shapes(nn::TextClassifier::state_shapes(5, 1, config), nn::TextClassifier(5, 1, config));
}

TEST_CASE("state_shapes equals state_dict: TimeSeriesModel", "[models][checkpoint]") {
  for (const int64_t layers : {1, 2, 3}) {  // 1: the tutorial's single mha; more: encoder layers
    for (const bool checkpointed : {false, true}) {
      INFO("layers " << layers << ", checkpoint_layers " << checkpointed);
      const nn::ModelConfig config = config_with(8, 4, layers);
      nn::TimeSeriesModel model(3, 2, config);
      model.checkpoint_layers = checkpointed;
      require_same_shapes(nn::TimeSeriesModel::state_shapes(3, 2, config), model);
    }
  }
}

TEST_CASE("state_shapes equals state_dict: CharLM", "[models][checkpoint]") {
  for (const int64_t layers : {0, 1, 2}) {
    for (const bool checkpointed : {false, true}) {
      INFO("layers " << layers << ", checkpoint_layers " << checkpointed);
      const nn::ModelConfig config = config_with(16, 4, layers);
      nn::CharLM model(7, config);
      model.checkpoint_layers = checkpointed;
      require_same_shapes(nn::CharLM::state_shapes(7, config), model);
    }
  }
}

TEST_CASE("state_shapes spells out the expected entries by hand", "[models][checkpoint]") {
  // A one-layer CharLM of dim 4 over 6 tokens, written out from the PyTorch model it mirrors.
  const nn::StateShapes expected = {
      {"embedding.weight", {6, 4}},
      {"layers.0.norm1.weight", {4}}, {"layers.0.norm1.bias", {4}},
      {"layers.0.attn.q_proj.weight", {4, 4}}, {"layers.0.attn.q_proj.bias", {4}},
      {"layers.0.attn.k_proj.weight", {4, 4}}, {"layers.0.attn.k_proj.bias", {4}},
      {"layers.0.attn.v_proj.weight", {4, 4}}, {"layers.0.attn.v_proj.bias", {4}},
      {"layers.0.attn.o_proj.weight", {4, 4}}, {"layers.0.attn.o_proj.bias", {4}},
      {"layers.0.norm2.weight", {4}}, {"layers.0.norm2.bias", {4}},
      {"layers.0.mlp.linear1.weight", {16, 4}}, {"layers.0.mlp.linear1.bias", {16}},
      {"layers.0.mlp.linear2.weight", {4, 16}}, {"layers.0.mlp.linear2.bias", {4}},
      {"norm.weight", {4}}, {"norm.bias", {4}},
      {"head.weight", {6, 4}}, {"head.bias", {6}},
  };
  REQUIRE(nn::CharLM::state_shapes(6, config_with(4, 2, 1)).state_dict() == expected);
  REQUIRE(nn::CharLM::state_shapes(6, config_with(4, 2, 1)).buffers.empty());
}

TEST_CASE("state_shapes: the tutorial-form models hold the tutorial's pos_encoding.pe", "[models][checkpoint]") {
  // textcls --layers 0 and timeseries --layers 1: the buffer [1, max_len, dim] after the
  // parameters, as the tutorial's PositionalEncoding registers it; the other forms keep the table
  // out of the state_dict, and a position kind other than sinusoidal has none.
  const nn::StateShapes table = {{"pos_encoding.pe", {1, 16, 8}}};
  REQUIRE(nn::TextClassifier::state_shapes(5, 2, config_with(8, 2, 0)).buffers == table);
  REQUIRE(nn::TimeSeriesModel::state_shapes(3, 2, config_with(8, 2, 1)).buffers == table);
  REQUIRE(nn::TextClassifier::state_shapes(5, 2, config_with(8, 2, 1)).buffers.empty());
  REQUIRE(nn::TimeSeriesModel::state_shapes(3, 2, config_with(8, 2, 2)).buffers.empty());
  const nn::AttentionSpec rope = spec_of(nn::AttentionKind::full, nn::PositionKind::rope);
  REQUIRE(nn::TextClassifier::state_shapes(5, 2, config_with(8, 2, 0, rope)).buffers.empty());
  nn::TextClassifier model(5, 2, config_with(8, 2, 0));
  REQUIRE(model.state_dict().back().first == "pos_encoding.pe");
  REQUIRE(model.state_dict().back().second.to_host_f64() == nn::sinusoidal_buffer(16, 8).to_host_f64());
}

TEST_CASE("state_shapes equals state_dict: sparse layouts and position kinds", "[models][checkpoint][attention]") {
  // Sparse layouts and RoPE / ALiBi add no tensors; rope, alibi and none drop the sinusoidal
  // table (in the state_dict of the tutorial-form models only).
  using nn::AttentionKind, nn::PositionKind;
  for (const AttentionKind kind : {AttentionKind::full, AttentionKind::local, AttentionKind::band,
                                   AttentionKind::bigbird}) {
    for (const PositionKind position : {PositionKind::sinusoidal, PositionKind::rope,
                                        PositionKind::alibi, PositionKind::none}) {
      INFO("kind " << static_cast<int>(kind) << ", position " << static_cast<int>(position));
      require_every_model_matches(spec_of(kind, position));
    }
  }
  const nn::ModelConfig with_rope = config_with(8, 2, 1, spec_of(AttentionKind::local, PositionKind::rope));
  REQUIRE(nn::CharLM(7, with_rope).pos_enc == nullptr);
  REQUIRE(nn::CharLM(7, config_with(8, 2, 1)).pos_enc != nullptr);
}

TEST_CASE("state_shapes spells out Linformer's and Performer's entries", "[models][checkpoint][attention]") {
  // MultiHeadAttention's own parameters come before its children's (Module::named_parameters),
  // and persistent buffers after every parameter of the model (Module::state_dict).
  const auto names = [](const nn::StateShapes& shapes) {
    std::vector<std::string> out;
    for (const auto& [name, shape] : shapes) out.push_back(name);
    return out;
  };
  const nn::ModelStateShapes linformer =
      nn::TimeSeriesModel::state_shapes(3, 2, config_with(8, 2, 1, spec_of(nn::AttentionKind::linformer)));
  REQUIRE(names(linformer.parameters) ==
          std::vector<std::string>{"input_proj.weight", "input_proj.bias", "mha.proj_k", "mha.proj_v",
                                   "mha.q_proj.weight", "mha.q_proj.bias", "mha.k_proj.weight",
                                   "mha.k_proj.bias", "mha.v_proj.weight", "mha.v_proj.bias",
                                   "mha.o_proj.weight", "mha.o_proj.bias", "output.weight", "output.bias"});
  REQUIRE(linformer.parameters[2].second == Shape{16, 5});  // [max_len, rank]
  // Linformer's E and F are parameters; the one buffer is the tutorial form's table.
  REQUIRE(linformer.buffers == nn::StateShapes{{"pos_encoding.pe", {1, 16, 8}}});

  const nn::ModelStateShapes performer =
      nn::CharLM::state_shapes(7, config_with(8, 2, 2, spec_of(nn::AttentionKind::performer)));
  REQUIRE(performer.buffers == nn::StateShapes{{"layers.0.attn.projection_matrix", {6, 4}},
                                               {"layers.1.attn.projection_matrix", {6, 4}}});
  REQUIRE(performer.state_dict().back().first == "layers.1.attn.projection_matrix");
  REQUIRE(performer.parameters == nn::CharLM::state_shapes(7, config_with(8, 2, 2)).parameters);
}

// Needs MultiHeadAttention to register Linformer's proj_k / proj_v and Performer's
// projection_matrix (the lead's side of the attention variants).
TEST_CASE("state_shapes equals state_dict: Linformer and Performer", "[models][checkpoint][attention][needs-mha-variants]") {
  require_every_model_matches(spec_of(nn::AttentionKind::linformer));
  require_every_model_matches(spec_of(nn::AttentionKind::performer));
  require_every_model_matches(spec_of(nn::AttentionKind::performer, nn::PositionKind::rope));
}

TEST_CASE("state_shapes equals state_dict: Reformer (no k_proj, rotations as buffers)",
          "[models][checkpoint][attention][reformer]") {
  require_every_model_matches(spec_of(nn::AttentionKind::reformer));
  require_every_model_matches(spec_of(nn::AttentionKind::reformer, nn::PositionKind::rope));
  const nn::ModelStateShapes reformer =
      nn::CharLM::state_shapes(7, config_with(8, 2, 1, spec_of(nn::AttentionKind::reformer)));
  REQUIRE(reformer.buffers == nn::StateShapes{{"layers.0.attn.random_rotations", {2, 4, 3}}});
  for (const auto& [name, shape] : reformer.parameters) {
    REQUIRE(name.find("k_proj") == std::string::npos);
  }
  REQUIRE(reformer.parameters.size() + 2 ==
          nn::CharLM::state_shapes(7, config_with(8, 2, 1)).parameters.size());
}

TEST_CASE("state_shapes allocates nothing and rejects what the constructors reject", "[models][checkpoint]") {
  // A config whose model would need gigabytes: only names and numbers come back.
  reset_allocator_stats();
  const nn::StateShapes huge = nn::CharLM::state_shapes(100000, config_with(30000, 4, 2)).state_dict();
  REQUIRE(allocator_stats().allocations == 0);
  REQUIRE(huge.front() == std::pair<std::string, Shape>{"embedding.weight", {100000, 30000}});
  REQUIRE(huge.back() == std::pair<std::string, Shape>{"head.bias", {100000}});

  REQUIRE_THROWS_WITH(nn::CharLM::state_shapes(0, config_with(8, 2, 1)), Catch::Contains("vocab"));
  REQUIRE_THROWS_WITH(nn::TextClassifier::state_shapes(5, 0, config_with(8, 2, 1)), Catch::Contains("classes"));
  REQUIRE_THROWS_WITH(nn::TimeSeriesModel::state_shapes(3, 1, config_with(8, 2, 0)), Catch::Contains("layers"));
  REQUIRE_THROWS_WITH(nn::CharLM::state_shapes(5, config_with(10, 4, 1)), Catch::Contains("4 heads"));
  // 4 * dim past int64: an error, not a wrapped-around shape.
  REQUIRE_THROWS_AS(nn::CharLM::state_shapes(5, config_with(int64_t{1} << 62, 1, 1)), Error);
  nn::AttentionSpec no_rank = spec_of(nn::AttentionKind::linformer);
  no_rank.rank = 0;
  REQUIRE_THROWS_WITH(nn::CharLM::state_shapes(5, config_with(8, 2, 1, no_rank)), Catch::Contains("rank"));
}

TEST_CASE("state_shapes equals state_dict: T5's and Shaw's tables after the projections",
          "[models][checkpoint][attention][relative-position]") {
  for (const nn::AttentionKind kind : {nn::AttentionKind::full, nn::AttentionKind::local,
                                       nn::AttentionKind::bigbird}) {
    for (const nn::PositionKind position : {nn::PositionKind::t5, nn::PositionKind::shaw}) {
      nn::AttentionSpec spec = spec_of(kind, position);
      spec.relative = {.buckets = 6, .max_distance = 20, .clip = 3};
      require_every_model_matches(spec);
    }
  }
  nn::AttentionSpec t5 = spec_of(nn::AttentionKind::full, nn::PositionKind::t5);
  const nn::ModelStateShapes lm = nn::CharLM::state_shapes(7, config_with(8, 2, 1, t5));
  REQUIRE(std::find(lm.parameters.begin(), lm.parameters.end(),
                    std::pair<std::string, Shape>{"layers.0.attn.relative_attention_bias.weight",
                                                  {32, 2}}) != lm.parameters.end());
  nn::AttentionSpec shaw = spec_of(nn::AttentionKind::full, nn::PositionKind::shaw);
  const nn::ModelStateShapes cls =
      nn::TextClassifier::state_shapes(9, 2, config_with(8, 2, 0, shaw));
  REQUIRE(std::find(cls.parameters.begin(), cls.parameters.end(),
                    std::pair<std::string, Shape>{"mha.relative_key.weight", {33, 4}}) !=
          cls.parameters.end());
  shaw.kind = nn::AttentionKind::performer;
  shaw.features = 4;
  REQUIRE_THROWS_AS(nn::CharLM::state_shapes(7, config_with(8, 2, 1, shaw)), Error);
}
