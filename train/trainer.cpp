#include "tapegrad/train/trainer.h"

#include <charconv>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/distributed/communicator.h"
#include "tapegrad/distributed/gradient_sync.h"
#include "tapegrad/distributed/job.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/json_bytes.h"
#include "tapegrad/io/sha256.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/nn/schedule.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/threads.h"
#include "tapegrad/runtime/trace.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/checkpoint_policy.h"
#include "tapegrad/train/grad_health.h"
#include "tapegrad/train/progress.h"
#include "tapegrad/train/run_definition.h"
#include "tapegrad/train/stop_signals.h"
#include "tapegrad/train/tasks.h"
#include "tapegrad/train/train_step.h"

namespace tg::train {
namespace {

std::unique_ptr<Optimizer> make_optimizer(const TrainConfig& c, const std::vector<Tensor>& params) {
  if (c.optimizer == "sgd") return std::make_unique<SGD>(params, c.lr, 0.9, c.weight_decay);
  if (c.optimizer == "adam") return std::make_unique<Adam>(params, c.lr, std::pair{0.9, 0.999}, 1e-8, c.weight_decay);
  return std::make_unique<AdamW>(params, c.lr, std::pair{0.9, 0.999}, 1e-8, c.weight_decay);
}

std::string number(double value) {
  if (std::isnan(value)) return "NaN";  // not printf's "-nan"
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

// The flag --save's errors name: a resumed run without --save saves back to its --resume file.
std::string save_flag(const TrainRun& run) {
  const bool saved_back = !run.resume.empty() && run.save == run.resume && !run.given.count("save");
  return saved_back ? "--save (by default the --resume file)" : "--save";
}

// `path` as one word of a POSIX shell command: as it is when every byte is plain, else in single
// quotes; a path starting with '-' gets "./", so that it is not read as an option.
std::string shell_word(const std::string& path) {
  const std::string word = path.rfind('-', 0) == 0 ? "./" + path : path;
  const bool plain = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("/._-+=:,@%", c) != nullptr;
  });
  if (plain) return word;
  std::string quoted = "'";
  for (const char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// Every output is checked before training (and before the data is read), not after it: a path
// that cannot be written or renamed into place, or one that would overwrite an input or another
// output, is an error while nothing has been spent yet. --save alone may be the --resume file:
// that checkpoint is read whole before the first step and replaced atomically after the last.
void check_outputs(const TrainRun& run, const std::string& data) {
  const std::vector<NamedPath> outputs = {
      {save_flag(run), run.save}, {"--save-init", run.save_init},
      {"--save-best", run.save_best}, {"--log", run.log},
      {"--grad-stats", run.grad_stats}, {"--profile-trace", run.profile_trace}};
  const std::vector<NamedPath> all_but_save(outputs.begin() + 1, outputs.end());
  check_distinct_files({{"--resume", run.resume}}, all_but_save);
  check_distinct_files({{"--data", data}}, outputs);
  for (const NamedPath& output : outputs) {
    // (A log may be a stream such as /dev/stdout; opening it, just before training, checks it.)
    const bool is_log = output.flag == "--log" || output.flag == "--grad-stats";
    if (!output.path.empty() && !is_log) check_output_path(output.path, output.flag);
  }
}

// A resumed run continues the saved one: its model, data pipeline and optimizer settings are the
// checkpoint's, so options that would change them are errors rather than silently ignored. The
// length of the run (--steps, --epochs), where it runs (--device, --threads, and whether it
// recomputes activations) and where the data now lives (--data, checked by content) may change.
void check_resume_conflicts(const TrainConfig& saved, const TrainConfig& asked,
                            const std::set<std::string>& given) {
  static const std::set<std::string> may_change = {"steps", "epochs", "device", "threads", "data",
                                                   "checkpoint-activations"};
  const nlohmann::json saved_json = to_json(saved), asked_json = to_json(asked);
  for (const std::string& flag : given) {
    std::string key = flag == "no-shuffle" ? "shuffle" : flag;
    std::replace(key.begin(), key.end(), '-', '_');
    if (may_change.count(flag) || !saved_json.contains(key)) continue;
    if (saved_json[key] == asked_json[key]) continue;
    // A switch is named alone ("--no-shuffle"), a value with it ("--lr 0.1").
    const std::string asked_text = saved_json[key].is_boolean() ? "" : " " + asked_json[key].dump();
    const std::string saved_text = flag == "no-shuffle" ? "shuffled batches"
                                                        : key + " " + saved_json[key].dump();
    fail("--resume: --", flag, asked_text, " conflicts with the checkpoint's ", saved_text,
         " (a resumed run keeps the saved model and settings)");
  }
}

// The content hash that lets a resumed run find its data under a new path.
std::string data_sha256(const std::string& path) { return sha256_hex(read_regular_file(path, "--data")); }

// A resumed run's data, under whatever path, must hash to what the checkpoint was trained on.
void check_resumed_data(const Checkpoint& resumed, const std::string& path, const std::string& sha256) {
  if (!resumed.data_state.contains("sha256")) return;  // saved before checkpoints held the hash
  const std::string expected = resumed.data_state["sha256"].get<std::string>();
  TG_CHECK(sha256 == expected, "--resume: ", path, " is not the data the checkpoint was ",
           "trained on (its SHA-256 differs from ", expected.substr(0, 16), "...); pass the ",
           "original file with --data");
}

// --log's first line.
constexpr const char* kLogHeader = "step,epoch,loss,lr,ms,val_loss,val_accuracy,loss_scale,skipped";

// The step a --log row is of (its first cell), or nullopt when the row does not start with one.
std::optional<int64_t> logged_step(std::string_view row) {
  int64_t step = 0;
  const auto [end, error] = std::from_chars(row.data(), row.data() + row.size(), step);
  if (error != std::errc() || end == row.data() + row.size() || *end != ',') return std::nullopt;
  return step;
}

// A resumed run continues its --log: when `path` is a regular file that starts with the log's
// header and holds the row of the checkpoint's `step` (step 0: the header alone), the bytes of
// the header and the rows up to that one. The rows after it (written after the checkpoint by a run
// that was then killed) are dropped, since the resumed run writes those steps again. Anything
// else (no such file, another file, a log without that row) is 0: the log starts afresh.
uint64_t log_bytes_to_keep(const std::string& path, int64_t step) {
  std::error_code ignored;
  if (!std::filesystem::is_regular_file(path, ignored)) return 0;  // a stream, or a new file
  const std::string text = read_regular_file(path, "--log");
  const size_t header_end = text.find('\n');
  if (header_end == std::string::npos || text.compare(0, header_end, kLogHeader) != 0) return 0;
  if (step == 0) return header_end + 1;
  for (size_t row = header_end + 1; row < text.size();) {
    const size_t row_end = text.find('\n', row);
    if (row_end == std::string::npos) break;  // a row cut short by a crash
    const std::optional<int64_t> row_step =
        logged_step(std::string_view(text).substr(row, row_end - row));
    if (!row_step || *row_step > step) break;
    if (*row_step == step) return row_end + 1;
    row = row_end + 1;
  }
  return 0;
}

// Training stopped because it diverged: one line naming the step, exit code 3, and no checkpoint
// written (the previous one, if any, stays as it was).
int diverged(Progress& progress, int64_t step, const std::string& what) {
  progress.finish();
  if (progress.silent()) return kExitDiverged;  // rank 0 of a data-parallel job says it
  std::fprintf(stderr, "tapegrad train: error: training diverged at step %lld: %s; no checkpoint "
               "written (try a lower --lr, --clip, or normalised data)\n",
               static_cast<long long>(step), what.c_str());
  return kExitDiverged;
}

// fp16's smallest subnormal: a loss scale below it means no step has had finite gradients for
// about 40 steps in a row (the scale halves on each), so the run can no longer recover.
constexpr double kSmallestLossScale = 5.96e-8;

// Data parallel: only rank 0 writes (logs, checkpoints, traces, stdout); the others train silently.
TrainRun outputs_of_rank(const TrainRun& asked, int rank) {
  TrainRun run = asked;
  if (rank == 0) return run;
  for (std::string* path : {&run.save, &run.save_init, &run.save_best, &run.log,
                            &run.profile_trace, &run.grad_stats}) {
    path->clear();
  }
  run.json = false;
  run.profile = false;
  return run;
}

// What one optimizer step reports: the global batch's mean loss, the scale its backward ran with,
// whether the scaler skipped the update, the learning rate it used and how long it took.
struct StepReport {
  double loss = 0, loss_scale = 1;
  bool skipped = false;
  double lr = 0, ms = 0;
};

// One training run: what its steps share, built in the order train_ranks lists them. The members
// are declared in that order, so they are torn down in reverse (the trace before the profiler it
// feeds, the gradient sync before the model whose tape it watches).
struct Training {
  Training(const TrainRun& asked, dist::Communicator& comm);

  // Setup, on every rank, before the vote that all of them succeeded.
  void resolve_config();
  void resume_config();
  void build_model();
  void save_initial_weights() const;
  void plan_steps();
  dist::RunDefinition definition() const;
  void open_logs();
  // After the vote.
  void start_gradient_sync();
  void announce_run() const;
  void announce_full_coverage() const;
  void start_profiling();
  void announce_data_parallel() const;
  // The loop; each returns an exit code when the run stops early (it diverged).
  std::optional<int> train_steps();
  std::optional<int> run_step(int64_t step);
  void start_epoch(int64_t epoch);
  StepReport take_step(int64_t step);
  void write_grad_stats(int64_t step);
  TrainStepResult train_on_batch(int64_t step, bool grad_stats_due);
  TrainStepOptions step_options(int64_t step, bool grad_stats_due);
  void judge_gradient_norm(int64_t step, double norm);
  bool evaluation_due(int64_t step) const;
  std::string validate(int64_t step);
  void log_step(int64_t step, int64_t epoch, const StepReport& report,
                const std::string& val_columns);
  std::optional<int> check_divergence(int64_t step, const StepReport& report, bool evaluated);
  int stop_diverged(int64_t step, const std::string& what);
  void report_gradient_health();
  // Checkpoints during training and the early stops (train/checkpoint_policy.h, stop_signals.h).
  std::optional<int> after_step(int64_t step, bool evaluated);
  std::optional<int> record_validation(int64_t step);
  int agreed_stop_signal();
  bool agreed_output_failure();
  void output_failed(const std::string& error);
  int stop_on_signal(int64_t steps, int signal);
  int stop_on_output_failure(int64_t steps);
  std::optional<int> save_before_stopping(int64_t steps);
  std::string where_saved() const;
  int nothing_to_train();
  void stop_early(int64_t steps);
  std::optional<int> save_resumable(const std::string& asked_path, const std::string& path,
                                    int64_t steps);
  // The end.
  void stop_recording();
  void finish_outputs();
  void write_trace_file();
  std::optional<int> save_final();
  void print_summary(int64_t peak_bytes) const;
  void print_json_summary(double train_loss, double ms_per_step, int64_t peak_bytes) const;

  const TrainRun& asked;  // as typed (every rank checks the weights --save asks for)
  const TrainRun run;     // what this rank writes (outputs_of_rank)
  dist::Communicator& comm;
  const int ranks;
  TrainConfig config;     // this run's, or the resumed checkpoint's
  Checkpoint resumed;     // --resume's checkpoint (empty when not resuming)
  const bool resuming;
  std::string data_hash;  // the data file's SHA-256
  std::unique_ptr<Task> task;
  nlohmann::json data_state;    // what checkpoints store of the data: the task's, and the hash
  nn::Module* model = nullptr;  // the task's
  std::unique_ptr<Optimizer> optimizer;
  std::optional<GradScaler> scaler;
  int64_t skipped_steps = 0;                // updates the scaler skipped, resumed ones included
  int64_t examples = 0, per_epoch = 0;      // training examples, batches per epoch
  int64_t total = 0, first = 0, last = 0;   // the planned steps; this run takes [first, last)
  std::optional<WarmupCosine> schedule;
  std::unique_ptr<LogFile> log;
  std::unique_ptr<GradStatsLog> grad_stats;
  GradHealthJudge gradient_health;  // rank 0's: every step's global norm, --grad-stats' records
  nn::NamedTensors named_parameters;
  int64_t shard = 0, shard_first = 0;  // this rank's examples of every batch
  std::optional<dist::GradientSync> gradient_sync;
  bool data_parallel = false;
  int64_t bytes_before = 0;  // allocated when training started
  std::unique_ptr<Profiler> profiler;
  std::unique_ptr<TraceRecorder> trace;
  std::string trace_json;          // the trace's, once recording stopped
  int64_t trace_steps_kept = 0;
  std::optional<Progress> progress;
  std::vector<std::vector<int64_t>> batches;  // the epoch batches_epoch's
  int64_t batches_epoch = -1;
  double total_ms = 0, recent_loss_sum = 0;  // every step's time; this epoch's losses
  int64_t recent_count = 0;
  Metrics val;  // the latest validation
  ValidationRecord validation;  // the best validation so far (a resumed run: the checkpoint's)
  int64_t saved_step = -1;      // the step of the last resumable checkpoint written to --save
  // The first diagnostic output (--log, --grad-stats, --save-best) that failed mid-run, its error;
  // "" while none did. The run then stops after the step, --save written first.
  std::string output_failure;
};

Training::Training(const TrainRun& asked, dist::Communicator& comm)
    : asked(asked), run(outputs_of_rank(asked, comm.rank())), comm(comm), ranks(comm.size()),
      config(run.config), resuming(!run.resume.empty()) {}

// The settings the run trains with (a resumed run's are mostly the checkpoint's), checked; the
// data found, hashed and checked against the checkpoint; every output checked (before the data
// is read); textcls's max_len, when not typed, taken from the data (train/config.h).
void Training::resolve_config() {
  if (resuming) resume_config();
  config.validate();
  check_flags_apply(run.given, train_flag_scopes(config));  // resumed: the checkpoint's model
  // (eval and sample accept such a checkpoint: dropout is off there)
  TG_CHECK(config.model_config().attention.kind != nn::AttentionKind::performer || config.dropout == 0,
           "--attention performer cannot train with --dropout ", config.dropout,
           ": FAVOR+ never forms the attention weights that dropout drops (pass --dropout 0)");
  TG_CHECK(config.batch % ranks == 0, "--batch ", config.batch,
           " (the global batch) is not divisible by the ", ranks, " processes of the job");
  std::error_code ignored;
  const std::filesystem::path absolute_data = std::filesystem::absolute(config.data, ignored);
  if (!absolute_data.empty()) config.data = absolute_data.string();  // resumable from anywhere
  check_outputs(run, config.data);
  data_hash = data_sha256(config.data);  // read and hashed once
  if (resuming) check_resumed_data(resumed, config.data, data_hash);
  // textcls without --max-len: what the data needs (a resumed run keeps the checkpoint's).
  const std::string max_len_notice =
      resuming ? "" : derive_textcls_max_len(config, run.given, run.config.data);
  if (!max_len_notice.empty() && comm.rank() == 0) std::fprintf(stderr, "%s\n", max_len_notice.c_str());
}

// --resume: the checkpoint's settings, except those a resumed run may change.
void Training::resume_config() {
  resumed = load_checkpoint(run.resume);  // validated: shapes, counts, finite values
  TG_CHECK(resumed.config.quantization == "none", "--resume ", run.resume, " is an int8 (",
           resumed.config.quantization, ") quantized checkpoint, which cannot be trained: "
           "resume from the f32 checkpoint it was quantized from");
  TG_CHECK(!resumed.weights_only, "--resume ", run.resume, " is an export (tapegrad export: the ",
           "weights alone, no optimizer, step or RNG state): resume from the checkpoint of --save");
  check_resume_conflicts(resumed.config, run.config, run.given);
  config = resumed.config;  // the model and data pipeline must be the ones that were saved
  config.device = run.config.device;  // ... but where and how fast it runs is this run's choice
  config.threads = run.config.threads;
  if (run.given.count("checkpoint-activations")) config.checkpoint_activations = true;
  if (run.config.steps > 0 || run.config.epochs > 0) {
    config.steps = run.config.steps;
    config.epochs = run.config.epochs;
  }
  // --data if given (the same data moved elsewhere), else the saved path.
  if (run.given.count("data")) config.data = run.config.data;
}

// The task and its model (the checkpoint's weights when resuming), the optimizer, the loss scaler.
void Training::build_model() {
  set_num_threads(config.threads);
  manual_seed(config.seed);  // the initial weights
  task = make_task(config, config.data, resuming ? &resumed.data_state : nullptr);
  data_state = task->data_state();
  data_state["sha256"] = data_hash;
  model = &task->model();
  model->train();
  if (resuming) model->load_state_dict(resumed.model);
  optimizer = make_optimizer(config, model->parameters());
  if (!resumed.optimizer.empty()) optimizer->load_state(resumed.optimizer);
  // --amp: forward and loss under autocast; f16 needs loss scaling, bf16 (f32's exponent range)
  // does not, so its scaler is disabled (a pass-through with scale 1).
  GradScalerOptions scaler_options;
  scaler_options.enabled = config.amp == "fp16";
  scaler.emplace(scaler_options);
  if (resuming) {
    scaler->load_state(resumed.scaler);
    skipped_steps = resumed.skipped_steps;
    validation = resumed.validation;  // --patience counts on, --save-best improves on it
  }
}

// --save-init: the initial weights, no optimizer state, step 0, the scaler's initial state.
void Training::save_initial_weights() const {
  save_checkpoint(run.save_init, {.config = config, .data_state = data_state,
                                  .model = model->state_dict(), .optimizer = {}, .step = 0,
                                  .rng = rng_state(), .scaler = {}, .skipped_steps = 0,
                                  .validation = {}});
}

// The steps: the planned total (--steps, or --epochs of batches), the first (a resumed run's
// checkpoint step), the last this run takes (--stop-after); and the learning-rate schedule.
void Training::plan_steps() {
  // (--val-frac 0 is refused by the flag scopes; a split too small to hold an example, here.)
  const char* needs_validation = !run.save_best.empty() ? "--save-best"
                                 : run.patience > 0     ? "--patience"
                                                        : nullptr;
  TG_CHECK(needs_validation == nullptr || task->examples(false) > 0, needs_validation,
           " needs validation examples, but the last --val-frac ", config.val_frac, " of ",
           config.data, " holds none (raise --val-frac)");
  examples = task->examples(true);
  per_epoch = examples / config.batch;
  TG_CHECK(per_epoch > 0, "--batch ", config.batch, " is larger than the ", examples,
           " training examples in ", config.data);
  total = config.steps > 0 ? config.steps
                           : checked_mul(std::max<int64_t>(1, config.epochs), per_epoch,
                                         "--epochs x batches per epoch");
  TG_CHECK(total <= Limits::steps, "the run would take ", total, " steps, more than the ",
           Limits::steps, " allowed");
  first = resuming ? resumed.step : 0;
  TG_CHECK(first <= total, "--resume: the checkpoint is at step ", first, ", past the planned ",
           total, " steps");
  last = run.stop_after > 0 ? first + std::min(total - first, run.stop_after) : total;
  TG_CHECK(config.warmup <= total, "--warmup ", config.warmup, " is longer than the ", total,
           " steps");
  schedule = config.schedule == "constant" ? warmup_constant(config.lr, config.warmup, total)
                                           : WarmupCosine(config.lr, config.warmup, total);
}

// Data parallel: what defines this rank's run (train/run_definition.h), which the ranks compare
// before anything is written and before any collective is sized by it. Built before the vote
// (reading the --resume file again may fail); nothing to compare in one process.
dist::RunDefinition Training::definition() const {
  if (ranks == 1) return {};
  const std::string checkpoint =
      resuming ? "step " + std::to_string(resumed.step) + ", SHA-256 " +
                     sha256_hex(read_regular_file(run.resume, "--resume"))
               : "none";
  return run_definition({.config = config, .stop_after = run.stop_after,
                         .save_every = run.save_every, .save_best = !asked.save_best.empty(),
                         .patience = run.patience, .resumed = checkpoint,
                         .data_sha256 = data_hash, .data_state = data_state,
                         .examples = examples, .planned_steps = total, .first_step = first,
                         .last_step = last, .parameters = model->named_parameters()});
}

// --log (its header written now) and --grad-stats, with the parameter names its rows carry.
void Training::open_logs() {
  if (!run.log.empty()) {
    const uint64_t kept = resuming ? log_bytes_to_keep(run.log, first) : 0;
    log = std::make_unique<LogFile>(run.log, "--log", kept);
    if (kept == 0) log->write_line(kLogHeader);
  }
  if (!run.grad_stats.empty()) {
    grad_stats = std::make_unique<GradStatsLog>(run.grad_stats, run.grad_stats_every);
  }
  named_parameters = model->named_parameters();
}

// This rank's shard of every batch, and the gradient averaging over the ranks.
void Training::start_gradient_sync() {
  shard = config.batch / ranks;
  shard_first = comm.rank() * shard;  // this rank's examples
  // Overlapped with backward, except when activation checkpointing re-records ops during backward.
  // Gradients on a CUDA device are reduced in device memory (NCCL when built with it, see
  // distributed/bucket_reducer.h). Under an MPI launcher the sync is active even for one process.
  gradient_sync.emplace(comm, model->parameters(), /*overlap=*/!config.checkpoint_activations);
  data_parallel = gradient_sync->active();
}

// Rank 0's line on stderr: the task, its examples, the model's size and the steps.
void Training::announce_run() const {
  if (comm.rank() != 0) return;
  std::fprintf(stderr, "%s: %lld training and %lld validation examples, %lld parameters, "
               "%lld steps\n", config.task.c_str(), static_cast<long long>(examples),
               static_cast<long long>(task->examples(false)),
               static_cast<long long>(model->parameter_count()), static_cast<long long>(total));
  if (const std::string notice = task->data_notice(); !notice.empty()) {
    std::fprintf(stderr, "%s\n", notice.c_str());  // how many lines --truncate cut
  }
  announce_full_coverage();
}

// Rank 0's line when the sparse layout covers every pair of positions the model sees (BigBird at
// a short context, local:W with W >= the context): it computes full attention there.
void Training::announce_full_coverage() const {
  if (config.task == "charlm" && config.layers == 0) return;  // no attention
  const int64_t length = task->longest_sequence();
  std::string where = "the longest text (" + std::to_string(length) + " tokens)";  // textcls
  if (config.task == "charlm") where = "--context " + std::to_string(length);
  if (config.task == "timeseries") where = "--window " + std::to_string(length);
  const std::string notice = full_coverage_notice(config.model_config().attention, length,
                                                  config.task == "charlm", where);
  if (!notice.empty()) std::fprintf(stderr, "%s\n", notice.c_str());
}

// The memory baseline, --profile's profiler and --profile-trace's recorder.
void Training::start_profiling() {
  reset_allocator_stats();
  bytes_before = allocator_stats().current_bytes;
  profiler = run.profile ? std::make_unique<Profiler>() : nullptr;
  // After the profiler: the trace passes every event on to it, and is taken out before it ends.
  if (!run.profile_trace.empty()) {
    trace = std::make_unique<TraceRecorder>(TraceOptions{
        .schedule = run.profile_schedule, .device = config.compute_device(),
        .process_name = "tapegrad train",
        .metadata = {{"command", "train"}, {"task", config.task}, {"first_step", std::to_string(first + 1)}}});
  }
}

// Rank 0's line on stderr about a data-parallel job: its processes and how the batch is split.
void Training::announce_data_parallel() const {
  if (!data_parallel || comm.rank() != 0) return;
  std::fprintf(stderr, "data parallel: %d process%s (%s), %lld examples each of every batch of "
               "%lld, gradients averaged in %lld buckets (gradients: %s)\n", ranks,
               ranks == 1 ? "" : "es", comm.name(), static_cast<long long>(shard),
               static_cast<long long>(config.batch),
               static_cast<long long>(gradient_sync->buckets()), gradient_sync->carrier());
}

// The steps [first, last), with a progress bar (silent on ranks other than 0); SIGINT and SIGTERM
// stop them after the current step (--patience sets an earlier `last`).
std::optional<int> Training::train_steps() {
  progress.emplace(last, first, comm.rank() != 0);
  const StopSignals stop_signals(ranks > 1 ? kStopGraceMs : 0);
  for (int64_t step = first; step < last; ++step) {
    if (const std::optional<int> stopped = run_step(step)) return stopped;
  }
  return std::nullopt;
}

// One step of the loop: train on its batch, validate when due, log it, stop if it diverged.
std::optional<int> Training::run_step(int64_t step) {
  const int64_t epoch = step / per_epoch;
  if (epoch != batches_epoch) start_epoch(epoch);
  dist::run_step_hook(comm, step + 1);  // a test hook (tapegrad_hooked's rank that dies)
  const StepReport report = take_step(step);
  const bool evaluate = evaluation_due(step) && task->examples(false) > 0;
  const std::string val_columns = evaluate ? validate(step) : ",";
  log_step(step, epoch, report, val_columns);
  if (const std::optional<int> stopped = check_divergence(step, report, evaluate)) return stopped;
  progress->update(step + 1, epoch, report.loss, report.lr,
                   config.batch * 1000.0 / std::max(report.ms, 1e-9));
  return after_step(step, evaluate);
}

// A new epoch: its batches (reshuffled unless --no-shuffle), and its mean loss started afresh.
void Training::start_epoch(int64_t epoch) {
  batches = epoch_batches(examples, config.batch, config.shuffle, config.seed, epoch);
  batches_epoch = epoch;
  recent_loss_sum = 0;
  recent_count = 0;
}

// One optimizer step at the schedule's learning rate, timed; --grad-stats rows when due, and the
// step's loss added to the epoch's.
StepReport Training::take_step(int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  const double lr = schedule->lr_at(step);
  optimizer->set_lr(lr);
  const bool grad_stats_due = grad_stats && grad_stats->due(step + 1, first + 1);
  const TrainStepResult result = train_on_batch(step, grad_stats_due);
  const bool skipped = result.skipped;  // inf/NaN gradients: no update
  if (skipped) ++skipped_steps;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  if (grad_stats_due) write_grad_stats(step + 1);
  total_ms += ms;
  recent_loss_sum += result.loss;
  ++recent_count;
  return {.loss = result.loss, .loss_scale = result.loss_scale, .skipped = skipped, .lr = lr,
          .ms = ms};
}

// --grad-stats' rows of `step` (1-based), and what they show about the gradients.
void Training::write_grad_stats(int64_t step) {
  std::string warning;
  try {
    warning = grad_stats->write_rows(step, named_parameters);
  } catch (const Error& error) {
    output_failed(error.what());  // "--grad-stats: writing ... failed: ..."
    grad_stats.reset();  // closed, its error already known
    return;
  }
  if (!warning.empty()) progress->message(warning);
  const auto findings = gradient_health.observe_record(step, grad_stats->recorded());
  for (const GradFinding& finding : findings) progress->message(finding.line());
}

// Forward, backward and update on the step's batch (a slice in the trace); the loss returned is
// the global batch's mean.
TrainStepResult Training::train_on_batch(int64_t step, bool grad_stats_due) {
  const std::vector<int64_t>& batch = batches[step % per_epoch];
  const TrainStepOptions options = step_options(step, grad_stats_due);
  // One process computes the whole batch; a rank its shard, numbering randomness by the global
  // batch (autograd/rng.h BatchShardScope) so that dropout draws what one process would, also
  // when --checkpoint-activations recomputes it during backward.
  const auto loss = [&] {
    if (!data_parallel) return task->loss(batch, true);
    gradient_sync->begin_step();  // watches the tape, to start each bucket's allreduce in backward
    return task->shard_loss(batch, shard_first, shard);
  };
  std::optional<BatchShardScope> numbering;
  if (data_parallel) {
    numbering.emplace(BatchShard{.batch = config.batch, .first = shard_first, .count = shard});
  }
  if (trace) trace->begin_step(step + 1);
  TrainStepResult result = train_step(loss, *optimizer, *scaler, options);
  numbering.reset();
  if (trace) trace->end_step();
  comm.allreduce(&result.loss, 1, dist::Reduce::average);  // the global batch's mean loss
  return result;
}

// The step's autocast and clipping; --grad-stats measures the gradients when due, rank 0 judges
// their global norm, and a data-parallel rank averages them over the ranks.
TrainStepOptions Training::step_options(int64_t step, bool grad_stats_due) {
  TrainStepOptions options{.autocast = config.amp_dtype(), .clip = config.clip};
  if (comm.rank() == 0) {
    options.check_gradient_norm = [this, step](double norm) {
      judge_gradient_norm(step + 1, norm);
    };
  }
  if (grad_stats_due) {
    options.inspect_gradients = [this] {
      const ProfileRegion region("grad_stats");  // its own row in --profile, a slice in the trace
      grad_stats->measure(named_parameters);
    };
  }
  if (data_parallel) options.reduce_gradients = [this] { gradient_sync->average(); };
  return options;
}

// Every step, on rank 0: the global gradient norm judged (train/grad_health.h), a finding printed
// at once. An fp16 step whose gradients overflowed is the loss scaler's to skip, not a finding.
void Training::judge_gradient_norm(int64_t step, double norm) {
  if (!std::isfinite(norm) && scaler->is_enabled()) return;
  const std::optional<GradFinding> finding = gradient_health.observe_global_norm(
      step, norm, [this] { return gradient_norms(named_parameters); });
  if (finding) progress->message(finding->line());
}

// Validation is due after the last planned step, and every --eval-every steps (0: every epoch).
bool Training::evaluation_due(int64_t step) const {
  const bool end_of_epoch = (step + 1) % per_epoch == 0;
  return step + 1 == total ||
         (config.eval_every > 0 ? (step + 1) % config.eval_every == 0 : end_of_epoch);
}

// The validation split's loss (and accuracy), under the run's autocast: a progress line, and the
// log's val_loss,val_accuracy columns.
std::string Training::validate(int64_t step) {
  const Autocast autocast(config.amp_dtype());
  val = task->evaluate(false, config.batch);
  std::string val_columns = number(val.loss) + "," + (val.accuracy ? number(*val.accuracy) : "");
  progress->message("step " + std::to_string(step + 1) + ": val loss " + number(val.loss) +
                    (val.accuracy ? ", val accuracy " + number(*val.accuracy) : ""));
  return val_columns;
}

// --log's row for the step.
void Training::log_step(int64_t step, int64_t epoch, const StepReport& report,
                        const std::string& val_columns) {
  if (!log) return;
  const std::string row = std::to_string(step + 1) + "," + std::to_string(epoch) + "," +
                          number(report.loss) + "," + number(report.lr) + "," +
                          number(report.ms) + "," + val_columns + "," +
                          number(report.loss_scale) + "," + std::to_string(skipped_steps);
  try {
    log->write_line(row);
  } catch (const Error& error) {
    output_failed(error.what());  // "--log: writing ... failed: ..."
    log.reset();  // closed, its error already known
  }
}

// The exit code when the step diverged: a non-finite loss, a collapsed loss scale, or a
// non-finite validation loss.
std::optional<int> Training::check_divergence(int64_t step, const StepReport& report,
                                              bool evaluated) {
  // A non-finite loss is divergence, except on a step the loss scaler skipped (an fp16
  // overflow it recovers from by lowering the scale) -- unless the scale has collapsed.
  if (!std::isfinite(report.loss) && !report.skipped) {
    return stop_diverged(step + 1, "the training loss is " + number(report.loss));
  }
  if (scaler->is_enabled() && scaler->get_scale() < kSmallestLossScale) {
    return stop_diverged(step + 1, "the loss scale fell to " + number(scaler->get_scale()) +
                                       " (no finite gradients for many steps)");
  }
  if (evaluated && val.examples > 0 && !std::isfinite(val.loss)) {
    return stop_diverged(step + 1, "the validation loss is " + number(val.loss));
  }
  return std::nullopt;
}

// The run diverged at `step`: the gradient-health summary, then diverged()'s line, the last.
int Training::stop_diverged(int64_t step, const std::string& what) {
  report_gradient_health();
  return diverged(*progress, step, what);
}

// The end of the run: the findings that need every record, then the summary of all of them on
// stderr (nothing when the gradients were healthy).
void Training::report_gradient_health() {
  gradient_health.finish();
  for (const std::string& line : gradient_health.summary()) progress->message(line);
}

// After a step (its validation and log row done): --save-best when the validation improved,
// --save-every when due; then the run stops here on a signal or a failed diagnostic output (the
// exit code; --save written first) or on --patience (an earlier `last`: the run ends normally).
std::optional<int> Training::after_step(int64_t step, bool evaluated) {
  if (evaluated) {
    if (const std::optional<int> stopped = record_validation(step)) return stopped;
  }
  if (periodic_save_due(step + 1, run.save_every, last)) {
    if (const std::optional<int> stopped = save_resumable(asked.save, run.save, step + 1)) {
      return stopped;
    }
    saved_step = step + 1;
    if (!run.save.empty()) {
      progress->message("step " + std::to_string(step + 1) + ": saved " + run.save);
    }
  }
  if (const int signal = agreed_stop_signal()) return stop_on_signal(step + 1, signal);
  if (agreed_output_failure()) return stop_on_output_failure(step + 1);
  if (evaluated && step + 1 < last && patience_exhausted(validation, run.patience)) {
    stop_early(step + 1);
  }
  return std::nullopt;
}

// The validation just measured against the best so far, and --save-best's checkpoint when it
// improved. Every rank takes rank 0's loss, so that all of them decide alike.
std::optional<int> Training::record_validation(int64_t step) {
  double loss = val.loss;
  if (ranks > 1) comm.broadcast(&loss, sizeof loss, 0);
  if (!record_evaluation(validation, loss, step + 1) || asked.save_best.empty()) {
    return std::nullopt;
  }
  std::optional<int> stopped;
  try {
    stopped = save_resumable(asked.save_best, run.save_best, step + 1);
  } catch (const Error& error) {  // (rank 0's: the one that writes)
    output_failed("--save-best: " + std::string(error.what()));
    return std::nullopt;
  }
  if (!stopped && !run.save_best.empty()) {
    progress->message("step " + std::to_string(step + 1) + ": the best val loss so far; saved " +
                      run.save_best);
  }
  return stopped;
}

// The stop signal this process received (0: none); in a data-parallel job the one any rank
// received (SIGTERM over SIGINT), so that every rank stops after the same step.
int Training::agreed_stop_signal() {
  const int own = pending_stop_signal();
  if (ranks == 1) return own;
  const int agreed = static_cast<int>(-comm.allreduce_min(-static_cast<int64_t>(own)));
  StopSignals::step_finished();  // every rank got here: none died
  return agreed;
}

// A diagnostic output failed on this process: its error kept (the first), nothing more written
// to it. Losing a log must not cost the trained weights: the run stops after this step with
// --save written first (after_step).
void Training::output_failed(const std::string& error) {
  if (output_failure.empty()) output_failure = error;
}

// Whether a diagnostic output failed; in a data-parallel job, on any rank (rank 0 writes them), so
// that every rank stops after the same step.
bool Training::agreed_output_failure() {
  const bool own = !output_failure.empty();
  if (ranks == 1) return own;
  return comm.allreduce_min(own ? 0 : 1) == 0;
}

// The run stops early after `steps` steps: the resumable checkpoint to --save (unless this step's
// is already there), the gradient-health summary, and no rank goes on (or exits, and has the
// launcher end the job) before rank 0 has saved. The exit code when the weights diverged.
std::optional<int> Training::save_before_stopping(int64_t steps) {
  std::optional<int> diverged;
  try {
    if (saved_step != steps) diverged = save_resumable(asked.save, run.save, steps);
  } catch (const Error& error) {
    if (output_failure.empty()) throw;
    fail(error.what(), " (saving after step ", steps, ", where the run stopped because ",
         output_failure, ")");
  }
  report_gradient_health();
  progress->finish();
  comm.barrier();
  return diverged;
}

// "saved ck.st (continue with: tapegrad train --resume ck.st)", a command that works as printed
// (it saves back to ck.st), or "nothing saved (no --save given)".
std::string Training::where_saved() const {
  if (run.save.empty()) return "nothing saved (no --save given)";
  return "saved " + run.save + " (continue with: tapegrad train --resume " + shell_word(run.save) +
         ")";
}

// A signal stopped the run after `steps` steps: the resumable checkpoint to --save, one line on
// stderr saying where (after the line of a diagnostic output that failed meanwhile: the reader of
// `--log /dev/stdout | tee` gets the same Ctrl-C), and 128 + the signal's number.
int Training::stop_on_signal(int64_t steps, int signal) {
  if (const std::optional<int> diverged = save_before_stopping(steps)) return *diverged;
  if (comm.rank() == 0) {
    if (!output_failure.empty()) {
      std::fprintf(stderr, "tapegrad train: %s (written no more after it)\n",
                   output_failure.c_str());
    }
    std::fprintf(stderr, "tapegrad train: %s: stopped after step %lld of %lld; %s\n",
                 stop_signal_name(signal), static_cast<long long>(steps),
                 static_cast<long long>(total), where_saved().c_str());
  }
  return kExitSignalBase + signal;
}

// A diagnostic output failed during step `steps`: the checkpoint is good, so it is written first;
// then the failure, one line, and exit code 2.
int Training::stop_on_output_failure(int64_t steps) {
  if (const std::optional<int> diverged = save_before_stopping(steps)) return *diverged;
  if (comm.rank() == 0) {
    std::fprintf(stderr, "tapegrad train: error: %s; stopped after step %lld of %lld; %s\n",
                 output_failure.c_str(), static_cast<long long>(steps),
                 static_cast<long long>(total), where_saved().c_str());
  }
  return kExitOutputFailed;
}

// A resumed checkpoint whose planned steps are all done: one line says so (no loss is reported:
// none was computed), --save gets the checkpoint when it names another file, and the run ends
// normally, its logs untouched. A higher --steps or --epochs trains on instead.
int Training::nothing_to_train() {
  progress.emplace(last, first, comm.rank() != 0);  // silent: no step; save_resumable's reports
  if (!same_file(asked.save, asked.resume)) {
    if (const std::optional<int> diverged = save_resumable(asked.save, run.save, last)) {
      return *diverged;
    }
  }
  comm.barrier();  // no rank reports success before rank 0 has written its checkpoint
  if (comm.rank() != 0) return 0;
  std::cout << run.resume << " already finished step " << first << " of " << total
            << "; nothing to train (raise --steps or --epochs to train more)\n";
  if (run.json) print_json_summary(NAN, NAN, 0);  // NaN: JSON's null
  return 0;
}

// --patience: the run ends after `steps` steps, normally (--save written, the summary printed).
void Training::stop_early(int64_t steps) {
  progress->message("early stop after step " + std::to_string(steps) + ": the val loss has not " +
                    "improved for " + std::to_string(run.patience) + " evaluations (best " +
                    number(validation.best_loss) + " after step " +
                    std::to_string(validation.best_step) + ")");
  last = steps;
}

// After the last step: the progress bar ends, and the trace and the profiler stop recording
// (the save that follows is not part of any step).
void Training::stop_recording() {
  report_gradient_health();
  progress->finish();
  if (trace) {
    trace_json = trace->trace_json();
    trace_steps_kept = trace->steps_kept();
    trace.reset();  // out of the seam before the profiler ends
  }
  profiler.reset();
}

// After the checkpoint: the logs close, the trace is written and the per-op profile printed.
void Training::finish_outputs() {
  if (log) log->close();
  if (grad_stats) grad_stats->close();
  if (!run.profile_trace.empty()) write_trace_file();
  if (run.profile) {
    std::cerr << "per-op profile of " << last - first << " steps (forward rows time the gap "
              << "since the previous op, see runtime/profiler.h):\n"
              << format_profile(profile_results(), 30);
  }
}

// --profile-trace: the steps the recorder kept.
void Training::write_trace_file() {
  write_file_atomically(run.profile_trace, trace_json, "--profile-trace");
  std::fprintf(stderr, "wrote %s: %lld steps (schedule: %s); open it in ui.perfetto.dev or "
               "chrome://tracing\n", run.profile_trace.c_str(),
               static_cast<long long>(trace_steps_kept), run.profile_schedule.describe().c_str());
}

// --save: the resumable checkpoint after the last step.
std::optional<int> Training::save_final() { return save_resumable(asked.save, run.save, last); }

// The resumable checkpoint after `steps` steps, when `asked_path` (the path as typed) is not
// empty: every rank checks the weights (the same weights everywhere), and the one whose `path`
// (its outputs_of_rank's) is not empty, rank 0, writes them; the exit code when they hold NaN/Inf.
std::optional<int> Training::save_resumable(const std::string& asked_path, const std::string& path,
                                            int64_t steps) {
  if (asked_path.empty()) return std::nullopt;
  // The last update can overflow the weights even when every loss was finite: a checkpoint
  // that eval, sample and --resume would refuse is never written.
  nn::NamedTensors state = model->state_dict();
  const nn::NamedTensors optimizer_state = optimizer->state();
  for (const nn::NamedTensors* tensors : {&std::as_const(state), &optimizer_state}) {
    const std::string bad = first_non_finite(*tensors);
    if (!bad.empty()) {
      return diverged(*progress, steps, "tensor '" + bad + "' holds NaN/Inf values");
    }
  }
  if (!path.empty()) {
    save_checkpoint(path, {.config = config, .data_state = data_state, .model = std::move(state),
                           .optimizer = optimizer_state, .step = steps, .rng = rng_state(),
                           .scaler = scaler->state(), .skipped_steps = skipped_steps,
                           .validation = validation});
  }
  return std::nullopt;
}

// Rank 0's report: the gradient sync's share of the time, the summary line on stdout, and --json's.
void Training::print_summary(int64_t peak_bytes) const {
  const int64_t steps_run = last - first;
  const double train_loss = recent_count > 0 ? recent_loss_sum / recent_count : NAN;
  const double ms_per_step = steps_run > 0 ? total_ms / steps_run : 0;
  if (data_parallel) {
    const dist::SyncStats& sync = gradient_sync->stats();
    std::fprintf(stderr, "data parallel: %.3g s of %.3g s in gradient allreduce, %.3g s of it "
                 "after backward (%lld buckets, %lld started during backward, %.3g MB per rank)\n",
                 sync.seconds, total_ms / 1000, sync.exposed_seconds,
                 static_cast<long long>(sync.calls), static_cast<long long>(sync.early_calls),
                 sync.bytes / 1e6);
  }
  std::cout << "trained " << steps_run << " steps (" << last << "/" << total << "): train loss "
            << number(train_loss);
  if (val.examples > 0) {
    std::cout << ", val loss " << number(val.loss);
    if (val.accuracy) std::cout << ", val accuracy " << number(*val.accuracy);
  }
  std::cout << ", " << number(ms_per_step) << " ms/step, peak " << peak_bytes << " bytes\n";
  if (run.json) print_json_summary(train_loss, ms_per_step, peak_bytes);
}

// --json: the summary as one JSON object, the last line on stdout.
void Training::print_json_summary(double train_loss, double ms_per_step, int64_t peak_bytes) const {
  const nlohmann::json val_loss = val.examples > 0 ? nlohmann::json(val.loss) : nlohmann::json();
  nlohmann::json summary = {{"task", config.task}, {"steps", last}, {"train_loss", train_loss},
                            {"val_loss", val_loss}, {"ms_per_step", ms_per_step},
                            {"peak_bytes", peak_bytes}, {"amp", config.amp},
                            {"loss_scale", scaler->get_scale()}, {"skipped_steps", skipped_steps}};
  if (task->classification()) {
    summary["val_accuracy"] = val.accuracy ? nlohmann::json(*val.accuracy) : nlohmann::json();
  }
  std::cout << summary.dump() << "\n";
}

// The training run; `setup_done` is set once every rank has read its data and built its model
// (distributed/job.h: errors before that point are voted on, so that all ranks stop together).
int train_ranks(const TrainRun& asked, dist::Communicator& comm, bool& setup_done) {
  Training training(asked, comm);
  training.resolve_config();
  training.build_model();
  training.plan_steps();
  const dist::RunDefinition definition = training.definition();
  // Every rank has its data, model and optimizer: vote, so that a failure on one stops them all;
  // then check that all of them run the same job (distributed/job.h), before anything is written.
  dist::setup_succeeded(comm);
  dist::check_ranks_agree(comm, definition);
  if (!training.run.save_init.empty()) training.save_initial_weights();
  if (training.resuming) set_rng_state(training.resumed.rng);  // dropout continues where it stopped
  if (training.first == training.last) return training.nothing_to_train();  // a finished run
  training.open_logs();
  dist::setup_succeeded(comm);  // and rank 0 opened its logs
  setup_done = true;
  training.start_gradient_sync();
  training.announce_run();
  training.start_profiling();
  training.announce_data_parallel();
  if (const std::optional<int> stopped = training.train_steps()) return *stopped;  // diverged
  // The checkpoint first, the diagnostics after: a trace that cannot be written never costs the
  // trained model.
  training.stop_recording();
  const int64_t peak_bytes = allocator_stats().peak_bytes - training.bytes_before;
  if (const std::optional<int> stopped = training.save_final()) return *stopped;  // diverged
  training.finish_outputs();
  comm.barrier();  // no rank reports success before rank 0 has written its checkpoint
  if (comm.rank() == 0) training.print_summary(peak_bytes);
  return 0;
}

// A resumed run saves: without --save, back to its --resume file, so that the command a stopped
// run prints ("tapegrad train --resume ck.st") trains on and keeps what it trained.
TrainRun with_default_save(const TrainRun& asked) {
  TrainRun run = asked;
  if (run.save.empty()) run.save = run.resume;
  return run;
}

}  // namespace

int train(const TrainRun& asked) {
  const TrainRun run = with_default_save(asked);
  dist::Communicator& comm = dist::world();
  bool setup_done = false;
  try {
    return train_ranks(run, comm, setup_done);
  } catch (const dist::JobStopped&) {
    throw;
  } catch (const std::exception& error) {
    if (setup_done || comm.size() == 1) throw;
    dist::setup_failed(comm, error.what());  // every rank stops, the first failing one reports
  }
}

}  // namespace tg::train
