#pragma once
// The benchmarks' character LM, one definition for the charlm training workload (cli/bench.cpp),
// its int8 forwards (cli/bench_int8.cpp) and generation (cli/bench_generate.cpp): the recipes'
// model (docs/cli.md), nn::CharLM with 2 pre-norm layers, dim 128, 4 heads, the MLP of 4 x dim,
// dropout 0, sinusoidal positions, over 100 symbols. bench/torch_ref.py's CharLM is the same model.
#include <cstdint>

#include "tapegrad/nn/models.h"

namespace tg::cli {

constexpr int64_t kBenchCharLMVocab = 100;

// Its config with positions up to `max_len` (the training context, or generation's window).
inline nn::ModelConfig bench_charlm_config(int64_t max_len) {
  nn::ModelConfig config;
  config.dim = 128;
  config.heads = 4;
  config.layers = 2;
  config.max_len = max_len;
  return config;
}

}  // namespace tg::cli
