// `tapegrad export`: a checkpoint's model alone (its state_dict under PyTorch's names, no optimizer
// state), for PyTorch: the tutorial-form models load into the tutorial's own classes with
// load_state_dict(..., strict=True) (train/checkpoint_file.h, save_export).
#include <boost/program_options.hpp>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/nn/positional_encoding.h"
#include "tapegrad/train/checkpoint_file.h"

namespace tg::cli {
namespace {

// --help: the options, then examples.
void print_export_help(const boost::program_options::options_description& options) {
  std::cout << options
            << "\nThe file holds the model's state_dict alone (no optimizer state), under\n"
               "PyTorch's names; the tutorial-form models (textcls --layers 0, timeseries\n"
               "--layers 1) also hold pos_encoding.pe, the sinusoidal table [1, 5000, dim] of the\n"
               "tutorial's PositionalEncoding, so its classes load the file with strict=True.\n"
               "Its metadata is the config and the data encoding (vocabulary, labels or\n"
               "normalisation): eval and sample load it as a checkpoint; train --resume does not.\n"
               "An int8 checkpoint is refused: export the f32 one it was quantized from.\n"
               "\nexamples:\n"
               "  tapegrad export --load cls.safetensors --out cls-model.safetensors\n"
               "  tapegrad sample --load cls-model.safetensors --prompt \"love and war\"\n"
               "  python: model.load_state_dict(safetensors.torch.load_file("
               "\"cls-model.safetensors\"), strict=True)\n";
}

// A one-line summary of what was written: the tensors, and the positional table if there is one.
void print_export_summary(const train::Checkpoint& checkpoint, const std::string& out) {
  bool has_table = false;
  for (const auto& [name, t] : checkpoint.model) has_table = has_table || name == "pos_encoding.pe";
  std::cout << "exported the " << checkpoint.config.task << " model to " << out << ": "
            << checkpoint.model.size() << " tensors (its state_dict";
  if (has_table) {
    std::cout << "; pos_encoding.pe [1, " << nn::kTutorialMaxLen << ", " << checkpoint.config.dim
              << "] as the tutorial's";
  }
  std::cout << "), no optimizer state\n";
}

}  // namespace

int export_weights(const Args& args) {
  namespace po = boost::program_options;
  std::string load, out;
  po::options_description options(
      "tapegrad export: a checkpoint's model alone (the state_dict, no optimizer state), for\n"
      "load_state_dict(..., strict=True) in PyTorch");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&load), "checkpoint written by tapegrad train --save (f32)")
      ("out", po::value(&out), "the safetensors file to write (not the --load file)");
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    print_export_help(options);
    return 0;
  }
  TG_CHECK(!load.empty() && !out.empty(), "--load and --out are required");
  check_distinct_files({{"--load", load}}, {{"--out", out}});
  check_output_path(out, "--out");
  const train::Checkpoint checkpoint = train::load_checkpoint(load);
  train::save_export(out, checkpoint);
  print_export_summary(checkpoint, out);
  return 0;
}

}  // namespace tg::cli
