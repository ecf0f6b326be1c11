// `tapegrad bench`: times training steps (forward + backward + Adam step) of fixed workloads on
// random data, and reports the median ms per step, tokens/s, achieved GFLOP/s and the
// allocator's peak bytes during one step. bench/torch_ref.py runs the same workloads in PyTorch;
// bench/run.sh compares the two.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cli/bench_attention_scaling.h"
#include "tapegrad/cli/bench_charlm.h"
#include "tapegrad/cli/bench_data_parallel.h"
#include "tapegrad/cli/bench_gemm_i8.h"
#include "tapegrad/cli/bench_generate.h"
#include "tapegrad/cli/bench_int8.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/threads.h"
#include "tapegrad/runtime/trace.h"
#include "tapegrad/train/flag_scope.h"
#include "tapegrad/train/profile_schedule_flag.h"
#include "tapegrad/train/train_step.h"

namespace tg::cli {
namespace {

const char* const kWorkloads =
    "textcls-small, textcls-mid, timeseries, attn-long, charlm, sgemm, attn-scaling, gemm-i8, "
    "generate";

// The precision the steps run in: f32, or the forward under autocast to f16/bf16 (f16 with loss
// scaling, as `tapegrad train --amp`). Shared by a workload's step so that it can be switched.
struct Precision {
  DType compute = DType::f32;  // f32: autocast off
  GradScaler scaler{GradScalerOptions{.enabled = false}};
  std::function<void()> begin_step = nullptr;        // under mpirun: cli/bench_data_parallel.h
  std::function<void()> reduce_gradients = nullptr;
};

// One workload, ready to run: `step` does one full step; `set_fused` picks the attention path.
struct Workload {
  std::string description;
  int64_t tokens_per_step = 0;
  double flops_per_step = 0;
  std::function<void()> step;
  std::function<void(bool)> set_fused;
  std::vector<Tensor> params;  // what data-parallel runs average (the training workloads)
  int64_t parameter_count = 0;  // the model's parameters (elements), 0 for sgemm; --json prints it
  std::shared_ptr<Precision> precision = std::make_shared<Precision>();
};

// FLOPs, counted analytically from the GEMMs (what every framework must do; not counted: the
// embedding, softmax, layer norm, elementwise ops, the loss and Adam, all O(activations) or
// O(params)):
//   a GEMM [m, k] x [k, n] costs 2 m n k forward; its backward is two GEMMs of the same size
//   (dA = dC B^T, dB = A^T dC), so forward + backward = 3 x forward.
//   Linear(in, out) on R rows:                      2 R in out
//   attention, all heads, B items of S queries and S keys, hidden D = heads x head_dim:
//     Q K^T 2 B S S D  +  P V 2 B S S D  = 4 B S^2 D; a causal mask halves it (the useful half;
//     the fused kernel skips the key blocks above the diagonal).
//   step FLOPs = 3 x (sum of the forward GEMM FLOPs above).
double linear_flops(double rows, double in, double out) { return 2 * rows * in * out; }
double attention_flops(double batch, double seq, double hidden, bool causal) {
  return 4 * batch * seq * seq * hidden * (causal ? 0.5 : 1.0);
}
double mha_flops(double batch, double seq, double hidden, bool causal) {  // q, k, v, o + attention
  return 4 * linear_flops(batch * seq, hidden, hidden) +
         attention_flops(batch, seq, hidden, causal);
}

std::vector<int64_t> random_ints(int64_t count, int64_t high, std::mt19937_64& gen) {
  std::uniform_int_distribution<int64_t> pick(0, high - 1);
  std::vector<int64_t> values(count);
  for (int64_t& v : values) v = pick(gen);
  return values;
}

// The elements of `params` (torch_ref.py prints the same count for its model).
int64_t count_elements(const std::vector<Tensor>& params) {
  int64_t total = 0;
  for (const Tensor& p : params) total += p.numel();
  return total;
}

// A training step of model -> loss -> backward -> Adam.step -> zero_grad, in `precision`: the
// step `tapegrad train` runs (train/train_step.h), without clipping.
template <typename Loss>
std::function<void()> training_step(std::shared_ptr<Adam> adam, Loss loss,
                                    std::shared_ptr<Precision> precision) {
  return [adam, loss, precision] {
    if (precision->begin_step) precision->begin_step();
    train::train_step(loss, *adam, precision->scaler,
                      {.autocast = precision->compute,
                       .reduce_gradients = precision->reduce_gradients});
  };
}

// TextClassifier with a single MHA (layers 0), cross_entropy. Sequence b has length
// seq - (7 b mod seq/2): padding on the keys, as real batches have (torch_ref.py uses the same).
Workload text_classifier(int64_t vocab, int64_t dim, int64_t heads, int64_t batch, int64_t seq,
                         int64_t classes) {
  nn::ModelConfig config;
  config.dim = dim;
  config.heads = heads;
  config.layers = 0;
  config.max_len = std::max<int64_t>(seq, 512);
  auto model = std::make_shared<nn::TextClassifier>(vocab, classes, config);
  auto adam = std::make_shared<Adam>(model->parameters(), 1e-3);
  std::mt19937_64 gen(1234);
  const Tensor tokens = from_indices(random_ints(batch * seq, vocab, gen), {batch, seq});
  const Tensor targets = from_indices(random_ints(batch, classes, gen), {batch});
  std::vector<int64_t> lengths(batch);
  for (int64_t b = 0; b < batch; ++b) lengths[b] = seq - (7 * b) % std::max<int64_t>(seq / 2, 1);

  Workload w;
  w.description = "TextClassifier vocab " + std::to_string(vocab) + ", dim " + std::to_string(dim) +
                  ", " + std::to_string(heads) + " heads, single MHA, " + std::to_string(classes) +
                  " classes; batch " + std::to_string(batch) + " x seq " + std::to_string(seq) +
                  "; cross_entropy, Adam";
  w.tokens_per_step = batch * seq;
  w.flops_per_step = 3 * (mha_flops(batch, seq, dim, false) + linear_flops(batch, dim, classes));
  w.step = training_step(
      adam, [=] { return cross_entropy(model->forward(tokens, lengths), targets); }, w.precision);
  w.set_fused = [model](bool fused) { model->mha->use_fused = fused; };
  w.params = model->parameters();
  w.parameter_count = count_elements(w.params);
  return w;
}

// TimeSeriesModel (one MHA), mse_loss.
Workload time_series() {
  const int64_t inputs = 8, dim = 128, heads = 8, batch = 64, window = 64, horizon = 16;
  nn::ModelConfig config;
  config.dim = dim;
  config.heads = heads;
  config.layers = 1;
  auto model = std::make_shared<nn::TimeSeriesModel>(inputs, horizon, config);
  auto adam = std::make_shared<Adam>(model->parameters(), 1e-3);
  const Tensor x = randn({batch, window, inputs});
  const Tensor y = randn({batch, horizon});

  Workload w;
  w.description = "TimeSeriesModel D 8, dim 128, 8 heads, single MHA; batch 64 x window 64, "
                  "horizon 16; mse_loss, Adam";
  w.tokens_per_step = batch * window;
  w.flops_per_step = 3 * (linear_flops(batch * window, inputs, dim) +
                          mha_flops(batch, window, dim, false) + linear_flops(batch, dim, horizon));
  w.step = training_step(adam, [=] { return mse_loss(model->forward(x), y); }, w.precision);
  w.set_fused = [model](bool fused) { model->mha->use_fused = fused; };
  w.params = model->parameters();
  w.parameter_count = count_elements(w.params);
  return w;
}

// MultiHeadAttention alone, causal, forward + backward from a fixed random output gradient.
Workload long_attention() {
  const int64_t batch = 1, seq = 2048, dim = 256, heads = 8;
  auto mha = std::make_shared<nn::MultiHeadAttention>(dim, heads);
  Tensor x = randn({batch, seq, dim});
  x.requires_grad_();
  const Tensor grad_out = randn({batch, seq, dim});
  const std::vector<Tensor> params = mha->parameters();

  Workload w;
  w.description = "MultiHeadAttention dim 256, 8 heads, causal; batch 1 x seq 2048; "
                  "forward + backward only";
  w.tokens_per_step = batch * seq;
  w.flops_per_step = 3 * mha_flops(batch, seq, dim, true);
  w.step = [=, precision = w.precision] {
    Tensor out;
    {
      const Autocast autocast(precision->compute);
      out = mha->forward(x, Tensor(), /*is_causal=*/true).output;
    }
    out.backward(grad_out.to(out.dtype()));
    x.zero_grad();
    for (const Tensor& p : params) p.zero_grad();
  };
  w.set_fused = [mha](bool fused) { mha->use_fused = fused; };
  w.parameter_count = count_elements(params);
  return w;
}

// The recipes' character LM (nn::CharLM): 2 pre-norm layers, dim 128, 4 heads, the MLP of 4 x dim,
// dropout 0, sinusoidal positions; batch 32 x context 128 over 100 symbols, causal, cross_entropy
// over every position (the step `tapegrad train --task charlm` runs).
Workload char_lm() {
  const int64_t vocab = kBenchCharLMVocab, batch = 32, context = 128;
  const nn::ModelConfig config = bench_charlm_config(context);
  const int64_t dim = config.dim, layers = config.layers;
  auto model = std::make_shared<nn::CharLM>(vocab, config);
  auto adam = std::make_shared<Adam>(model->parameters(), 1e-3);
  std::mt19937_64 gen(1234);
  const Tensor tokens = from_indices(random_ints(batch * context, vocab, gen), {batch, context});
  const Tensor targets = from_indices(random_ints(batch * context, vocab, gen), {batch, context});
  const double rows = batch * context;
  const double layer_flops = mha_flops(batch, context, dim, true) +
                             linear_flops(rows, dim, 4 * dim) + linear_flops(rows, 4 * dim, dim);

  Workload w;
  w.description = "CharLM vocab 100, 2 layers, dim 128, 4 heads, MLP 512, sinusoidal, causal; "
                  "batch 32 x context 128; cross_entropy at every position, Adam";
  w.tokens_per_step = batch * context;
  w.flops_per_step = 3 * (layers * layer_flops + linear_flops(rows, dim, vocab));
  w.step = training_step(
      adam, [=] { return cross_entropy(model->forward(tokens), targets); }, w.precision);
  w.set_fused = [model](bool fused) {
    for (const auto& layer : model->layers) layer->attn->use_fused = fused;
  };
  w.params = model->parameters();
  w.parameter_count = count_elements(w.params);
  return w;
}

// The sizes of the sgemm workload's product C [m, n] = A [m, k] B [k, n].
struct GemmShape {
  int64_t m = 1024, k = 1024, n = 1024;
};

// One f32 product C = A B, no tape: the machine's GEMM peak as tapegrad reaches it (OpenBLAS,
// split across the threads as every product is). At 1024^3 (the default) it is the yardstick for
// the training workloads' GFLOP/s; --shape times the shapes a model's products have.
Workload sgemm(const GemmShape& shape) {
  const Tensor a = randn({shape.m, shape.k}), b = randn({shape.k, shape.n});
  Workload w;
  w.description = "C = A B, f32 " + std::to_string(shape.m) + " x " + std::to_string(shape.k) +
                  " x " + std::to_string(shape.n) + " (M x K x N), no autograd";
  w.tokens_per_step = 0;
  w.flops_per_step = 2.0 * static_cast<double>(shape.m) * shape.k * shape.n;
  w.step = [=] {
    const NoGrad no_grad;
    const Tensor c = matmul(a, b);
  };
  w.set_fused = [](bool) {};
  return w;
}

Workload make_workload(const std::string& name, const GemmShape& gemm_shape) {
  manual_seed(0);
  if (name == "textcls-small") return text_classifier(1000, 64, 4, 32, 32, 4);
  if (name == "textcls-mid") return text_classifier(8000, 256, 8, 16, 128, 4);
  if (name == "timeseries") return time_series();
  if (name == "attn-long") return long_attention();
  if (name == "charlm") return char_lm();
  if (name == "sgemm") return sgemm(gemm_shape);
  fail("unknown workload '", name, "' (known: ", kWorkloads, ")");
}

// Peak bytes of one step: the allocator's peak after reset_allocator_stats(), and what was live
// before the step (parameters, optimizer state, data).
struct StepMemory {
  int64_t peak = 0, before = 0;
};
StepMemory measure_step_memory(const Workload& w) {
  const Device device = default_device();  // where the workload's tensors live
  reset_allocator_stats(device);
  const int64_t before = allocator_stats(device).current_bytes;
  w.step();
  return {allocator_stats(device).peak_bytes, before};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string mib(int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

// ---- The command line ----

constexpr int64_t kMaxBenchSteps = 100'000;  // a median of more says nothing new

// What the command line asked for: the option values, and which of them were given.
struct BenchOptions {
  std::string workload, path = "fused", amp = "none", device = "cpu", trace_path, schedule_text;
  std::string shape_text;  // --shape, parsed into gemm_shape
  int threads = 0, steps = 20, warmup = 3;
  int64_t max_seq = AttentionScalingOptions{}.max_seq;
  bool json = false, profile = false, tracing = false, plain_kernels = false, int8 = false;
  bool textbook = false;  // --textbook (autograd/textbook.h)
  bool steps_given = false, warmup_given = false, max_seq_given = false, schedule_given = false;
  ProfileSchedule schedule;  // --profile-schedule, parsed
  GemmShape gemm_shape;             // --shape, parsed (sgemm)
};

// The options, writing into `o` (and --tf32 into math_modes()).
boost::program_options::options_description describe_options(BenchOptions& o) {
  namespace po = boost::program_options;
  const std::string trace_help =
      "write a Chrome trace of the timed steps (JSON for ui.perfetto.dev or chrome://tracing), "
      "as tapegrad train --profile-trace: op slices with input shapes and bytes, a memory "
      "counter; up to " + std::to_string(kDefaultMaxTraceEvents) + " events";
  po::options_description options(
      "tapegrad bench: median ms per training step (forward + backward + Adam), tokens/s,\n"
      "GFLOP/s (GEMM FLOPs counted analytically) and peak allocator bytes of one step");
  options.add_options()("help,h", "show this help")
      ("workload", po::value(&o.workload)->required(),
       "textcls-small | textcls-mid | timeseries | attn-long | charlm (a training step of the "
       "character LM of docs/cli.md: 2 layers, dim 128, context 128) | sgemm (one f32 GEMM, 1024^3 "
       "unless --shape: the machine's GEMM peak) | attn-scaling (the fused attention op, full "
       "and local:256, and reformer:32,2 (taped ops), causal, "
       "at S = 1024 ... 16384: one row each) | gemm-i8 (CPU: the int8 product and quantized_linear "
       "against f32 on the same shapes, fast paths and plain loops: ms, GOP/s) | generate "
       "(greedy generation from the charlm model, batch 1, with and without the KV cache, "
       "at contexts 128, 512, 2048: tokens/s and peak bytes)")
      ("shape", po::value(&o.shape_text), "sgemm: MxKxN, the product C [M, N] = A [M, K] B [K, N] "
                                           "(default 1024x1024x1024)")
      ("max-seq", po::value(&o.max_seq), "attn-scaling: the longest S (default 16384); generate: "
                                         "the longest context (default 2048)")
      ("threads", po::value(&o.threads)->default_value(o.threads), kThreadsHelp)
      ("steps", po::value(&o.steps), "timed steps; the median is reported (default 20)")
      ("warmup", po::value(&o.warmup), "untimed steps first (default 3)")
      ("path", po::value(&o.path), "attention path: fused (default) or explicit (need_weights' "
                                   "softmax(QK^T)V, the readable reference)")
      ("amp", po::value(&o.amp), "mixed precision: none (default) | fp16 | bf16; also reports the "
                                 "peak bytes without it")
      ("device", po::value(&o.device), "cpu (default) | cuda | cuda:N")
      ("tf32", po::bool_switch(&math_modes().allow_tf32),
       "cuda: let f32 GEMMs use TF32 tensor cores")
      ("plain-kernels", "CPU: run every kernel's plain loop instead of its vectorised fast path "
                        "(runtime/features.h), to see what the fast paths pay")
      ("int8", "inference only: f32 vs int8 dynamic vs int8 static forwards of a textcls workload "
               "or charlm (ms per batch, loss, model bytes; docs/quantization.md; "
               "TAPEGRAD_INT8_KERNEL=avx2|vnni|plain picks the int8 kernels)")
      ("json", "print one JSON line: workload, threads, ms_per_step, tokens_per_s, gflops, "
               "peak_bytes, parameters")
      ("profile", "print the per-op profile of the timed steps (to stderr with --json)")
      ("profile-trace", po::value(&o.trace_path), trace_help.c_str())
      ("profile-schedule", po::value(&o.schedule_text),
       "wait,warmup,active[,repeat] over the timed steps, as tapegrad train --profile-schedule");
  add_textbook_option(options, o.textbook);
  return options;
}

// --help: the options, then examples.
void print_help(const boost::program_options::options_description& options) {
  std::cout << options
            << "\nexamples:\n  tapegrad bench --workload textcls-small\n"
               "  tapegrad bench --workload attn-long --threads 2 --steps 5\n"
               "  tapegrad bench --workload textcls-mid --json\n"
               "  tapegrad bench --workload textcls-mid --int8\n"
               "  tapegrad bench --workload timeseries --profile\n"
               "  tapegrad bench --workload textcls-small --textbook --steps 3 --profile\n"
               "  tapegrad bench --workload charlm --threads 1\n"
               "  tapegrad bench --workload textcls-small --steps 5 --profile-trace bench.json\n"
               "  tapegrad bench --workload attn-long --device cuda\n"
               "  tapegrad bench --workload attn-scaling --max-seq 4096\n"
               "  tapegrad bench --workload generate --threads 1 --max-seq 512\n"
               "  tapegrad bench --workload gemm-i8 --threads 1\n"
               "  tapegrad bench --workload sgemm --threads 1 --shape 4096x128x512\n";
}

// Which switches and options were given.
void read_given(const boost::program_options::variables_map& vm, BenchOptions& o) {
  o.json = vm.count("json") > 0;
  o.profile = vm.count("profile") > 0;
  o.tracing = vm.count("profile-trace") > 0;
  o.plain_kernels = vm.count("plain-kernels") > 0;
  o.int8 = vm.count("int8") > 0;
  o.steps_given = vm.count("steps") > 0;
  o.warmup_given = vm.count("warmup") > 0;
  o.max_seq_given = vm.count("max-seq") > 0;
  o.schedule_given = vm.count("profile-schedule") > 0;
}

constexpr int64_t kMaxGemmSide = 65536;             // each of M, K and N at most
constexpr int64_t kMaxGemmElements = int64_t(1) << 30;  // in A, B and C together: 4 GiB of f32

// --shape MxKxN: three whole numbers in [1, kMaxGemmSide] joined by 'x' (each read strictly, as
// io/strict_numbers.h reads every number a user types), whose three matrices hold at most
// kMaxGemmElements.
GemmShape parse_gemm_shape(const std::string& text) {
  std::vector<std::string> fields;
  std::istringstream in(text);
  for (std::string field; std::getline(in, field, 'x');) fields.push_back(field);
  if (!text.empty() && text.back() == 'x') fields.emplace_back();  // "1x1x" has an empty third
  TG_CHECK(fields.size() == 3, "--shape must be MxKxN (e.g. 4096x128x512), got '", text, "'");
  std::vector<int64_t> sides;
  for (const std::string& field : fields) {
    const uint64_t side = train::parse_uint64(field, "--shape (MxKxN)");
    TG_CHECK(side >= 1 && side <= kMaxGemmSide, "--shape ", text,
             ": each of M, K and N must be in [1, ", kMaxGemmSide, "], got ", side);
    sides.push_back(static_cast<int64_t>(side));
  }
  const GemmShape shape{sides[0], sides[1], sides[2]};
  const int64_t elements = shape.m * shape.k + shape.k * shape.n + shape.m * shape.n;
  TG_CHECK(elements <= kMaxGemmElements, "--shape ", text, ": A, B and C would hold ", elements,
           " elements, over the limit of ", kMaxGemmElements, " (4 GiB of f32)");
  return shape;
}

// The checks every workload shares, then the --profile-schedule and the trace's output path
// (before the work).
void check_options(BenchOptions& o) {
  const std::string known = std::string(", ") + kWorkloads + ", ";
  TG_CHECK(known.find(", " + o.workload + ", ") != std::string::npos, "unknown workload '", o.workload, "' (known: ", kWorkloads, ")");
  TG_CHECK(o.steps >= 1 && o.steps <= kMaxBenchSteps, "--steps must be in [1, ", kMaxBenchSteps,
           "], got ", o.steps);
  TG_CHECK(o.warmup >= 0 && o.warmup <= kMaxBenchSteps, "--warmup must be in [0, ", kMaxBenchSteps,
           "], got ", o.warmup);
  TG_CHECK(o.path == "fused" || o.path == "explicit", "--path must be fused or explicit, got '",
           o.path, "'");
  TG_CHECK(o.amp == "none" || o.amp == "fp16" || o.amp == "bf16",
           "--amp must be none, fp16 or bf16, got '", o.amp, "'");
  TG_CHECK(o.tracing || !o.schedule_given, "--profile-schedule needs --profile-trace");
  if (o.schedule_given) {
    o.schedule = train::parse_profile_schedule(o.schedule_text, "--profile-schedule");
  }
  if (!o.shape_text.empty()) o.gemm_shape = parse_gemm_shape(o.shape_text);
  if (o.tracing) check_output_path(o.trace_path, "--profile-trace");  // before the work
}

// Which flags apply to the chosen workload (train/flag_scope.h): --path and --amp to the
// training steps of a model, the profilers to timed training steps, the CPU-only benches'
// --device to the CPU, --plain-kernels to the CPU kernels of any bench but gemm-i8 (which runs
// both), --max-seq to attn-scaling, --int8 to the textcls workloads and charlm, --tf32 to CUDA.
std::vector<train::FlagScope> bench_flag_scopes(const BenchOptions& o) {
  const std::string workload = "--workload " + o.workload;
  const bool own_bench =
      o.workload == "attn-scaling" || o.workload == "gemm-i8" || o.workload == "generate";
  const bool model_step = !own_bench && o.workload != "sgemm";
  const bool on_cpu = parse_device(o.device) == kCPU;
  const std::vector<std::string> profilers = {"profile", "profile-trace", "profile-schedule"};
  return {{{"max-seq"}, o.workload == "attn-scaling" || o.workload == "generate", workload},
          {{"shape"}, o.workload == "sgemm", workload},
          {{"int8"}, o.workload == "textcls-small" || o.workload == "textcls-mid" ||
                         o.workload == "charlm", workload},
          {{"path", "amp"}, model_step, workload},
          {{"path", "amp"}, !o.int8, "--int8 (f32 and int8 forwards on the fused path)"},
          {profilers, !own_bench, workload},
          {profilers, !o.int8, "--int8"},
          {{"device"}, on_cpu || o.workload != "gemm-i8", workload},
          {{"device"}, on_cpu || !o.int8, "--int8 (a CPU bench)"},
          {{"plain-kernels"}, o.workload != "gemm-i8", workload + " (it times both)"},
          {{"plain-kernels"}, on_cpu, "--device " + o.device},
          {{"textbook"}, o.workload != "gemm-i8", workload + " (it times fast and plain kernels)"},
          {{"textbook"}, o.workload != "attn-scaling",
           workload + " (it times the fused kernel up to 16384 positions; the reference loops "
           "would take hours)"},
          {{"path"}, !o.textbook, "--textbook (attention written with ops: the explicit path)"},
          train::tf32_scope(o.device)};
}

// The command line, checked; nullopt after --help.
std::optional<BenchOptions> parse_options(const Args& args) {
  namespace po = boost::program_options;
  BenchOptions o;
  const po::options_description options = describe_options(o);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    print_help(options);
    return std::nullopt;
  }
  read_given(vm, o);
  check_options(o);
  train::check_flags_apply(given_options(vm), bench_flag_scopes(o));
  return o;
}

// ---- The special workloads, each its own bench (cli/bench_*.h) ----

// --workload attn-scaling: the fused op at growing S; --steps and --warmup only when given.
AttentionScalingOptions attention_scaling_options(const BenchOptions& o) {
  TG_CHECK(!o.max_seq_given || (o.max_seq >= 1 && o.max_seq <= 16384),
           "--max-seq must be in [1, 16384], got ", o.max_seq);
  AttentionScalingOptions scaling{.max_seq = o.max_seq, .json = o.json};
  if (o.steps_given) scaling.steps = o.steps;
  if (o.warmup_given) scaling.warmup = o.warmup;
  return scaling;
}

// --workload gemm-i8: the CPU's int8 and f32 products.
GemmI8BenchOptions gemm_i8_options(const BenchOptions& o) {
  GemmI8BenchOptions gemm_options{.json = o.json};
  if (o.steps_given) gemm_options.steps = o.steps;
  if (o.warmup_given) gemm_options.warmup = o.warmup;
  return gemm_options;
}

// --workload generate: tokens/s with and without the KV cache; --max-seq caps the context.
GenerateBenchOptions generate_options(const BenchOptions& o) {
  TG_CHECK(!o.max_seq_given || (o.max_seq >= 128 && o.max_seq <= 2048), "--workload generate: "
           "--max-seq must be in [128, 2048], got ", o.max_seq);
  GenerateBenchOptions generate{.max_context = o.max_seq_given ? o.max_seq : 2048, .json = o.json};
  if (o.steps_given) generate.steps = o.steps;
  if (o.warmup_given) generate.warmup = o.warmup;
  return generate;
}

// --int8: CPU f32 vs int8 forwards of the textcls workload.
Int8BenchOptions int8_options(const BenchOptions& o) {
  Int8BenchOptions int8{.workload = o.workload, .json = o.json};
  if (o.steps_given) int8.steps = o.steps;
  if (o.warmup_given) int8.warmup = o.warmup;
  return int8;
}

// ---- A training workload (or sgemm): warm-up, memory, timing ----

// The peak bytes of one step in f32, and in the --amp precision (the same when none).
struct AmpMemory {
  StepMemory f32, asked;
};

// Peak bytes in f32 first (the comparison for --amp), then the run in the asked precision:
// the warm-up steps, the switch to --amp and its own warm-up, one measured step each.
AmpMemory warm_up_and_measure_memory(Workload& w, const BenchOptions& o) {
  for (int i = 0; i < std::max(o.warmup, 1); ++i) w.step();
  const StepMemory f32_memory = measure_step_memory(w);
  if (o.amp == "none") return {f32_memory, f32_memory};
  w.precision->compute = o.amp == "fp16" ? DType::f16 : DType::bf16;
  w.precision->scaler = GradScaler(GradScalerOptions{.enabled = o.amp == "fp16"});
  for (int i = 0; i < o.warmup; ++i) w.step();
  return {f32_memory, measure_step_memory(w)};
}

// --profile-trace: the recorder of the timed steps.
std::unique_ptr<TraceRecorder> start_trace(const BenchOptions& o, Device device) {
  return std::make_unique<TraceRecorder>(TraceOptions{
      .schedule = o.schedule, .device = device, .process_name = "tapegrad bench",
      .metadata = {{"command", "bench"}, {"workload", o.workload}, {"path", o.path},
                   {"amp", o.amp}}});
}

// Writes the trace's events to --profile-trace, the recorder ended first.
void write_bench_trace(std::unique_ptr<TraceRecorder> trace, const BenchOptions& o) {
  const std::string trace_json = trace->trace_json();
  const int64_t steps_written = trace->steps_kept();
  trace.reset();  // out of the seam before the profiler ends
  write_file_atomically(o.trace_path, trace_json, "--profile-trace");
  std::fprintf(stderr, "wrote %s: %lld steps (schedule: %s)\n", o.trace_path.c_str(),
               static_cast<long long>(steps_written), o.schedule.describe().c_str());
}

// The timed steps' ms each, under the --profile profiler and the --profile-trace recorder.
std::vector<double> time_steps(const Workload& w, const BenchOptions& o, Device device,
                               Kernels& device_kernels, train::BenchDataParallel& data_parallel) {
  std::vector<double> ms(o.steps);
  std::unique_ptr<Profiler> profiler = o.profile ? std::make_unique<Profiler>() : nullptr;
  // After the profiler: the trace passes every event on to it (runtime/trace.h).
  std::unique_ptr<TraceRecorder> trace = o.tracing ? start_trace(o, device) : nullptr;
  data_parallel.start_timing();
  for (int i = 0; i < o.steps; ++i) {
    if (trace) trace->begin_step(i + 1);
    const auto start = std::chrono::steady_clock::now();
    w.step();
    device_kernels.synchronize();  // a GPU step has finished only when its kernels have
    ms[i] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count();
    if (trace) trace->end_step();
  }
  if (trace) write_bench_trace(std::move(trace), o);
  return ms;
}

// What the run measured: the timed steps, the figures made of them, the peak bytes.
struct Measurements {
  std::vector<double> ms;
  double ms_per_step = 0, tokens_per_s = 0, gflops = 0;
  AmpMemory memory;
  nlohmann::json data_parallel;  // empty unless under mpirun
  int64_t parameter_count = 0;   // the workload's
};

// ---- The report ----

// --json: one line.
void print_json(const BenchOptions& o, Device device, const Measurements& m) {
  nlohmann::json report = {{"workload", o.workload}, {"threads", o.textbook ? 1 : num_threads()},
                           {"ms_per_step", m.ms_per_step}, {"tokens_per_s", m.tokens_per_s},
                           {"gflops", m.gflops}, {"peak_bytes", m.memory.asked.peak},
                           {"path", o.path}, {"amp", o.amp},
                           {"peak_bytes_f32", m.memory.f32.peak},
                           {"device", device_name(device)}, {"tf32", math_modes().allow_tf32},
                           {"plain_kernels", o.plain_kernels}, {"textbook", o.textbook},
                           {"parameters", m.parameter_count}};
  if (!m.data_parallel.empty()) report["data_parallel"] = m.data_parallel;
  std::cout << report.dump() << "\n";
}

// The text report's peak bytes, and with --amp the f32 peak beside them.
void print_memory(const BenchOptions& o, const AmpMemory& memory) {
  std::printf("peak bytes   %lld (%s; %s live before the step)\n",
              static_cast<long long>(memory.asked.peak), mib(memory.asked.peak).c_str(),
              mib(memory.asked.before).c_str());
  if (o.amp != "none") {
    std::printf("amp          %s: peak %lld bytes (%s) vs %lld (%s) in f32\n", o.amp.c_str(),
                static_cast<long long>(memory.asked.peak), mib(memory.asked.peak).c_str(),
                static_cast<long long>(memory.f32.peak), mib(memory.f32.peak).c_str());
  }
}

// attn-long: the memory the fused path saves, one more step on the other path.
void print_fused_saving(const BenchOptions& o, const Workload& w, const StepMemory& memory) {
  w.set_fused(o.path != "fused");
  const StepMemory other = measure_step_memory(w);
  const StepMemory& fused = o.path == "fused" ? memory : other;
  const StepMemory& explicit_path = o.path == "fused" ? other : memory;
  std::printf("fused peak   %lld (%s)\nexplicit peak %lld (%s): %.1fx the fused path's\n",
              static_cast<long long>(fused.peak), mib(fused.peak).c_str(),
              static_cast<long long>(explicit_path.peak), mib(explicit_path.peak).c_str(),
              static_cast<double>(explicit_path.peak) / static_cast<double>(fused.peak));
}

// The text report: the setup, then the figures.
void print_text(const BenchOptions& o, Device device, const Workload& w, const Measurements& m) {
  std::printf("workload     %s\n             %s\n", o.workload.c_str(), w.description.c_str());
  std::printf("device       %s%s\n", device_name(device).c_str(),
              math_modes().allow_tf32 ? " (TF32 allowed)" : "");
  if (o.textbook) {
    std::printf("threads      1 (--textbook: every loop on the calling thread)\n");
  } else {
    std::printf("threads      %d (%s; BLAS single-threaded)\n", num_threads(),
                describe_num_threads().c_str());
  }
  std::printf("attention    %s path\n", o.textbook ? "explicit (--textbook)" : o.path.c_str());
  std::printf("kernels      %s\n",
              o.textbook                  ? "the textbook's: plain loops, reference GEMM, one thread (--textbook)"
              : o.plain_kernels           ? "plain loops (--plain-kernels)"
              : cpu::fast_paths_enabled() ? "fast paths (AVX2 + FMA)"
                                          : "plain loops (no AVX2 + FMA)");
  std::printf("steps        %d timed after %d warm-up\n", o.steps, o.warmup);
  std::printf("ms/step      %.3f median (min %.3f, max %.3f)\n", m.ms_per_step,
              *std::min_element(m.ms.begin(), m.ms.end()),
              *std::max_element(m.ms.begin(), m.ms.end()));
  std::printf("tokens/s     %.0f\n", m.tokens_per_s);
  std::printf("GFLOP/s      %.1f (%.3f GFLOP per step, the GEMMs, counted analytically)\n",
              m.gflops, w.flops_per_step / 1e9);
  train::BenchDataParallel::print(m.data_parallel);
  print_memory(o, m.memory);
  if (o.workload == "attn-long") print_fused_saving(o, w, m.memory.asked);
}

// --profile: the per-op table of the timed steps (to stderr with --json).
void print_profile(const BenchOptions& o) {
  std::ostream& out = o.json ? std::cerr : std::cout;
  out << "\nper-op profile of the " << o.steps << " timed steps (totals; forward rows time the gap "
      << "since the previous op, see runtime/profiler.h):\n"
      << format_profile(profile_results(), 30);
}

// A training workload (or sgemm), data-parallel under mpirun: warm-up and memory, the timed
// steps, then rank 0's report.
int bench_workload(const BenchOptions& o, Device device, Kernels& device_kernels) {
  Workload w = make_workload(o.workload, o.gemm_shape);
  w.set_fused(o.path == "fused");
  train::BenchDataParallel data_parallel(w.params);  // active under mpirun with several processes
  w.precision->begin_step = data_parallel.step_beginner();
  w.precision->reduce_gradients = data_parallel.reducer();
  Measurements m;
  m.parameter_count = w.parameter_count;
  m.memory = warm_up_and_measure_memory(w, o);
  m.ms = time_steps(w, o, device, device_kernels, data_parallel);
  m.ms_per_step = median(m.ms);
  m.tokens_per_s = static_cast<double>(w.tokens_per_step) / (m.ms_per_step / 1e3);
  m.gflops = w.flops_per_step / (m.ms_per_step / 1e3) / 1e9;
  m.data_parallel =
      data_parallel.finish_timing(o.steps, m.ms_per_step, static_cast<double>(w.tokens_per_step));
  if (data_parallel.rank() != 0) return 0;  // rank 0 reports for the job
  if (o.json) {
    print_json(o, device, m);
  } else {
    print_text(o, device, w, m);
  }
  if (o.profile) print_profile(o);
  return 0;
}

}  // namespace

int bench(const Args& args) {
  const std::optional<BenchOptions> parsed = parse_options(args);
  if (!parsed) return 0;  // --help
  const BenchOptions& o = *parsed;
  use_threads_option(o.threads);  // 0: the cores available
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(o.textbook, o.device);
  std::optional<cpu::FastPathsOff> plain_kernels;
  if (o.plain_kernels) plain_kernels.emplace();
  const Device device = parse_device(o.device);
  Kernels& device_kernels = kernels(device);  // an absent device: one clear error here
  const DefaultDeviceScope on_device(device);  // the models and data are made there
  if (o.workload == "attn-scaling") return bench_attention_scaling(attention_scaling_options(o));
  if (o.workload == "gemm-i8") return bench_gemm_i8(gemm_i8_options(o));
  if (o.workload == "generate") return bench_generate(generate_options(o));
  if (o.int8) return bench_int8(int8_options(o));
  return bench_workload(o, device, device_kernels);
}

}  // namespace tg::cli
