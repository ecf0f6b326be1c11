// `tapegrad quantize`: a trained f32 checkpoint -> an int8 one (nn/quantization.h), whose Linear
// weights are i8 with per-channel f32 scales; eval, sample, plot and analyze load it as any other.
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/file_io.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/cli.h"
#include "tapegrad/train/config.h"
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
    for (int64_t i = start; i < std::min(wanted, start + batch); ++i) ids.push_back(i * count / wanted);
    task.loss(ids, true);  // the forward pass is what the observers watch; the loss is dropped
  }
}

std::string file_bytes(const std::string& path) {
  std::error_code error;
  const auto size = std::filesystem::file_size(path, error);
  return error ? std::string("?") : std::to_string(size);
}

}  // namespace

int quantize(const Args& args) {
  namespace po = boost::program_options;
  std::string load, out, mode_name, calib, observer = "minmax";
  int64_t calib_batches = 8;
  double percentile = 99.99;
  po::options_description options(
      "tapegrad quantize: int8 post-training quantization of a checkpoint's Linear layers\n"
      "(weights per output channel; inputs per row at run time (dynamic) or with scales\n"
      "calibrated on data (static); see docs/quantization.md)");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&load), "f32 checkpoint written by tapegrad train --save")
      ("mode", po::value(&mode_name), "dynamic | static")
      ("out", po::value(&out), "the quantized checkpoint to write (not the --load file)")
      ("calib", po::value(&calib), "static: calibration data in the task's format (default: the "
                                   "checkpoint's training data file, its config's data)")
      ("calib-batches", po::value(&calib_batches)->default_value(calib_batches),
       "static: batches (of the training batch size) to calibrate on")
      ("observer", po::value(&observer)->default_value(observer),
       "static: minmax (max |x|) | percentile (the --percentile of |x|)")
      ("percentile", po::value(&percentile)->default_value(percentile, "99.99"),
       "static, --observer percentile: its p, in (0, 100]");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(options).run(), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << options
              << "\nexamples:\n  tapegrad quantize --load cls.safetensors --mode dynamic --out cls-int8.safetensors\n"
                 "  tapegrad quantize --load cls.safetensors --mode static --calib data/fortunes.tsv \\\n"
                 "      --observer percentile --out cls-int8s.safetensors\n"
                 "  tapegrad eval --load cls-int8.safetensors --data data/fortunes.tsv\n";
    return 0;
  }
  TG_CHECK(!load.empty() && !mode_name.empty() && !out.empty(), "--load, --mode and --out are required");
  const nn::QuantMode mode = nn::parse_quant_mode(mode_name);
  TG_CHECK(mode != nn::QuantMode::none, "--mode must be dynamic or static, got '", mode_name, "'");
  const bool is_static = mode == nn::QuantMode::static_;
  TG_CHECK(is_static || (vm["calib"].empty() && vm["calib-batches"].defaulted() && vm["observer"].defaulted() &&
                         vm["percentile"].defaulted()),
           "--calib, --calib-batches, --observer and --percentile are options of --mode static");
  TG_CHECK(calib_batches >= 1 && calib_batches <= train::Limits::steps, "--calib-batches must be >= 1, got ",
           calib_batches);
  const nn::StaticOptions static_options{.observer = nn::parse_observer(observer), .percentile = percentile};
  TG_CHECK(percentile > 0 && percentile <= 100, "--percentile must be in (0, 100], got ", percentile);
  TG_CHECK(vm["percentile"].defaulted() || static_options.observer == nn::ObserverKind::percentile,
           "--percentile is an option of --observer percentile");
  check_output_path(out, "--out");  // before the work: a bad --out is reported first
  TG_CHECK(!same_file(out, load), "--out ", out, " is the --load file: write the int8 checkpoint next to it");

  train::Checkpoint checkpoint = train::load_checkpoint(load);
  TG_CHECK(checkpoint.config.quantization == "none", load, " is already quantized (",
           checkpoint.config.quantization, "): quantize the f32 checkpoint it came from");
  const std::string trained_device = checkpoint.config.device;
  checkpoint.config.device = "cpu";  // quantization runs here; the file keeps where it was trained
  const train::DataState state = train::data_state_from_json(checkpoint.config, checkpoint.data_state);

  nn::QuantizationSummary summary;
  std::unique_ptr<train::Task> task;  // static: the model lives in the calibration task
  std::unique_ptr<nn::Module> model;
  if (is_static) {
    if (calib.empty()) calib = checkpoint.config.data;
    TG_CHECK(!same_file(out, calib), "--out ", out, " is the calibration data file ", calib);
    task = train::make_task(checkpoint.config, calib, &checkpoint.data_state, /*whole_file=*/true);
    train::load_model(task->model(), checkpoint);
    const int64_t batch = checkpoint.config.batch;
    summary = nn::quantize_static(task->model(), [&] { run_calibration(*task, calib_batches, batch); },
                                  static_options);
  } else {
    model = train::make_model(checkpoint.config, state);
    train::load_model(*model, checkpoint);
    summary = nn::quantize_dynamic(*model);
  }
  nn::Module& quantized = is_static ? task->model() : *model;

  train::Checkpoint result = checkpoint;
  result.config.quantization = nn::quant_mode_name(mode);
  result.config.device = trained_device;
  result.model = quantized.state_dict();
  result.optimizer.clear();  // nothing of an int8 model is trained
  train::save_checkpoint(out, result);

  std::cout << summary.describe();
  if (is_static) {
    std::cout << "calibration: " << std::min(calib_batches * checkpoint.config.batch, task->examples(true))
              << " examples of " << calib << ", " << nn::observer_name(static_options.observer) << " observer";
    if (static_options.observer == nn::ObserverKind::percentile) std::cout << " (p = " << percentile << ")";
    std::cout << "\n";
  }
  std::cout << "file: " << load << " " << file_bytes(load) << " bytes -> " << out << " " << file_bytes(out)
            << " bytes (the f32 file also holds the optimizer state)\n";
  return 0;
}

}  // namespace tg::cli
