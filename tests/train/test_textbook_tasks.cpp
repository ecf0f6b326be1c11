// Every task `tapegrad train --task` accepts, trained a few steps from one seed with and without
// tg::Textbook (autograd/textbook.h): the same model and data, the step `tapegrad train` runs
// (train::train_step with AdamW, clipping, dropout on). The first step's gradients and every
// step's loss agree to rounding: the textbook run differs by the order of its sums (the reference
// GEMM in double, the explicit attention's softmax against the fused kernel's online one), not
// by what it computes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/textbook.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/train/tasks.h"
#include "tapegrad/train/train_step.h"
#include "tests/support/temp_files.h"

using namespace tg;
using tg::testing::TempDir;
using tg::testing::write_bytes;

namespace {

constexpr int kTextbookSteps = 4;
constexpr int64_t kTextbookBatch = 6;

// A small data file for `task`, in its format.
std::string write_task_data(const TempDir& dir, const std::string& task) {
  std::string text;
  if (task == "charlm") {
    for (int line = 0; line < 12; ++line) text += "the quick brown fox jumps over the lazy dog " + std::to_string(line) + "\n";
  } else if (task == "textcls") {
    const char* labels[] = {"ham", "spam", "eggs"};
    for (int i = 0; i < 30; ++i) {
      text += std::string(labels[i % 3]) + "\t" + std::string(3 + i % 7, "abcxyz"[i % 6]) + " text " +
              std::to_string(i) + "\n";
    }
  } else {
    text = "YEAR,ACTIVITY,OTHER\n";
    for (int i = 0; i < 60; ++i) {
      text += std::to_string(1900 + i) + "," + std::to_string(50 + 40 * std::sin(0.4 * i)) + "," +
              std::to_string(i % 7) + "\n";
    }
  }
  const std::string path = dir.file(task + ".data");
  write_bytes(path, text);
  return path;
}

train::TrainConfig textbook_task_config(const std::string& task) {
  train::TrainConfig config;
  config.task = task;
  config.dim = 16;
  config.heads = 2;
  config.layers = task == "timeseries" ? 1 : 2;
  config.max_len = 64;
  config.dropout = 0.1;  // the same Philox numbers on both paths
  config.batch = kTextbookBatch;
  config.seed = 7;
  config.context = 12;                                  // charlm
  config.window = 10;                                   // timeseries
  if (task == "timeseries") config.target = "ACTIVITY";
  return config;
}

struct TextbookTaskRun {
  std::vector<double> losses;                             // one a step
  std::map<std::string, std::vector<double>> gradients;  // the first step's, by parameter
};

TextbookTaskRun train_task_steps(const std::string& task, const std::string& data) {
  const train::TrainConfig config = textbook_task_config(task);
  manual_seed(config.seed);
  const std::unique_ptr<train::Task> run_task = train::make_task(config, data);
  nn::Module& model = run_task->model();
  model.train();
  AdamW optimizer(model.parameters(), 3e-3);
  GradScaler scaler(GradScalerOptions{.enabled = false});
  REQUIRE(run_task->examples(true) >= kTextbookSteps * kTextbookBatch);
  TextbookTaskRun run;
  for (int step = 0; step < kTextbookSteps; ++step) {
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < kTextbookBatch; ++i) ids.push_back(step * kTextbookBatch + i);
    const train::TrainStepOptions options{
        .clip = 1.0, .inspect_gradients = [&] {
          if (step > 0) return;
          for (const auto& [name, p] : model.named_parameters()) run.gradients[name] = p.grad().to_host_f64();
        }};
    const train::TrainStepResult result =
        train::train_step([&] { return run_task->loss(ids, true); }, optimizer, scaler, options);
    run.losses.push_back(result.loss);
  }
  return run;
}

}  // namespace

TEST_CASE("Textbook: every task trains to the same losses and gradients as the fast path",
          "[textbook][train]") {
  const TempDir dir;
  for (const std::string task : {"charlm", "textcls", "timeseries"}) {
    INFO("task " << task);
    const std::string data = write_task_data(dir, task);
    const TextbookTaskRun fast = train_task_steps(task, data);
    TextbookTaskRun textbook;
    {
      const Textbook scope;
      textbook = train_task_steps(task, data);
    }
    // Gradients of the first step (the same weights): f32 values whose sums run in another
    // order, a few ulps apart: within 1e-4 of each tensor's largest entry, plus 1e-7 of the
    // largest gradient of the model for the tensors whose gradient is 0 in exact arithmetic
    // (k_proj.bias: softmax ignores a shift shared by every key, so its entries are rounding
    // noise of the other gradients' size times u). A dropped term or a wrong dropout mask moves
    // them by far more.
    REQUIRE(fast.gradients.size() == textbook.gradients.size());
    double largest_of_model = 0;
    for (const auto& [name, expected] : fast.gradients) {
      for (double x : expected) largest_of_model = std::max(largest_of_model, std::abs(x));
    }
    for (const auto& [name, expected] : fast.gradients) {
      INFO(name);
      const std::vector<double>& actual = textbook.gradients.at(name);
      REQUIRE(actual.size() == expected.size());
      double largest = 0;
      for (double x : expected) largest = std::max(largest, std::abs(x));
      const double margin = 1e-4 * largest + 1e-7 * largest_of_model;
      for (size_t i = 0; i < expected.size(); ++i) REQUIRE(actual[i] == Approx(expected[i]).margin(margin));
    }
    // Losses: each step's weights carry the earlier steps' rounding differences (Adam divides by
    // sqrt(v), which amplifies them for the smallest gradients): relative 1e-3, far below the
    // loss's own change over these steps.
    REQUIRE(textbook.losses.size() == fast.losses.size());
    for (size_t step = 0; step < fast.losses.size(); ++step) {
      INFO("step " << step << ": fast " << fast.losses[step] << ", textbook " << textbook.losses[step]);
      CHECK(textbook.losses[step] == Approx(fast.losses[step]).epsilon(1e-3));
    }
    // Not bit for bit: the other path ran. (The losses, means of many f32 terms, may round
    // alike; thousands of gradient entries summed in another order do not.)
    CHECK(textbook.gradients != fast.gradients);
  }
}
