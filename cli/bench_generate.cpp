#include "tapegrad/cli/bench_generate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/cli/bench_charlm.h"
#include "tapegrad/nn/generation.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cli {
namespace {

constexpr int64_t kVocab = kBenchCharLMVocab, kPromptTokens = 64, kFewestNewTokens = 256;

// The charlm workload's model (cli/bench_charlm.h) with max_len `context`, in eval mode.
std::unique_ptr<nn::CharLM> generation_model(int64_t context) {
  manual_seed(0);
  auto model = std::make_unique<nn::CharLM>(kVocab, bench_charlm_config(context));
  model->eval();
  return model;
}

// A generation's time and the allocator's peak during it (above what was live before).
struct Run {
  double ms = 0;
  int64_t peak_bytes = 0;
};

Run timed_generation(const nn::CharLM& model, const std::vector<int64_t>& prompt,
                     const nn::GenerationOptions& options) {
  const Device device = default_device();
  reset_allocator_stats(device);
  const int64_t before = allocator_stats(device).current_bytes;
  const auto start = std::chrono::steady_clock::now();
  nn::generate(model, {prompt}, options);
  kernels(device).synchronize();
  const auto end = std::chrono::steady_clock::now();
  return {std::chrono::duration<double, std::milli>(end - start).count(),
          allocator_stats(device).peak_bytes - before};
}

// The median time of `steps` runs after `warmup` (the peak of the last).
Run median_run(const nn::CharLM& model, const std::vector<int64_t>& prompt,
               const nn::GenerationOptions& options, int steps, int warmup) {
  for (int i = 0; i < warmup; ++i) timed_generation(model, prompt, options);
  std::vector<double> ms;
  Run last;
  for (int i = 0; i < std::max(steps, 1); ++i) {
    last = timed_generation(model, prompt, options);
    ms.push_back(last.ms);
  }
  std::sort(ms.begin(), ms.end());
  last.ms = ms[ms.size() / 2];
  return last;
}

struct Row {
  int64_t context = 0, new_tokens = 0;
  Run cached;
  std::optional<Run> uncached;
};

Row measure(int64_t context, const GenerateBenchOptions& options) {
  const auto model = generation_model(context);
  std::mt19937_64 gen(7);
  std::vector<int64_t> prompt(kPromptTokens);
  for (int64_t& id : prompt) id = static_cast<int64_t>(gen() % kVocab);
  Row row;
  row.context = context;
  row.new_tokens = std::max(kFewestNewTokens, context - kPromptTokens);
  nn::GenerationOptions generation;
  generation.tokens = row.new_tokens;
  generation.window = context;
  generation.sampling.temperature = 0;  // greedy: the loop's own cost, no sampling
  row.cached = median_run(*model, prompt, generation, options.steps, options.warmup);
  if (context <= options.max_uncached) {
    generation.use_cache = false;
    row.uncached = median_run(*model, prompt, generation, 1, 0);  // long: timed once
  }
  return row;
}

double tokens_per_s(const Row& row, const Run& run) { return row.new_tokens / (run.ms / 1e3); }

void print_row(const Row& row, bool json) {
  const double cached = tokens_per_s(row, row.cached);
  std::optional<double> uncached;
  if (row.uncached) uncached = tokens_per_s(row, *row.uncached);
  if (json) {
    nlohmann::json line = {{"workload", "generate"}, {"context", row.context},
                           {"prompt_tokens", kPromptTokens}, {"new_tokens", row.new_tokens},
                           {"tokens_per_s", cached}, {"ms", row.cached.ms},
                           {"peak_bytes", row.cached.peak_bytes},
                           {"threads", num_threads()}, {"device", device_name(default_device())}};
    line["uncached_tokens_per_s"] = uncached ? nlohmann::json(uncached.value()) : nlohmann::json();
    line["uncached_peak_bytes"] =
        row.uncached ? nlohmann::json(row.uncached->peak_bytes) : nlohmann::json();
    std::cout << line.dump() << std::endl;
    return;
  }
  std::printf("%8lld %7lld %12.1f %14lld", static_cast<long long>(row.context),
              static_cast<long long>(row.new_tokens), cached,
              static_cast<long long>(row.cached.peak_bytes));
  if (uncached) {
    std::printf(" %12.1f %14lld %8.1fx\n", *uncached, static_cast<long long>(row.uncached->peak_bytes),
                cached / *uncached);
  } else {
    std::printf(" %12s %14s %9s\n", "-", "-", "-");
  }
  std::fflush(stdout);
}

}  // namespace

int bench_generate(const GenerateBenchOptions& options) {
  if (!options.json) {
    std::printf("generate: greedy decoding, batch 1, CharLM vocab %lld, 2 layers, dim 128, 4 "
                "heads, sinusoidal; %lld-token prompt; on %s, %d threads\n",
                static_cast<long long>(kVocab), static_cast<long long>(kPromptTokens),
                device_name(default_device()).c_str(), num_threads());
    std::printf("%8s %7s %12s %14s %12s %14s %9s\n", "context", "tokens", "cached tok/s",
                "peak bytes", "uncached", "peak bytes", "speed-up");
  }
  for (int64_t context = 128; context <= options.max_context; context *= 4) {
    print_row(measure(context, options), options.json);
  }
  return 0;
}

}  // namespace tg::cli
