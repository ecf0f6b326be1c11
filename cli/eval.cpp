// `tapegrad eval`: a checkpoint's loss (and accuracy) on a data file.
#include <boost/program_options.hpp>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/runtime/threads.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/flag_scope.h"
#include "tapegrad/train/tasks.h"

namespace tg::cli {

int eval(const Args& args) {
  namespace po = boost::program_options;
  std::string load, data, device = "cpu";
  int threads = 0;
  bool textbook = false;
  int64_t batch = 0;
  po::options_description options("tapegrad eval: a checkpoint's loss (and accuracy) on every example of a file");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&load), "checkpoint written by tapegrad train --save")
      ("data", po::value(&data), "data file in the checkpoint task's format")
      ("batch", po::value(&batch), "examples per forward (default: the training batch)")
      ("device", po::value(&device)->default_value(device), "cpu | cuda | cuda:N")
      ("tf32", po::bool_switch(&math_modes().allow_tf32), "cuda: let f32 GEMMs use TF32 tensor cores")
      ("json", "print one JSON object");
  add_threads_option(options, threads);
  add_textbook_option(options, textbook);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexamples:\n  tapegrad eval --load cls.safetensors --data data/fortunes.tsv\n"
                 "  tapegrad eval --load cls.safetensors --data data/fortunes.tsv --device cuda\n";
    return 0;
  }
  TG_CHECK(!load.empty() && !data.empty(), "--load and --data are required");
  TG_CHECK(!vm.count("batch") || (batch >= 1 && batch <= train::Limits::batch), "--batch must be in [1, ",
           train::Limits::batch, "], got ", batch);
  train::check_flags_apply(given_options(vm), {train::tf32_scope(device)});
  use_threads_option(threads);
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(textbook, device);
  train::Checkpoint checkpoint = train::load_checkpoint(load);
  checkpoint.config.device = device;  // wherever it was trained
  checkpoint.config.validate();
  auto task = train::make_task(checkpoint.config, data, &checkpoint.data_state, /*whole_file=*/true);
  if (const std::string notice = task->data_notice(); !notice.empty()) std::cerr << notice << "\n";
  train::load_model(task->model(), checkpoint);
  const train::Metrics metrics = task->evaluate(true, batch > 0 ? batch : checkpoint.config.batch);
  train::check_finite_result(metrics.loss, "the loss on " + data, checkpoint);  // never "loss nan"
  if (vm.count("json")) {
    nlohmann::json result = {{"task", checkpoint.config.task}, {"examples", metrics.examples},
                             {"loss", metrics.loss}};
    if (metrics.accuracy) result["accuracy"] = *metrics.accuracy;
    std::cout << result.dump() << "\n";
  } else {
    std::cout << checkpoint.config.task << " on " << data << ": " << metrics.examples
              << " examples, loss " << metrics.loss;
    if (metrics.accuracy) std::cout << ", accuracy " << *metrics.accuracy;
    std::cout << "\n";
  }
  return 0;
}

}  // namespace tg::cli
