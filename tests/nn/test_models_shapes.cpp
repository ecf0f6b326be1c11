// The models' state_shapes() (a state_dict's names and shapes, computed without building the
// model) against state_dict() of built models, for many configs: the two cannot drift apart.
#include <catch2/catch.hpp>

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

nn::ModelConfig config_with(int64_t dim, int64_t heads, int64_t layers) {
  nn::ModelConfig config;
  config.dim = dim;
  config.heads = heads;
  config.layers = layers;
  config.max_len = 16;
  return config;
}

// The shapes from state_shapes() equal state_dict()'s, in order, and equal named_parameters():
// these models keep no persistent buffers, so an optimizer's parameter i is entry i (what the
// checkpoint checks of "optimizer.<i>.*" rely on).
void require_same_shapes(const nn::StateShapes& declared, const nn::Module& model) {
  REQUIRE(declared == shapes_of(model.state_dict()));
  REQUIRE(declared == shapes_of(model.named_parameters()));
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
  REQUIRE(nn::CharLM::state_shapes(6, config_with(4, 2, 1)) == expected);
}

TEST_CASE("state_shapes allocates nothing and rejects what the constructors reject", "[models][checkpoint]") {
  // A config whose model would need gigabytes: only names and numbers come back.
  reset_allocator_stats();
  const nn::StateShapes huge = nn::CharLM::state_shapes(100000, config_with(30000, 4, 2));
  REQUIRE(allocator_stats().allocations == 0);
  REQUIRE(huge.front() == std::pair<std::string, Shape>{"embedding.weight", {100000, 30000}});
  REQUIRE(huge.back() == std::pair<std::string, Shape>{"head.bias", {100000}});

  REQUIRE_THROWS_WITH(nn::CharLM::state_shapes(0, config_with(8, 2, 1)), Catch::Contains("vocab"));
  REQUIRE_THROWS_WITH(nn::TextClassifier::state_shapes(5, 0, config_with(8, 2, 1)), Catch::Contains("classes"));
  REQUIRE_THROWS_WITH(nn::TimeSeriesModel::state_shapes(3, 1, config_with(8, 2, 0)), Catch::Contains("layers"));
  REQUIRE_THROWS_WITH(nn::CharLM::state_shapes(5, config_with(10, 4, 1)), Catch::Contains("4 heads"));
  // 4 * dim past int64: an error, not a wrapped-around shape.
  REQUIRE_THROWS_AS(nn::CharLM::state_shapes(5, config_with(int64_t{1} << 62, 1, 1)), Error);
}
