// Whole models on the CUDA device against the CPU: 20 AdamW steps of each of the three models from
// the same initial weights with dropout on (Philox gives both devices the same masks), and a
// checkpoint's round trip CPU -> CUDA -> CPU.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "cuda_test_support.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"
#include "tests/support/temp_files.h"

namespace tg::testing {
namespace {

// The losses of `steps` AdamW steps (with gradient clipping) of the model `make` builds on
// `device`. Built under a fixed seed, so that every call starts from the same weights, and with
// the same dropout stream afterwards.
template <typename Model>
std::vector<double> train_losses(Device device, const std::function<std::shared_ptr<Model>()>& make,
                                 const std::function<Tensor(const Model&, Device)>& loss_of,
                                 int steps = 20) {
  manual_seed(42);
  std::shared_ptr<Model> model = make();  // on the CPU: the same initial weights every time
  model->to(device);
  AdamW optimizer(model->parameters(), 3e-3);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const Tensor loss = loss_of(*model, device);
    losses.push_back(loss.item());
    optimizer.zero_grad();
    loss.backward();
    clip_grad_norm(model->parameters(), 1.0);
    optimizer.step();
  }
  return losses;
}

// f32 sums in another order drift apart slowly over steps: 20 steps stay within 1e-3 relative.
void require_same_losses(const std::vector<double>& gpu, const std::vector<double>& cpu) {
  REQUIRE(gpu.size() == cpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    INFO("step " << i << ": cuda " << gpu[i] << ", cpu " << cpu[i]);
    REQUIRE(std::isfinite(gpu[i]));
    REQUIRE(std::abs(gpu[i] - cpu[i]) <= 1e-3 * std::abs(cpu[i]) + 1e-5);
  }
  REQUIRE(cpu.back() < cpu.front());  // it did learn something
}

nn::ModelConfig small_config(int64_t layers) {
  nn::ModelConfig config;
  config.dim = 16;
  config.heads = 2;
  config.layers = layers;
  config.dropout = 0.1;
  config.max_len = 32;
  return config;
}

std::vector<int64_t> token_ids(int64_t count, int64_t vocab, int64_t salt) {
  std::vector<int64_t> ids(count);
  for (int64_t i = 0; i < count; ++i) ids[i] = (i * 7 + salt * 3 + (i * i) % 5) % vocab;
  return ids;
}

}  // namespace

TEST_CASE("cuda training: TextClassifier matches the CPU for 20 steps", "[cuda][training]") {
  using Model = nn::TextClassifier;
  auto make = [] { return std::make_shared<Model>(20, 3, small_config(1)); };
  auto loss_of = [](const Model& model, Device device) {
    const Tensor tokens = from_indices(token_ids(4 * 10, 20, 1), {4, 10}, device);
    const Tensor labels = from_indices({0, 1, 2, 1}, {4}, device);
    return cross_entropy(model.forward(tokens, {10, 7, 4, 9}), labels);
  };
  require_same_losses(train_losses<Model>(kCuda, make, loss_of),
                      train_losses<Model>(kCPU, make, loss_of));
}

TEST_CASE("cuda training: TimeSeriesModel matches the CPU for 20 steps", "[cuda][training]") {
  using Model = nn::TimeSeriesModel;
  auto make = [] { return std::make_shared<Model>(3, 2, small_config(1)); };
  auto loss_of = [](const Model& model, Device device) {
    std::vector<double> x(4 * 8 * 3), y(4 * 2);
    for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.3 * static_cast<double>(i));
    for (size_t i = 0; i < y.size(); ++i) y[i] = std::cos(0.7 * static_cast<double>(i));
    return mse_loss(model.forward(from_values(x, {4, 8, 3}, DType::f32, device)),
                    from_values(y, {4, 2}, DType::f32, device));
  };
  require_same_losses(train_losses<Model>(kCuda, make, loss_of),
                      train_losses<Model>(kCPU, make, loss_of));
}

TEST_CASE("cuda training: CharLM matches the CPU for 20 steps", "[cuda][training]") {
  using Model = nn::CharLM;
  auto make = [] { return std::make_shared<Model>(12, small_config(2)); };
  auto loss_of = [](const Model& model, Device device) {
    const Tensor inputs = from_indices(token_ids(2 * 12, 12, 2), {2, 12}, device);
    const Tensor targets = from_indices(token_ids(2 * 12, 12, 3), {2, 12}, device);
    return cross_entropy(model.forward(inputs), targets);
  };
  require_same_losses(train_losses<Model>(kCuda, make, loss_of),
                      train_losses<Model>(kCPU, make, loss_of));
}

TEST_CASE("cuda training: a checkpoint goes CPU -> CUDA -> CPU unchanged", "[cuda]") {
  TempDir dir;
  manual_seed(3);
  nn::CharLM original(12, small_config(1));
  save_safetensors(dir.file("cpu.safetensors"), original.state_dict(), {});

  manual_seed(99);  // other weights, replaced by the loaded ones
  nn::CharLM on_gpu(12, small_config(1));
  on_gpu.to(kCuda);
  on_gpu.load_state_dict(load_safetensors(dir.file("cpu.safetensors")).tensors);
  for (const auto& [name, tensor] : on_gpu.state_dict()) REQUIRE(tensor.device() == kCuda);
  save_safetensors(dir.file("gpu.safetensors"), on_gpu.state_dict(), {});  // saved from the GPU

  REQUIRE(read_bytes(dir.file("gpu.safetensors")) == read_bytes(dir.file("cpu.safetensors")));
  manual_seed(5);
  nn::CharLM back(12, small_config(1));
  back.load_state_dict(load_safetensors(dir.file("gpu.safetensors")).tensors);
  back.eval();
  original.eval();
  const Tensor tokens = from_indices(token_ids(10, 12, 4), {1, 10});
  REQUIRE(back.forward(tokens).to_host_f64() == original.forward(tokens).to_host_f64());
}

}  // namespace tg::testing
