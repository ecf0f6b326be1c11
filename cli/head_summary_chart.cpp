#include "tapegrad/cli/head_summary_chart.h"

#include <functional>

#include "tapegrad/autograd/error.h"
#include "tapegrad/plot/png.h"

namespace tg::cli {

void head_summary_png(const std::string& path, const analysis::HeadAnalysis& analysis, const std::string& title) {
  TG_CHECK(!analysis.layers.empty(), "head summary: no layers to draw");
  using Metric = std::function<double(const analysis::HeadMetrics&)>;
  const std::pair<const char*, Metric> metrics[] = {
      {"entropy / uniform's", [](const auto& m) { return m.entropy / m.uniform_entropy; }},
      {"distance / uniform's", [](const auto& m) { return m.distance / m.uniform_distance; }},
      {"weight on previous token", [](const auto& m) { return m.previous; }},
      {"weight on same token", [](const auto& m) { return m.same; }},
      {"weight on first token", [](const auto& m) { return m.first; }},
  };
  const int64_t layers = static_cast<int64_t>(analysis.layers.size());
  const int64_t heads = static_cast<int64_t>(analysis.layers[0].heads.size());
  std::vector<std::string> layer_labels, head_labels;
  for (const auto& layer : analysis.layers) layer_labels.push_back(std::to_string(layer.layer));
  for (int64_t h = 0; h < heads; ++h) head_labels.push_back(std::to_string(h));
  std::vector<plot::Heatmap> panels;
  for (const auto& [name, metric] : metrics) {
    plot::Heatmap panel;
    panel.title = name;
    panel.rows = layers;
    panel.cols = heads;
    for (const auto& layer : analysis.layers) {
      for (const analysis::HeadMetrics& m : layer.heads) panel.values.push_back(metric(m));
    }
    panel.row_labels = layer_labels;
    panel.col_labels = head_labels;
    panel.x_label = "head";
    panel.y_label = "layer";
    panels.push_back(std::move(panel));
  }
  plot::heatmap_png(path, panels, title);
}

}  // namespace tg::cli
