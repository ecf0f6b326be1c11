// --checkpoint-activations on the tutorial-form models, whose only attention is a lone
// MultiHeadAttention (TextClassifier layers = 0, TimeSeriesModel layers = 1): checkpointing it
// gives the same loss and gradients (dropout masks replayed) and keeps less memory between
// forward and backward (q, k, v and the attention output are dropped). The peak does not fall:
// with one block there is nothing else to free while it is recomputed, so backward holds the
// recomputed block on top of its kept output (two [B, S, dim] tensors more, exactly).
#include <catch2/catch.hpp>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

nn::ModelConfig tutorial_config(int64_t layers) {
  return {.dim = 64, .heads = 4, .layers = layers, .dropout = 0.1, .max_len = 64};
}

struct Run {
  double loss = 0;
  std::vector<std::vector<double>> grads;
  int64_t held_bytes = 0;  // allocated after forward, before backward: what backward will read
  int64_t peak_bytes = 0;  // the peak over forward + backward
};

// Forward + backward of loss() on `model` from the same RNG state, with the allocator's peak
// above what existed before.
template <typename Loss>
Run run(nn::Module& model, Loss loss) {
  model.zero_grad();
  manual_seed(7);  // the dropout masks
  reset_allocator_stats();
  const int64_t before = allocator_stats().current_bytes;
  Run result;
  {
    Tensor value = loss();
    result.held_bytes = allocator_stats().current_bytes - before;
    value.backward();
    result.loss = value.item();
  }
  result.peak_bytes = allocator_stats().peak_bytes - before;
  for (const Tensor& p : model.parameters()) result.grads.push_back(p.grad().to_host_f64());
  return result;
}

// The same loss and gradients; less held between the passes; a peak higher by exactly two
// [B, S, dim] f32 tensors (`activation_bytes` each).
void require_same_loss_less_memory(const Run& plain, const Run& checkpointed, int64_t activation_bytes) {
  INFO("held bytes: plain " << plain.held_bytes << ", checkpointed " << checkpointed.held_bytes);
  INFO("peak bytes: plain " << plain.peak_bytes << ", checkpointed " << checkpointed.peak_bytes);
  REQUIRE(checkpointed.loss == plain.loss);  // the same forward, bit for bit
  REQUIRE(checkpointed.grads.size() == plain.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    for (size_t j = 0; j < plain.grads[i].size(); ++j) {
      REQUIRE(checkpointed.grads[i][j] == Approx(plain.grads[i][j]).margin(1e-6));
    }
  }
  REQUIRE(checkpointed.held_bytes < plain.held_bytes);
  REQUIRE(checkpointed.peak_bytes == plain.peak_bytes + 2 * activation_bytes);
}

}  // namespace

TEST_CASE("checkpoint_layers checkpoints TimeSeriesModel's lone attention (layers = 1)", "[models][checkpoint]") {
  manual_seed(1);
  nn::TimeSeriesModel model(4, 2, tutorial_config(1));
  REQUIRE(model.mha != nullptr);
  model.train();
  const Tensor x = randn({16, 64, 4});
  const Tensor y = randn({16, 2});
  const auto loss = [&] { return mse_loss(model.forward(x), y); };
  const Run plain = run(model, loss);
  model.checkpoint_layers = true;
  const Run checkpointed = run(model, loss);
  require_same_loss_less_memory(plain, checkpointed, 16 * 64 * 64 * 4);
  REQUIRE(run(model, loss).peak_bytes == checkpointed.peak_bytes);  // the counters are deterministic
}

TEST_CASE("checkpoint_layers checkpoints TextClassifier's lone attention (layers = 0)", "[models][checkpoint]") {
  manual_seed(1);
  nn::TextClassifier model(50, 3, tutorial_config(0));
  REQUIRE(model.mha != nullptr);
  model.train();
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < 16 * 64; ++i) ids.push_back(2 + (i * 7) % 48);
  const Tensor tokens = from_indices(ids, {16, 64});
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < 16; ++b) lengths.push_back(64 - 3 * b);  // padded
  const Tensor labels = from_indices({0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0}, {16});
  const auto loss = [&] { return cross_entropy(model.forward(tokens, lengths), labels); };
  const Run plain = run(model, loss);
  model.checkpoint_layers = true;
  require_same_loss_less_memory(plain, run(model, loss), 16 * 64 * 64 * 4);
}
