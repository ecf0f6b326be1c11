// A model saved as safetensors and loaded into a freshly initialised one gives bit-identical
// outputs, for each model.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/temp_files.h"

using namespace tg;

namespace {

nn::ModelConfig small_config(int64_t layers) {
  return {.dim = 16, .heads = 4, .layers = layers, .dropout = 0.1, .max_len = 32};
}

template <typename Model, typename Forward>
void require_roundtrip_identical(const std::function<std::shared_ptr<Model>()>& make, Forward forward) {
  testing::TempDir dir;
  manual_seed(1);
  auto saved = make();
  saved->eval();
  save_safetensors(dir.file("model.safetensors"), saved->state_dict());
  manual_seed(2);  // different initial weights
  auto loaded = make();
  loaded->eval();
  REQUIRE(forward(*loaded) != forward(*saved));
  loaded->load_state_dict(load_safetensors(dir.file("model.safetensors")).tensors);
  REQUIRE(forward(*loaded) == forward(*saved));  // exact equality of every value
}

}  // namespace

TEST_CASE("save and load give bit-identical outputs: TextClassifier", "[serialization]") {
  for (int64_t layers : {0, 2}) {
    require_roundtrip_identical<nn::TextClassifier>(
        [layers] { return std::make_shared<nn::TextClassifier>(30, 3, small_config(layers)); },
        [](const nn::TextClassifier& m) {
          return m.forward(from_indices({1, 5, 9, 2, 7, 7, 0, 0}, {2, 4}), {4, 2}).to_host_f64();
        });
  }
}

TEST_CASE("save and load give bit-identical outputs: TimeSeriesModel", "[serialization]") {
  for (int64_t layers : {1, 2}) {
    require_roundtrip_identical<nn::TimeSeriesModel>(
        [layers] { return std::make_shared<nn::TimeSeriesModel>(3, 2, small_config(layers)); },
        [](const nn::TimeSeriesModel& m) {
          manual_seed(9);
          return m.forward(randn({2, 6, 3})).to_host_f64();
        });
  }
}

TEST_CASE("save and load give bit-identical outputs: CharLM", "[serialization]") {
  require_roundtrip_identical<nn::CharLM>(
      [] { return std::make_shared<nn::CharLM>(12, small_config(2)); },
      [](const nn::CharLM& m) { return m.forward(from_indices({3, 4, 5, 6, 7, 8}, {1, 6})).to_host_f64(); });
}
