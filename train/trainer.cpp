#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "autograd/autocast.h"
#include "autograd/error.h"
#include "autograd/profiler.h"
#include "autograd/rng.h"
#include "autograd/storage.h"
#include "autograd/threads.h"
#include "nn/grad_scaler.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/checkpoint_file.h"
#include "train/progress.h"
#include "train/tasks.h"

namespace tg::train {
namespace {

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const std::vector<Tensor>& params) {
  if (c.optimizer == "sgd") return std::make_unique<SGD>(params, c.lr, 0.9, c.weight_decay);
  if (c.optimizer == "adam") return std::make_unique<Adam>(params, c.lr, std::pair{0.9, 0.999}, 1e-8, c.weight_decay);
  return std::make_unique<AdamW>(params, c.lr, std::pair{0.9, 0.999}, 1e-8, c.weight_decay);
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

// Fails before training, not after it, when an output could not be written.
void check_output_dir(const std::string& path, const char* flag) {
  if (path.empty()) return;
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  TG_CHECK(std::filesystem::is_directory(parent), flag, " ", path, ": the directory ", parent.string(),
           " does not exist");
}

}  // namespace

int train(const TrainRun& run) {
  TrainConfig config = run.config;
  Checkpoint resumed;
  if (!run.resume.empty()) {
    resumed = load_checkpoint(run.resume);
    const int64_t steps = config.steps, epochs = config.epochs;
    config = resumed.config;  // the model and data pipeline must be the ones that were saved
    config.device = run.config.device;  // ... but the device is this run's choice
    if (steps > 0 || epochs > 0) {
      config.steps = steps;
      config.epochs = epochs;
    }
  }
  config.validate();
  check_output_dir(run.save, "--save");
  check_output_dir(run.save_init, "--save-init");
  check_output_dir(run.log, "--log");
  set_num_threads(config.threads);
  manual_seed(config.seed);  // the initial weights
  std::unique_ptr<Task> task = make_task(config, config.data, run.resume.empty() ? nullptr : &resumed.data_state);
  nn::Module& model = task->model();
  model.train();
  if (!run.resume.empty()) model.load_state_dict(resumed.model);
  if (!run.save_init.empty()) {
    save_checkpoint(run.save_init, {config, task->data_state(), model.state_dict(), {}, 0, rng_state(), {}, 0});
  }
  std::unique_ptr<Optimizer> optimizer = make_optimizer(config, model.parameters());
  if (!resumed.optimizer.empty()) optimizer->load_state(resumed.optimizer);
  // --amp: forward and loss under autocast; f16 needs loss scaling, bf16 (f32's exponent range)
  // does not, so its scaler is disabled (a pass-through with scale 1).
  GradScalerOptions scaler_options;
  scaler_options.enabled = config.amp == "fp16";
  GradScaler scaler(scaler_options);
  int64_t skipped_steps = 0;
  if (!run.resume.empty()) {
    scaler.load_state(resumed.scaler);
    skipped_steps = resumed.skipped_steps;
  }

  const int64_t examples = task->examples(true);
  const int64_t per_epoch = examples / config.batch;
  TG_CHECK(per_epoch > 0, "--batch ", config.batch, " is larger than the ", examples,
           " training examples in ", config.data);
  const int64_t total = config.steps > 0 ? config.steps : std::max<int64_t>(1, config.epochs) * per_epoch;
  const int64_t first = run.resume.empty() ? 0 : resumed.step;
  TG_CHECK(first <= total, "--resume: the checkpoint is at step ", first, ", past the planned ", total, " steps");
  const int64_t last = run.stop_after > 0 ? std::min(total, first + run.stop_after) : total;
  TG_CHECK(config.warmup <= total, "--warmup ", config.warmup, " is longer than the ", total, " steps");
  const WarmupCosine schedule(config.lr, config.warmup, total);
  if (!run.resume.empty()) set_rng_state(resumed.rng);  // dropout continues where it stopped

  std::ofstream log;
  if (!run.log.empty()) {
    log.open(run.log);
    TG_CHECK(log.good(), "--log: cannot write ", run.log);
    log << "step,epoch,loss,lr,ms,val_loss,val_accuracy,loss_scale,skipped\n";
  }
  std::fprintf(stderr, "%s: %lld training and %lld validation examples, %lld parameters, %lld steps\n",
               config.task.c_str(), static_cast<long long>(examples),
               static_cast<long long>(task->examples(false)),
               static_cast<long long>(model.parameter_count()), static_cast<long long>(total));

  reset_allocator_stats();
  const int64_t bytes_before = allocator_stats().current_bytes;
  std::unique_ptr<Profiler> profiler = run.profile ? std::make_unique<Profiler>() : nullptr;
  Progress progress(last, first);
  std::vector<std::vector<int64_t>> batches;
  int64_t batches_epoch = -1;
  double total_ms = 0, recent_loss_sum = 0;
  int64_t recent_count = 0;
  Metrics val;
  for (int64_t step = first; step < last; ++step) {
    const int64_t epoch = step / per_epoch;
    if (epoch != batches_epoch) {
      batches = epoch_batches(examples, config.batch, config.shuffle, config.seed, epoch);
      batches_epoch = epoch;
      recent_loss_sum = 0;
      recent_count = 0;
    }
    const auto started = std::chrono::steady_clock::now();
    const double lr = schedule.lr_at(step);
    optimizer->set_lr(lr);
    Tensor loss;
    {
      const Autocast autocast(config.amp_dtype());  // f32: off
      loss = task->loss(batches[step % per_epoch], true);
    }
    const double loss_value = loss.item();
    const double loss_scale = scaler.get_scale();  // the scale this step's backward runs with
    scaler.scale(loss).backward();
    scaler.unscale(*optimizer);  // clip the true gradients, not the scaled ones
    if (config.clip > 0) clip_grad_norm(model.parameters(), config.clip);
    if (!scaler.step(*optimizer)) ++skipped_steps;  // inf/NaN gradients: no update
    scaler.update();
    optimizer->zero_grad();
    loss = Tensor();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
    total_ms += ms;
    recent_loss_sum += loss_value;
    ++recent_count;

    const bool end_of_epoch = (step + 1) % per_epoch == 0;
    const bool evaluate = step + 1 == total ||
                          (config.eval_every > 0 ? (step + 1) % config.eval_every == 0 : end_of_epoch);
    std::string val_columns = ",";
    if (evaluate && task->examples(false) > 0) {
      const Autocast autocast(config.amp_dtype());
      val = task->evaluate(false, config.batch);
      val_columns = number(val.loss) + "," + (val.accuracy ? number(*val.accuracy) : "");
      progress.message("step " + std::to_string(step + 1) + ": val loss " + number(val.loss) +
                       (val.accuracy ? ", val accuracy " + number(*val.accuracy) : ""));
    }
    if (log.is_open()) {
      log << step + 1 << "," << epoch << "," << number(loss_value) << "," << number(lr) << ","
          << number(ms) << "," << val_columns << "," << number(loss_scale) << "," << skipped_steps
          << "\n";
    }
    progress.update(step + 1, epoch, loss_value, lr, config.batch * 1000.0 / std::max(ms, 1e-9));
  }
  progress.finish();
  if (profiler) {
    profiler.reset();
    std::cerr << "per-op profile of " << last - first << " steps (forward rows time the gap since the "
              << "previous op, see autograd/profiler.h):\n" << format_profile(profile_results(), 30);
  }
  const int64_t peak_bytes = allocator_stats().peak_bytes - bytes_before;

  if (!run.save.empty()) {
    save_checkpoint(run.save, {config, task->data_state(), model.state_dict(), optimizer->state(),
                               last, rng_state(), scaler.state(), skipped_steps});
  }
  const int64_t steps_run = last - first;
  const double train_loss = recent_count > 0 ? recent_loss_sum / recent_count : NAN;
  const double ms_per_step = steps_run > 0 ? total_ms / steps_run : 0;
  std::cout << "trained " << steps_run << " steps (" << last << "/" << total << "): train loss "
            << number(train_loss);
  if (val.examples > 0) {
    std::cout << ", val loss " << number(val.loss);
    if (val.accuracy) std::cout << ", val accuracy " << number(*val.accuracy);
  }
  std::cout << ", " << number(ms_per_step) << " ms/step, peak " << peak_bytes << " bytes\n";
  if (run.json) {
    nlohmann::json summary = {{"task", config.task}, {"steps", last}, {"train_loss", train_loss},
                              {"val_loss", val.examples > 0 ? nlohmann::json(val.loss) : nlohmann::json()},
                              {"ms_per_step", ms_per_step}, {"peak_bytes", peak_bytes},
                              {"amp", config.amp}, {"loss_scale", scaler.get_scale()},
                              {"skipped_steps", skipped_steps}};
    if (task->classification()) {
      summary["val_accuracy"] = val.accuracy ? nlohmann::json(*val.accuracy) : nlohmann::json();
    }
    std::cout << summary.dump() << "\n";
  }
  return 0;
}

}  // namespace tg::train
