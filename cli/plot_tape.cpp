// `tapegrad plot tape`: the tape of one training step of a checkpoint's model, drawn. The model is
// rebuilt from the checkpoint, put in training mode, and runs the forward and the loss of one
// batch (under the run's autocast), as `tapegrad train` would; the graph that loss was computed
// through (autograd/tape_graph.h) is drawn as a PNG or an HTML page (plot/tape_plot.h). No
// backward runs and no weight changes. The batch is the first --batch examples of --data, or,
// without --data, made up in the shape a batch of the task has: --max-len tokens a text, --window
// time steps, --context characters.
#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/plot/tape_plot.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/train/config.h"
#include "tapegrad/train/tasks.h"

namespace tg::cli {
namespace {

// What `plot tape` was asked for.
struct TapePlotOptions {
  std::string load, out, data;
  int64_t batch = 0;  // 0: the checkpoint's --batch
  int threads = 0;
  bool textbook = false;  // the step as the tutorial writes it (autograd/textbook.h)
};

// Parses the command line; nothing (after printing the help) when --help was given.
std::optional<TapePlotOptions> parse_tape_options(const Args& args) {
  namespace po = boost::program_options;
  TapePlotOptions o;
  po::options_description options(
      "tapegrad plot tape: the tape of one training step of a checkpoint's model, one box per op\n"
      "(op, output shape, dtype, bytes saved for backward), parameters and data as leaves, the\n"
      "loss at the end");
  options.add_options()("help,h", "show this help")("load", po::value(&o.load)->required(),
                                                    "a checkpoint (textcls, timeseries or charlm)")(
      "out", po::value(&o.out)->required(),
      "the file to write: .png (every op), or .html (one page, nothing fetched: each repeated "
      "layer collapsed into a box that a click expands, a tooltip on every box)")(
      "data", po::value(&o.data),
      "the step's batch: the first --batch examples of this file (default: a made-up batch of "
      "the task's shape)")("batch", po::value(&o.batch),
                           "examples in the batch (default: the checkpoint's --batch)");
  add_threads_option(options, o.threads);
  add_textbook_option(options, o.textbook);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options
              << "\nexamples:\n"
                 "  tapegrad plot tape --load lm.safetensors --out tape.html\n"
                 "  tapegrad plot tape --load cls.safetensors --data data/fortunes.tsv --batch 2"
                 " --out tape.png\n"
                 "  tapegrad plot tape --load cls.safetensors --textbook --out tape.html   (the "
                 "attention as the tutorial writes it: q, k, v projections, matmul, softmax, ...)\n";
    return std::nullopt;
  }
  TG_CHECK(!vm.count("batch") || (o.batch >= 1 && o.batch <= train::Limits::batch),
           "--batch must be in [1, ", train::Limits::batch, "], got ", o.batch);
  use_threads_option(o.threads);
  return o;
}

// True for an --out that ends in .html, false for .png; tg::Error for anything else.
bool tape_out_is_html(const std::string& out) {
  const auto ends_with = [&](const std::string& end) {
    return out.size() > end.size() && out.compare(out.size() - end.size(), end.size(), end) == 0;
  };
  TG_CHECK(ends_with(".png") || ends_with(".html"), "--out '", out,
           "': the name must end in .png or .html (the format is taken from it)");
  return ends_with(".html");
}

// The step's forward and loss, and what to call the model's parameters.
struct TapeStep {
  std::unique_ptr<train::Task> task;  // with --data
  std::unique_ptr<nn::Module> model;  // without
  Tensor loss;
  TensorNames names;
  std::string batch;  // what the batch was, for the title
};

// Token ids for a made-up batch [rows, length]: every id of the vocabulary but <pad> and <unk>
// in turn (<unk> alone when that is all there is).
Tensor made_up_tokens(int64_t rows, int64_t length, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < rows * length; ++i) ids.push_back(vocab > 2 ? 2 + i % (vocab - 2) : 1);
  return from_indices(ids, {rows, length});
}

// The loss of a made-up batch of `rows` examples, in the shapes the task's batches have.
Tensor made_up_loss(nn::Module& model, const train::TrainConfig& config,
                    const train::DataState& state, int64_t rows) {
  const bool checkpointed = config.checkpoint_activations;
  if (auto* classifier = dynamic_cast<nn::TextClassifier*>(&model)) {
    classifier->checkpoint_layers = checkpointed;
    const Tensor tokens = made_up_tokens(rows, config.max_len, state.vocab.size());
    std::vector<int64_t> labels;
    for (int64_t row = 0; row < rows; ++row)
      labels.push_back(row % static_cast<int64_t>(state.labels.size()));
    const std::vector<int64_t> lengths(rows, config.max_len);
    return cross_entropy(classifier->forward(tokens, lengths), from_indices(labels, {rows}));
  }
  if (auto* series = dynamic_cast<nn::TimeSeriesModel*>(&model)) {
    series->checkpoint_layers = checkpointed;
    const auto columns =
        static_cast<int64_t>(config.inputs.empty() ? state.columns.size() : config.inputs.size());
    return mse_loss(series->forward(zeros({rows, config.window, columns})),
                    zeros({rows, config.horizon}));
  }
  auto& lm = dynamic_cast<nn::CharLM&>(model);
  lm.checkpoint_layers = checkpointed;
  const int64_t vocab = state.vocab.size();
  return cross_entropy(lm.forward(made_up_tokens(rows, config.context, vocab)),
                       made_up_tokens(rows, config.context, vocab));
}

// The names of the parameters, for the parameters' boxes.
TensorNames tape_parameter_names(const nn::Module& model) {
  TensorNames names;
  for (const auto& [name, parameter] : model.named_parameters()) names[parameter.impl()] = name;
  return names;
}

// The forward and loss of one training step on the first `rows` examples of --data, or on a
// made-up batch without it.
TapeStep run_tape_step(const train::Checkpoint& checkpoint, const std::string& data, int64_t rows) {
  const train::TrainConfig& config = checkpoint.config;
  TapeStep step;
  const Autocast autocast(config.amp_dtype());
  if (data.empty()) {
    const train::DataState state = train::data_state_from_json(config, checkpoint.data_state);
    step.model = train::make_model(config, state);
    train::load_model(*step.model, checkpoint);
    step.model->train();
    step.loss = made_up_loss(*step.model, config, state, rows);
    step.names = tape_parameter_names(*step.model);
    step.batch = "a made-up batch of " + std::to_string(rows);
    return step;
  }
  step.task = train::make_task(config, data, &checkpoint.data_state, /*whole_file=*/true);
  train::load_model(step.task->model(), checkpoint);
  step.task->model().train();
  const int64_t examples = step.task->examples(true);
  TG_CHECK(examples > 0, "--data '", data, "' has no examples");
  std::vector<int64_t> ids;
  for (int64_t id = 0; id < std::min(rows, examples); ++id) ids.push_back(id);
  step.loss = step.task->loss(ids, true);
  step.names = tape_parameter_names(step.task->model());
  step.batch = "the first " + std::to_string(ids.size()) + " examples of " + data;
  return step;
}

// "charlm (2 layers, dim 64, 4 heads, full attention)", what the title says of the model.
std::string tape_model_summary(const train::TrainConfig& config) {
  return config.task + " (" + std::to_string(config.layers) +
         (config.layers == 1 ? " layer, dim " : " layers, dim ") + std::to_string(config.dim) +
         ", " + std::to_string(config.heads) + " heads, " + config.attention + " attention" +
         (config.amp == "none" ? "" : ", --amp " + config.amp) + ")";
}

}  // namespace

int plot_tape(const Args& args) {
  const std::optional<TapePlotOptions> options = parse_tape_options(args);
  if (!options) return 0;
  const TapePlotOptions& o = *options;
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(o.textbook);
  const bool html = tape_out_is_html(o.out);
  check_distinct_files({{"--load", o.load}, {"--data", o.data}, {"font", plot::font_path()}},
                       {{"--out", o.out}});
  check_output_path(o.out, "--out");
  train::Checkpoint checkpoint = train::load_checkpoint(o.load);
  TG_CHECK(checkpoint.config.quantization == "none", "--load '", o.load, "' is int8-quantized (",
           checkpoint.config.quantization,
           "), inference only: it has no training step to draw "
           "(draw the f32 checkpoint it was quantized from)");
  checkpoint.config.device = "cpu";  // wherever it was trained
  const TapeStep step =
      run_tape_step(checkpoint, o.data, o.batch > 0 ? o.batch : checkpoint.config.batch);
  const TapeGraph graph = describe_tape(step.loss, step.names);
  const plot::TapeGroups groups = plot::layer_groups(graph);
  int64_t ops = 0, parameters = 0;
  for (const TapeNode& node : graph.nodes) {
    ops += node.kind == TapeNodeKind::op;
    parameters += node.kind == TapeNodeKind::parameter;
  }
  const std::string counts = std::to_string(ops) + " ops, " + std::to_string(parameters) +
                             " parameters, " + format_bytes(graph.saved_bytes()) +
                             " saved for backward";
  const std::string title = tape_model_summary(checkpoint.config) + ": one training step on " +
                            step.batch + ": " + counts;
  if (html)
    write_file_atomically(o.out, plot::tape_html(graph, groups, title), "--out");
  else
    plot::tape_png(o.out, graph, groups, title);
  std::cout << "wrote " << o.out << ": " << counts << "\n";
  return 0;
}

}  // namespace tg::cli
