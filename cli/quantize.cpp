// `tapegrad quantize`: a trained f32 checkpoint -> an int8 one (nn/quantization.h), whose Linear
// weights are i8 with per-channel f32 scales; eval, sample, plot and analyze load it as any other.
#include <boost/program_options.hpp>
#include <filesystem>
#include <optional>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/sha256.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/config.h"
#include "tapegrad/train/flag_scope.h"
#include "tapegrad/train/tasks.h"

namespace tg::cli {
namespace {

// `batches` batches of the training batch size, spread evenly over the file's examples (a data file
// is often sorted, by label or by time, and the scales must see all of it).
void run_calibration(train::Task& task, int64_t batches, int64_t batch) {
  const int64_t count = task.examples(true);
  TG_CHECK(count > 0, "the calibration data has no examples");
  const int64_t wanted = std::min(count, batches * batch);
  for (int64_t start = 0; start < wanted; start += batch) {
    std::vector<int64_t> ids;
    for (int64_t i = start; i < std::min(wanted, start + batch); ++i) {
      ids.push_back(i * count / wanted);
    }
    task.loss(ids, true);  // the forward pass is what the observers watch; the loss is dropped
  }
}

std::string file_bytes(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? std::string("?") : std::to_string(size);
}


// What the command line asked for, with the mode and the observer parsed.
struct QuantizeOptions {
  std::string load, out, mode_name, calib, observer = "minmax";
  int64_t calib_batches = 8;
  int threads = 0;
  bool textbook = false;
  double percentile = 99.99;
  nn::QuantMode mode = nn::QuantMode::none;
  nn::StaticOptions static_options;
  bool is_static() const { return mode == nn::QuantMode::static_; }
};

// The options, writing into `o`.
boost::program_options::options_description describe_options(QuantizeOptions& o) {
  namespace po = boost::program_options;
  po::options_description options(
      "tapegrad quantize: int8 post-training quantization of a checkpoint's Linear layers\n"
      "(weights per output channel; inputs per row at run time (dynamic) or with scales\n"
      "calibrated on data (static); see docs/quantization.md)");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&o.load), "f32 checkpoint written by tapegrad train --save")
      ("mode", po::value(&o.mode_name), "dynamic | static")
      ("out", po::value(&o.out), "the quantized checkpoint to write (not the --load file)")
      ("calib", po::value(&o.calib), "static: calibration data in the task's format (default: "
                                     "the checkpoint's training data file, its config's data)")
      ("calib-batches", po::value(&o.calib_batches)->default_value(o.calib_batches),
       "static: batches (of the training batch size) to calibrate on")
      ("observer", po::value(&o.observer)->default_value(o.observer),
       "static: minmax (max |x|) | percentile (the --percentile of |x|)")
      ("percentile", po::value(&o.percentile)->default_value(o.percentile, "99.99"),
       "static, --observer percentile: its p, in (0, 100]");
  add_threads_option(options, o.threads);
  add_textbook_option(options, o.textbook);
  return options;
}

// --help: the options, then examples.
void print_help(const boost::program_options::options_description& options) {
  std::cout << options
            << "\nexamples:\n"
               "  tapegrad quantize --load cls.safetensors --mode dynamic "
               "--out cls-int8.safetensors\n"
               "  tapegrad quantize --load cls.safetensors --mode static "
               "--calib data/fortunes.tsv \\\n"
               "      --observer percentile --out cls-int8s.safetensors\n"
               "  tapegrad eval --load cls-int8.safetensors --data data/fortunes.tsv\n";
}

// Checks the options and parses --mode and --observer; then --out, before the work (a bad --out
// is reported first).
void check_options(const boost::program_options::variables_map& vm, QuantizeOptions& o) {
  TG_CHECK(!o.load.empty() && !o.mode_name.empty() && !o.out.empty(),
           "--load, --mode and --out are required");
  o.mode = nn::parse_quant_mode(o.mode_name);
  TG_CHECK(o.mode != nn::QuantMode::none, "--mode must be dynamic or static, got '", o.mode_name,
           "'");
  o.static_options = {.observer = nn::parse_observer(o.observer), .percentile = o.percentile};
  train::check_flags_apply(
      given_options(vm),
      {{{"calib", "calib-batches", "observer", "percentile"}, o.is_static(),
        "--mode " + o.mode_name},
       {{"percentile"}, o.static_options.observer == nn::ObserverKind::percentile,
        "--observer " + o.observer}});
  TG_CHECK(o.calib_batches >= 1 && o.calib_batches <= train::Limits::steps,
           "--calib-batches must be in [1, ", train::Limits::steps, "], got ", o.calib_batches);
  TG_CHECK(o.percentile > 0 && o.percentile <= 100, "--percentile must be in (0, 100], got ",
           o.percentile);
  use_threads_option(o.threads);
  check_distinct_files({{"--load", o.load}, {"--calib", o.calib}}, {{"--out", o.out}});
  check_output_path(o.out, "--out");
}

// The command line, checked; nullopt after --help.
std::optional<QuantizeOptions> parse_options(const Args& args) {
  namespace po = boost::program_options;
  QuantizeOptions o;
  const po::options_description options = describe_options(o);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    print_help(options);
    return std::nullopt;
  }
  check_options(vm, o);
  return o;
}

// --mode static without --calib calibrates on the checkpoint's training data: the file at its
// stored path must still hold the bytes whose SHA-256 train recorded (as --resume checks).
void check_training_data_unchanged(const train::Checkpoint& checkpoint) {
  const nlohmann::json& recorded = checkpoint.data_state.value("sha256", nlohmann::json());
  if (!recorded.is_string()) return;  // saved before checkpoints held the hash
  const std::string& path = checkpoint.config.data;
  const std::string expected = recorded.get<std::string>();
  TG_CHECK(train::sha256_hex(read_regular_file(path, "--calib")) == expected,
           "--mode static: ", path, " is not the data the checkpoint was trained on (its SHA-256 ",
           "differs from ", expected.substr(0, 16), "...); pass the calibration data with --calib");
}

// The --load checkpoint, which must be an f32 one.
train::Checkpoint load_f32_checkpoint(const std::string& load) {
  train::Checkpoint checkpoint = train::load_checkpoint(load);
  TG_CHECK(checkpoint.config.quantization == "none", load, " is already quantized (",
           checkpoint.config.quantization, "): quantize the f32 checkpoint it came from");
  return checkpoint;
}

// The int8 model and what quantizing it found.
struct QuantizedModel {
  nn::QuantizationSummary summary;
  std::unique_ptr<train::Task> task;  // static: the model lives in the calibration task
  std::unique_ptr<nn::Module> model;  // dynamic: the model alone
  nn::Module& module() { return task ? task->model() : *model; }
};

// --mode static: the checkpoint's model in a task on the --calib data, its scales calibrated.
QuantizedModel quantize_static_model(const QuantizeOptions& o, train::Checkpoint& checkpoint) {
  check_distinct_files({{"--calib", o.calib}}, {{"--out", o.out}});  // the default: the training data
  QuantizedModel q;
  q.task = train::make_task(checkpoint.config, o.calib, &checkpoint.data_state,
                            /*whole_file=*/true);
  train::load_model(q.task->model(), checkpoint);
  const int64_t batch = checkpoint.config.batch;
  q.summary = nn::quantize_static(
      q.task->model(), [&] { run_calibration(*q.task, o.calib_batches, batch); },
      o.static_options);
  return q;
}

// --mode dynamic: the model alone, no data file needed.
QuantizedModel quantize_dynamic_model(const train::Checkpoint& checkpoint,
                                      const train::DataState& state) {
  QuantizedModel q;
  q.model = train::make_model(checkpoint.config, state);
  train::load_model(*q.model, checkpoint);
  q.summary = nn::quantize_dynamic(*q.model);
  return q;
}

// Writes the int8 checkpoint to --out: the f32 one's config and data state, the quantized
// weights, the device it was trained on, no optimizer state.
void save_quantized(const QuantizeOptions& o, const train::Checkpoint& checkpoint,
                    const std::string& trained_device, nn::Module& quantized) {
  train::Checkpoint result = checkpoint;
  result.config.quantization = nn::quant_mode_name(o.mode);
  result.config.device = trained_device;
  result.model = quantized.state_dict();
  result.optimizer.clear();  // nothing of an int8 model is trained
  try {  // what every loader checks (the scales among it): refuse rather than write such a file
    train::validate_checkpoint(result);
  } catch (const Error& error) {
    fail("the int8 checkpoint would not load (", error.what(), "); nothing written to ", o.out);
  }
  train::save_checkpoint(o.out, result);
}

// The summary: the quantized Linears, the calibration (static) and both files' sizes (an f32
// checkpoint of `train --save` holds the optimizer state too; an `export` holds the weights alone).
void print_summary(const QuantizeOptions& o, QuantizedModel& q, int64_t batch,
                   bool f32_has_optimizer) {
  std::cout << q.summary.describe();
  if (o.is_static()) {
    std::cout << "calibration: " << std::min(o.calib_batches * batch, q.task->examples(true))
              << " examples of " << o.calib << ", " << nn::observer_name(o.static_options.observer)
              << " observer";
    if (o.static_options.observer == nn::ObserverKind::percentile) {
      std::cout << " (p = " << o.percentile << ")";
    }
    std::cout << "\n";
  }
  std::cout << "file: " << o.load << " " << file_bytes(o.load) << " bytes -> " << o.out << " "
            << file_bytes(o.out) << " bytes"
            << (f32_has_optimizer ? " (the f32 file also holds the optimizer state)" : "") << "\n";
}

}  // namespace

int quantize(const Args& args) {
  std::optional<QuantizeOptions> parsed = parse_options(args);
  if (!parsed) return 0;  // --help
  QuantizeOptions& o = *parsed;
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(o.textbook);
  train::Checkpoint checkpoint = load_f32_checkpoint(o.load);
  const std::string trained_device = checkpoint.config.device;
  checkpoint.config.device = "cpu";  // quantization runs here; the file keeps where it was trained
  const train::DataState state =
      train::data_state_from_json(checkpoint.config, checkpoint.data_state);
  if (o.is_static() && o.calib.empty()) {  // its training data, as it was trained on
    o.calib = checkpoint.config.data;
    check_training_data_unchanged(checkpoint);
  }
  QuantizedModel q = o.is_static() ? quantize_static_model(o, checkpoint)
                                   : quantize_dynamic_model(checkpoint, state);
  save_quantized(o, checkpoint, trained_device, q.module());
  print_summary(o, q, checkpoint.config.batch, !checkpoint.optimizer.empty());
  return 0;
}

}  // namespace tg::cli
