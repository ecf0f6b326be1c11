#include "tapegrad/cli/bench_int8.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cli/bench_charlm.h"
#include "tapegrad/cpu/fast/quantize.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cli {
namespace {

// The sizes of bench's textcls workloads (cli/bench.cpp): one MHA, then the head.
struct TextShape {
  int64_t vocab, dim, heads, batch, seq, classes;
};

TextShape text_shape(const std::string& workload) {
  if (workload == "textcls-small") return {1000, 64, 4, 32, 32, 4};
  if (workload == "textcls-mid") return {8000, 256, 8, 16, 128, 4};
  fail("--int8 times the textcls workloads (textcls-small, textcls-mid) and charlm, not '",
       workload, "'");
}

// One workload of the bench: how to build its model (the same weights every call, in eval()),
// the timed forward of that model on the bench's batch, the loss of its output, and the
// calibration forwards of the static model.
struct Int8Case {
  std::string description;  // the header's workload line
  std::function<std::shared_ptr<nn::Module>()> make_model;
  std::function<Tensor(const nn::Module&)> forward;
  std::function<double(const Tensor&)> loss;
  std::function<void(const nn::Module&)> calibrate;
};

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

// Random ids in [0, high), `count` of them, as an i64 tensor of `shape`.
Tensor random_ids(int64_t count, int64_t high, const Shape& shape, std::mt19937_64& gen) {
  std::uniform_int_distribution<int64_t> id(0, high - 1);
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t& v : ids) v = id(gen);
  return from_indices(ids, shape);
}

// textcls-small / -mid: bench's TextClassifier (one MHA, then the head), padded random batches,
// cross_entropy against random labels.
Int8Case text_case(const std::string& workload, int calibration_batches) {
  const TextShape s = text_shape(workload);
  std::mt19937_64 gen(1234);
  const Batch batch = random_batch(s, gen);
  const Tensor labels = random_ids(s.batch, s.classes, {s.batch}, gen);
  std::vector<Batch> calibration;
  for (int i = 0; i < calibration_batches; ++i) calibration.push_back(random_batch(s, gen));
  Int8Case c;
  c.description =
      workload + ", batch " + std::to_string(s.batch) + " x seq " + std::to_string(s.seq);
  c.make_model = [s] {
    manual_seed(0);
    nn::ModelConfig config;
    config.dim = s.dim;
    config.heads = s.heads;
    config.layers = 0;
    config.max_len = std::max<int64_t>(s.seq, 512);
    return std::make_shared<nn::TextClassifier>(s.vocab, s.classes, config);
  };
  const auto model_of = [](const nn::Module& m) -> const nn::TextClassifier& {
    return static_cast<const nn::TextClassifier&>(m);
  };
  c.forward = [=](const nn::Module& m) { return model_of(m).forward(batch.tokens, batch.lengths); };
  c.loss = [labels](const Tensor& logits) { return cross_entropy(logits, labels).item(); };
  c.calibrate = [=](const nn::Module& m) {
    for (const Batch& b : calibration) model_of(m).forward(b.tokens, b.lengths);
  };
  return c;
}

// charlm: bench's character LM (cli/bench_charlm.h: 2 layers, dim 128, 4 heads, vocab 100) at
// context 128, a batch of 32 random sequences, cross_entropy at every position.
Int8Case char_lm_case(int calibration_batches) {
  const int64_t vocab = kBenchCharLMVocab, batch = 32, context = 128;
  std::mt19937_64 gen(1234);
  const Tensor tokens = random_ids(batch * context, vocab, {batch, context}, gen);
  const Tensor targets = random_ids(batch * context, vocab, {batch, context}, gen);
  std::vector<Tensor> calibration;
  for (int i = 0; i < calibration_batches; ++i) {
    calibration.push_back(random_ids(batch * context, vocab, {batch, context}, gen));
  }
  Int8Case c;
  c.description = "charlm, batch 32 x context 128 (2 layers, dim 128, 4 heads, vocab 100)";
  c.make_model = [=] {
    manual_seed(0);
    return std::make_shared<nn::CharLM>(vocab, bench_charlm_config(context));
  };
  const auto model_of = [](const nn::Module& m) -> const nn::CharLM& {
    return static_cast<const nn::CharLM&>(m);
  };
  c.forward = [=](const nn::Module& m) { return model_of(m).forward(tokens); };
  c.loss = [targets](const Tensor& logits) { return cross_entropy(logits, targets).item(); };
  c.calibrate = [=](const nn::Module& m) {
    for (const Tensor& t : calibration) model_of(m).forward(t);
  };
  return c;
}

struct Timing {
  double median_ms = 0, min_ms = 0;
  double loss = 0;  // of the model's output on the bench's batch
};

// One model of the table: its name, the model, and its timing.
struct Int8Row {
  const char* name;
  std::shared_ptr<nn::Module> model;
  Timing timing;
};

// The median and the least of `ms`.
Timing summarize_ms(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  const size_t n = ms.size();
  return {n % 2 ? ms[n / 2] : (ms[n / 2 - 1] + ms[n / 2]) / 2, ms.front()};
}

// Times the rows' forwards interleaved (f32, dynamic, static, f32, ...: a slow spell of the
// machine hits every model alike) after o.warmup forwards of each; then each model's loss.
void time_rows(const Int8Case& c, std::vector<Int8Row>& rows, const Int8BenchOptions& o) {
  NoGrad no_grad;
  for (int i = 0; i < o.warmup; ++i) {
    for (const Int8Row& row : rows) c.forward(*row.model);
  }
  std::vector<std::vector<double>> ms(rows.size());
  for (int i = 0; i < o.steps; ++i) {
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto start = std::chrono::steady_clock::now();
      c.forward(*rows[r].model);
      const auto took = std::chrono::steady_clock::now() - start;
      ms[r].push_back(std::chrono::duration<double, std::milli>(took).count());
    }
  }
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].timing = summarize_ms(ms[r]);
    rows[r].timing.loss = c.loss(c.forward(*rows[r].model));
  }
}

// The table (or JSON lines): ms, speed-up over f32, loss and its change, bytes.
void print_rows(const Int8Case& c, const std::vector<Int8Row>& rows, const Int8BenchOptions& o) {
  const Timing& base = rows[0].timing;
  const char* path = cpu::int8::path_description(cpu::int8::selected_path());
  if (!o.json) {
    std::printf("workload     %s, inference only (forward under NoGrad)\n", c.description.c_str());
    std::printf("threads      %d (%s); %d timed forwards each, interleaved, after %d warm-up; "
                "static calibrated on %d random batches (minmax)\nint8 kernels %s\n",
                num_threads(), describe_num_threads().c_str(), o.steps, o.warmup,
                o.calibration_batches, path);
    std::printf("%-14s %10s %10s %9s %10s %8s %12s %14s\n", "model", "ms/batch", "min ms",
                "speedup", "loss", "vs f32", "model bytes", "Linear bytes");
  }
  for (const Int8Row& row : rows) {
    nn::Module& model = *row.model;
    const int64_t linear_bytes = nn::linear_weight_bytes(model);
    const int64_t model_bytes = nn::state_bytes(model);
    const double speedup = base.median_ms / row.timing.median_ms;
    const double loss_change = (row.timing.loss - base.loss) / base.loss;
    if (o.json) {
      std::cout << nlohmann::json{{"workload", o.workload}, {"model", row.name},
                                  {"ms_per_batch", row.timing.median_ms},
                                  {"min_ms", row.timing.min_ms}, {"speedup", speedup},
                                  {"loss", row.timing.loss}, {"loss_change", loss_change},
                                  {"int8_kernels", path}, {"model_bytes", model_bytes},
                                  {"linear_weight_bytes", linear_bytes},
                                  {"threads", num_threads()}}.dump()
                << "\n";
    } else {
      std::printf("%-14s %10.3f %10.3f %8.2fx %10.5f %+7.3f%% %12lld %14lld\n", row.name,
                  row.timing.median_ms, row.timing.min_ms, speedup, row.timing.loss,
                  100 * loss_change, static_cast<long long>(model_bytes),
                  static_cast<long long>(linear_bytes));
    }
  }
}

}  // namespace

int bench_int8(const Int8BenchOptions& o) {
  TG_CHECK(o.steps >= 1 && o.warmup >= 0, "--steps must be >= 1 and --warmup >= 0");
  const Int8Case c = o.workload == "charlm" ? char_lm_case(o.calibration_batches)
                                            : text_case(o.workload, o.calibration_batches);
  std::vector<Int8Row> rows = {{"f32", c.make_model(), {}}, {"int8 dynamic", c.make_model(), {}},
                               {"int8 static", c.make_model(), {}}};
  for (Int8Row& row : rows) {
    row.model->eval();
    if (&row != &rows[0]) row.model->load_state_dict(rows[0].model->state_dict());
  }
  nn::quantize_dynamic(*rows[1].model);
  nn::Module& fixed = *rows[2].model;
  nn::quantize_static(fixed, [&] { c.calibrate(fixed); });
  time_rows(c, rows, o);
  print_rows(c, rows, o);
  return 0;
}

}  // namespace tg::cli
