// Generation on the CUDA device (nn/generation.h): the cached path against the uncached one on
// the device, and both against the CPU's, step by step, for the kinds whose decoding takes its
// own route (a layout row as a mask, ALiBi and T5 rows as the kernel's relative bias, Shaw's keys
// on the explicit path, RoPE at an offset, Performer's features), batch 1 and 3, prompts shorter
// and longer than the window.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "cuda_test_support.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/generation.h"

namespace tg::testing {
namespace {

constexpr int64_t kGenVocab = 9;

// A 2-layer char LM of seeded random weights, eval mode, on `device`.
std::unique_ptr<nn::CharLM> generation_lm(const nn::AttentionSpec& spec, Device device) {
  manual_seed(8);
  nn::ModelConfig config;
  config.dim = 8;
  config.heads = 2;
  config.layers = 2;
  config.max_len = 16;
  config.attention = spec;
  auto model = std::make_unique<nn::CharLM>(kGenVocab, config);
  model->to(device);
  model->eval();
  return model;
}

// The next-token logits of `steps` feeds (the prompt, then fixed tokens) through a Decoder.
std::vector<std::vector<double>> decoded_logits(const nn::CharLM& model, int64_t batch,
                                                int64_t prompt_length, bool use_cache) {
  NoGrad no_grad;
  nn::Decoder decoder(model, batch, 6, use_cache);
  REQUIRE(decoder.cached() == use_cache);
  std::vector<int64_t> fed;
  for (int64_t i = 0; i < batch * prompt_length; ++i) fed.push_back(2 + (i * 5) % (kGenVocab - 2));
  std::vector<std::vector<double>> logits;
  int64_t n = prompt_length;
  for (int64_t step = 0; step < 10; ++step) {  // past two restarts of the window of 6
    logits.push_back(decoder.feed(fed, n).to_host_f64());
    fed.assign(batch, 2 + step % (kGenVocab - 2));
    n = 1;
  }
  return logits;
}

void require_close(const std::vector<std::vector<double>>& a,
                   const std::vector<std::vector<double>>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t step = 0; step < a.size(); ++step) {
    REQUIRE(a[step].size() == b[step].size());
    for (size_t i = 0; i < a[step].size(); ++i) {
      INFO("step " << step << ", logit " << i);
      REQUIRE(std::abs(a[step][i] - b[step][i]) < 3e-5);
    }
  }
}

}  // namespace

TEST_CASE("cuda generation: cached equals uncached, and the CPU's, for every decoding route", "[cuda][generation]") {
  using nn::AttentionKind;
  using nn::PositionKind;
  const std::vector<std::pair<std::string, nn::AttentionSpec>> cases = {
      {"full/sinusoidal", {}},
      {"local/alibi", {.kind = AttentionKind::local, .window = 3, .position = PositionKind::alibi}},
      {"band/rope", {.kind = AttentionKind::band, .window = 2, .dilation = 2, .position = PositionKind::rope}},
      {"full/t5", {.position = PositionKind::t5, .relative = {.buckets = 4, .max_distance = 8}}},
      {"full/shaw", {.position = PositionKind::shaw, .relative = {.clip = 2}}},
      {"performer", {.kind = AttentionKind::performer, .features = 8, .seed = 3}}};
  for (const auto& [name, spec] : cases) {
    const auto on_cuda = generation_lm(spec, kCuda);
    const auto on_cpu = generation_lm(spec, kCPU);
    for (int64_t batch : {1, 3}) {
      for (int64_t prompt_length : {2, 8}) {
        INFO(name << ", batch " << batch << ", prompt " << prompt_length);
        const auto cached = decoded_logits(*on_cuda, batch, prompt_length, true);
        require_close(cached, decoded_logits(*on_cuda, batch, prompt_length, false));
        require_close(cached, decoded_logits(*on_cpu, batch, prompt_length, true));
      }
    }
  }
}

}  // namespace tg::testing
