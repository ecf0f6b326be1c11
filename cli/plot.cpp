// `tapegrad plot <what>`: PNG charts. `pe` draws the sinusoidal positional-encoding table, `loss`
// the loss curves of a training log (CSV), `grads` the gradient sizes of a --grad-stats log (both
// read by plot/training_log.h). Each kind is one entry of kPlots below.
#include <algorithm>
#include <boost/program_options.hpp>
#include <iostream>
#include <map>
#include <sstream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/nn/positional_encoding.h"
#include "tapegrad/plot/module_panels.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/plot/training_log.h"

namespace tg::cli {

namespace {

namespace po = boost::program_options;

// Parses `args` against `options` and --threads (which it applies); returns false (after
// printing the help) when --help was given.
bool parse(const Args& args, po::options_description& options, const char* examples) {
  int threads = 0;
  add_threads_option(options, threads);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexample:\n" << examples;
    return false;
  }
  use_threads_option(threads);
  return true;
}

// ---- plot pe -----------------------------------------------------------------------------------

constexpr int64_t kMaxDim = 2048, kMaxLen = 4096;

int plot_pe(const Args& args) {
  int64_t dim = 0, len = 0;
  std::string out;
  po::options_description options("tapegrad plot pe: the sinusoidal positional encoding as a heatmap\n"
                                  "(rows = positions, columns = embedding dimensions)");
  options.add_options()("help,h", "show this help")
      ("dim", po::value(&dim)->required(), "embedding dimension (1 to 2048)")
      ("len", po::value(&len)->required(), "number of positions (1 to 4096)")
      ("out", po::value(&out)->required(), "the PNG to write");
  if (!parse(args, options, "  tapegrad plot pe --dim 64 --len 100 --out pe.png\n")) return 0;
  TG_CHECK(dim >= 1 && dim <= kMaxDim, "--dim must be between 1 and ", kMaxDim, ", got ", dim);
  TG_CHECK(len >= 1 && len <= kMaxLen, "--len must be between 1 and ", kMaxLen, ", got ", len);
  check_distinct_files({{"font", plot::font_path()}}, {{"--out", out}});
  check_output_path(out, "--out");

  plot::Heatmap map;
  map.rows = len;
  map.cols = dim;
  map.values = nn::sinusoidal_table(len, dim, DType::f64).to_host_f64();
  map.x_label = "embedding dimension";
  map.y_label = "position";
  std::ostringstream title;
  title << "sinusoidal positional encoding (dim " << dim << ", " << len << (len == 1 ? " position)" : " positions)");
  plot::heatmap_png(out, {map}, title.str());
  std::cout << "wrote " << out << "\n";
  return 0;
}

// ---- plot loss ---------------------------------------------------------------------------------

int plot_loss(const Args& args) {
  std::string log_path, out;
  po::options_description options("tapegrad plot loss: training (and validation) loss against step\n"
                                  "from the CSV log a training run writes");
  options.add_options()("help,h", "show this help")
      ("log", po::value(&log_path)->required(),
       "the training log: a CSV with a header naming at least step and loss (val_loss is drawn too "
       "where its cells are not empty)")
      ("out", po::value(&out)->required(), "the PNG to write");
  if (!parse(args, options, "  tapegrad plot loss --log runs/lm/log.csv --out loss.png\n")) return 0;

  // Before the work: a bad --out is reported first.
  check_distinct_files({{"--log", log_path}, {"font", plot::font_path()}}, {{"--out", out}});
  check_output_path(out, "--out");
  const std::vector<plot::Series> series = plot::read_training_log(log_path, "--log");
  const size_t slash = log_path.rfind('/');
  const std::string name = slash == std::string::npos ? log_path : log_path.substr(slash + 1);
  plot::line_chart_png(out, series, "loss (" + name + ")", "step", "loss");
  std::cout << "wrote " << out << "\n";
  return 0;
}

// ---- plot grads --------------------------------------------------------------------------------

int plot_grads(const Args& args) {
  std::string log_path, out, only;
  po::options_description options(
      "tapegrad plot grads: mean |grad| of every parameter against step, on a\n"
      "log scale, from the CSV that tapegrad train --grad-stats writes: one\n"
      "panel a layer or module (at most 8 parameters, each in its own colour),\n"
      "all panels on the same axes");
  options.add_options()("help,h", "show this help")
      ("log", po::value(&log_path)->required(), "the --grad-stats CSV (step, name, mean_abs_grad, ...)")
      ("out", po::value(&out)->required(), "the PNG to write")
      ("only", po::value(&only),
       "only the parameters whose name contains this text, e.g. q_proj, .bias or layers.3. (a "
       "model of more than 48 panels is drawn on one chart, where colours repeat: --only draws "
       "a part of it as panels)");
  if (!parse(args, options, "  tapegrad plot grads --log grads.csv --out grads.png\n"
                            "  tapegrad plot grads --log grads.csv --only layers.0. --out layer0.png\n")) return 0;

  // Before the work: a bad --out is reported first.
  check_distinct_files({{"--log", log_path}, {"font", plot::font_path()}}, {{"--out", out}});
  check_output_path(out, "--out");
  std::vector<plot::Series> series = plot::read_grad_stats(log_path, "--log");
  std::erase_if(series, [&](const plot::Series& s) { return s.name.find(only) == std::string::npos; });
  TG_CHECK(!series.empty(), "--only '", only, "': no parameter in '", log_path, "' has that in its name");
  const size_t slash = log_path.rfind('/');
  const std::string name = slash == std::string::npos ? log_path : log_path.substr(slash + 1);
  const std::vector<plot::LinePanel> panels = plot::panels_by_module(series);
  if (panels.size() <= plot::kMaxPanels) {
    plot::small_multiples_png(out, panels, "mean |grad| per parameter, log scale (" + name + ")",
                              "step", plot::YScale::log);
    std::cout << "wrote " << out << ": " << series.size() << " parameters in " << panels.size()
              << " panels\n";
    return 0;
  }
  plot::line_chart_png(out, series, "mean |grad| per parameter (" + name + ")", "step",
                       "mean |grad| (log scale)", plot::YScale::log);
  std::cout << "wrote " << out << ": " << series.size() << " parameters on one chart ("
            << panels.size() << " panels would be too many; --only draws a part as panels)\n";
  return 0;
}

// ---- Dispatch ----------------------------------------------------------------------------------

struct PlotKind {
  int (*run)(const Args&);
  const char* summary;
};

// One line per kind of plot; `tapegrad plot <name> ...` runs it with the remaining arguments.
const std::map<std::string, PlotKind> kPlots = {
    {"pe", {plot_pe, "the sinusoidal positional-encoding table as a heatmap"}},
    {"loss", {plot_loss, "training and validation loss against step, from a training log"}},
    {"attention", {plot_attention, "a checkpoint's attention weights on a text, one heatmap a head\n"
                                   "            (--summary: the head metrics of `analyze heads` over a data file)"}},
    {"grads", {plot_grads, "mean |grad| of each parameter against step, from train --grad-stats"}},
    {"tape", {plot_tape, "the tape of one training step of a checkpoint's model (.png or .html)"}},
};

std::string plot_names() {
  std::string names;
  for (const auto& [name, kind] : kPlots) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

int plot(const Args& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::cout << "usage: tapegrad plot <what> [options]   (writes a PNG)\n\nplots:\n";
    for (const auto& [name, kind] : kPlots) {
      std::cout << "  " << name << std::string(10 - std::min<size_t>(name.size(), 9), ' ') << kind.summary << "\n";
    }
    std::cout << "\n`tapegrad plot <what> --help` shows its options.\n\nexamples:\n"
                 "  tapegrad plot pe --dim 64 --len 100 --out pe.png\n"
                 "  tapegrad plot loss --log runs/lm/log.csv --out loss.png\n"
                 "  tapegrad plot grads --log grads.csv --out grads.png\n"
                 "  tapegrad plot tape --load lm.safetensors --out tape.html\n"
                 "  tapegrad plot attention --load cls.safetensors --text \"the cat sat\" --out attn.png\n"
                 "  tapegrad plot attention --summary --load cls.safetensors --data data/fortunes.tsv --out heads.png\n";
    return 0;
  }
  TG_CHECK(!args.empty(), "say what to plot: one of ", plot_names(), " (try tapegrad plot --help)");
  const auto kind = kPlots.find(args[0]);
  TG_CHECK(kind != kPlots.end(), "unknown plot '", args[0], "': expected one of ", plot_names(),
           " (try tapegrad plot --help)");
  return kind->second.run(Args(args.begin() + 1, args.end()));
}

}  // namespace tg::cli
