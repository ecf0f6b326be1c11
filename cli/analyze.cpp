// `tapegrad analyze <what>`: numbers about a trained model. `heads` measures what each attention
// head does over a sample of a data file (analysis/head_metrics.h explains the five metrics).
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "tapegrad/analysis/head_analysis.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/train/checkpoint_file.h"

namespace tg::cli {
namespace {

namespace po = boost::program_options;

std::string fixed(double value, int decimals) {
  char text[40];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string bracketed(double value, int decimals) {  // "(1.386)": a baseline next to its metric
  char text[40];
  std::snprintf(text, sizeof text, "(%.*f)", decimals, value);
  return text;
}

void print_table(const analysis::HeadAnalysis& analysis) {
  std::cout << "over " << analysis.sequences << " sequence" << (analysis.sequences == 1 ? "" : "s") << ", "
            << analysis.queries << " real queries" << (analysis.causal ? " (causal)" : "") << "\n"
            << "layer  head  entropy  (uniform)  distance  (uniform)  previous    same   first\n";
  for (const auto& layer : analysis.layers) {
    for (size_t h = 0; h < layer.heads.size(); ++h) {
      const analysis::HeadMetrics& m = layer.heads[h];
      std::printf("%5lld  %4zu  %7s  %9s  %8s  %9s  %8s  %6s  %6s\n", static_cast<long long>(layer.layer), h,
                  fixed(m.entropy, 3).c_str(), bracketed(m.uniform_entropy, 3).c_str(),
                  fixed(m.distance, 2).c_str(), bracketed(m.uniform_distance, 2).c_str(),
                  fixed(m.previous, 3).c_str(), fixed(m.same, 3).c_str(), fixed(m.first, 3).c_str());
    }
  }
  std::fflush(stdout);
}

nlohmann::json to_json(const analysis::HeadAnalysis& analysis) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& layer : analysis.layers) {
    nlohmann::json heads = nlohmann::json::array();
    for (const analysis::HeadMetrics& m : layer.heads) {
      heads.push_back({{"entropy", m.entropy}, {"distance", m.distance}, {"previous", m.previous},
                       {"same", m.same}, {"first", m.first}, {"uniform_entropy", m.uniform_entropy},
                       {"uniform_distance", m.uniform_distance}});
    }
    layers.push_back({{"layer", layer.layer}, {"heads", heads}});
  }
  return {{"sequences", analysis.sequences}, {"queries", analysis.queries}, {"causal", analysis.causal},
          {"layers", layers}};
}

int analyze_heads(const Args& args) {
  std::string load, data;
  int64_t samples = 64, layer = -1;
  int threads = 0;
  bool textbook = false;
  po::options_description options(
      "tapegrad analyze heads: what each attention head does, over a sample of a data file\n"
      "(per layer and head: mean attention entropy in nats, mean attention distance\n"
      "sum_j w_ij |i - j| in positions, and the weight on the previous token, the same token\n"
      "and the first token; uniform attention's entropy and distance in brackets)");
  options.add_options()("help,h", "show this help")
      ("load", po::value(&load), "a textcls or charlm checkpoint")
      ("data", po::value(&data), "a data file of the checkpoint's task (TSV for textcls, text for charlm)")
      ("samples", po::value(&samples)->default_value(samples),
       "sequences to average over, evenly spaced over the file (textcls: examples, charlm: windows of --context)")
      ("layer", po::value(&layer)->default_value(layer), "only this layer (0 = the first; -1: every layer)")
      ("json", "print one JSON object instead of the table");
  add_threads_option(options, threads);
  add_textbook_option(options, textbook);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexamples:\n"
                 "  tapegrad analyze heads --load lm.safetensors --data data/corpus.txt --samples 32\n"
                 "  tapegrad analyze heads --load cls.safetensors --data data/fortunes.tsv --layer 0 --json\n";
    return 0;
  }
  TG_CHECK(!load.empty() && !data.empty(), "--load and --data are required");
  use_threads_option(threads);
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(textbook);
  const train::Checkpoint checkpoint = train::load_checkpoint(load);
  const analysis::HeadAnalysis analysis = analysis::analyze_heads(checkpoint, data, samples, layer);
  if (vm.count("json")) {
    std::cout << to_json(analysis).dump() << "\n";
  } else {
    print_table(analysis);
  }
  return 0;
}

struct Analysis {
  int (*run)(const Args&);
  const char* summary;
};

// One line per analysis; `tapegrad analyze <name> ...` runs it with the remaining arguments.
const std::map<std::string, Analysis> kAnalyses = {
    {"heads", {analyze_heads, "per attention head: entropy, distance, weight on previous/same/first token"}},
};

std::string analysis_names() {
  std::string names;
  for (const auto& [name, analysis] : kAnalyses) names += (names.empty() ? "" : ", ") + name;
  return names;
}

}  // namespace

int analyze(const Args& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    std::cout << "usage: tapegrad analyze <what> [options]\n\nanalyses:\n";
    for (const auto& [name, analysis] : kAnalyses) {
      std::cout << "  " << name << std::string(10 - std::min<size_t>(name.size(), 9), ' ') << analysis.summary << "\n";
    }
    std::cout << "\n`tapegrad analyze <what> --help` shows its options.\n";
    return 0;
  }
  TG_CHECK(!args.empty(), "say what to analyze: one of ", analysis_names(), " (try tapegrad analyze --help)");
  const auto analysis = kAnalyses.find(args[0]);
  TG_CHECK(analysis != kAnalyses.end(), "unknown analysis '", args[0], "': expected one of ", analysis_names(),
           " (try tapegrad analyze --help)");
  return analysis->second.run(Args(args.begin() + 1, args.end()));
}

}  // namespace tg::cli
