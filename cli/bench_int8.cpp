#include "tapegrad/cli/bench_int8.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/threads.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/quantization.h"

namespace tg::cli {
namespace {

// The sizes of bench's textcls workloads (cli/bench.cpp): one MHA, then the head.
struct TextShape {
  int64_t vocab, dim, heads, batch, seq, classes;
};

TextShape text_shape(const std::string& workload) {
  if (workload == "textcls-small") return {1000, 64, 4, 32, 32, 4};
  if (workload == "textcls-mid") return {8000, 256, 8, 16, 128, 4};
  fail("--int8 times the textcls workloads (textcls-small, textcls-mid), not '", workload, "'");
}

struct Batch {
  Tensor tokens;
  std::vector<int64_t> lengths;
};

// Random tokens; sequence b has length seq - (7 b mod seq/2), the padding bench's training uses.
Batch random_batch(const TextShape& s, std::mt19937_64& gen) {
  std::uniform_int_distribution<int64_t> token(0, s.vocab - 1);
  std::vector<int64_t> ids(static_cast<size_t>(s.batch * s.seq));
  for (int64_t& id : ids) id = token(gen);
  Batch batch{from_indices(ids, {s.batch, s.seq}), std::vector<int64_t>(static_cast<size_t>(s.batch))};
  for (int64_t b = 0; b < s.batch; ++b) batch.lengths[b] = s.seq - (7 * b) % std::max<int64_t>(s.seq / 2, 1);
  return batch;
}

std::unique_ptr<nn::TextClassifier> make_model(const TextShape& s) {
  nn::ModelConfig config;
  config.dim = s.dim;
  config.heads = s.heads;
  config.layers = 0;
  config.max_len = std::max<int64_t>(s.seq, 512);
  auto model = std::make_unique<nn::TextClassifier>(s.vocab, s.classes, config);
  model->eval();
  return model;
}

struct Timing {
  double median_ms = 0, min_ms = 0;
};

Timing time_forward(const nn::TextClassifier& model, const Batch& batch, const Int8BenchOptions& o) {
  NoGrad no_grad;
  for (int i = 0; i < o.warmup; ++i) model.forward(batch.tokens, batch.lengths);
  std::vector<double> ms;
  for (int i = 0; i < o.steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    model.forward(batch.tokens, batch.lengths);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2, ms.front()};
}

}  // namespace

int bench_int8(const Int8BenchOptions& o) {
  TG_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps must be >= 1 and --warmup >= 0");
  const TextShape shape = text_shape(o.workload);
  manual_seed(0);
  const auto f32 = make_model(shape);
  const auto dynamic = make_model(shape), fixed = make_model(shape);
  dynamic->load_state_dict(f32->state_dict());
  fixed->load_state_dict(f32->state_dict());
  std::mt19937_64 gen(1234);
  const Batch batch = random_batch(shape, gen);
  nn::quantize_dynamic(*dynamic);
  std::vector<Batch> calibration;
  for (int i = 0; i < o.calibration_batches; ++i) calibration.push_back(random_batch(shape, gen));
  nn::quantize_static(*fixed, [&] {
    for (const Batch& b : calibration) fixed->forward(b.tokens, b.lengths);
  });

  struct Row {
    const char* name;
    nn::TextClassifier* model;
    Timing timing;
  };
  std::vector<Row> rows = {{"f32", f32.get(), {}}, {"int8 dynamic", dynamic.get(), {}},
                           {"int8 static", fixed.get(), {}}};
  for (Row& row : rows) row.timing = time_forward(*row.model, batch, o);
  const double base = rows[0].timing.median_ms;
  if (!o.json) {
    std::printf("workload     %s, inference only (forward under NoGrad), batch %lld x seq %lld\n",
                o.workload.c_str(), static_cast<long long>(shape.batch), static_cast<long long>(shape.seq));
    std::printf("threads      %d (%s); %d timed forwards after %d warm-up; static calibrated on "
                "%d random batches (minmax)\n", num_threads(), describe_num_threads().c_str(),
                o.steps, o.warmup, o.calibration_batches);
    std::printf("%-14s %12s %12s %9s %14s %18s\n", "model", "ms/batch", "min ms", "speedup", "model bytes",
                "Linear weight bytes");
  }
  for (const Row& row : rows) {
    const int64_t linear_bytes = nn::linear_weight_bytes(*row.model), model_bytes = nn::state_bytes(*row.model);
    const double speedup = base / row.timing.median_ms;
    if (o.json) {
      std::cout << nlohmann::json{{"workload", o.workload}, {"model", row.name},
                                  {"ms_per_batch", row.timing.median_ms}, {"min_ms", row.timing.min_ms},
                                  {"speedup", speedup}, {"model_bytes", model_bytes},
                                  {"linear_weight_bytes", linear_bytes}, {"threads", num_threads()}}.dump()
                << "\n";
    } else {
      std::printf("%-14s %12.3f %12.3f %8.2fx %14lld %18lld\n", row.name, row.timing.median_ms,
                  row.timing.min_ms, speedup, static_cast<long long>(model_bytes),
                  static_cast<long long>(linear_bytes));
    }
  }
  return 0;
}

}  // namespace tg::cli
