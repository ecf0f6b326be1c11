// plot/module_panels.h: parameter names grouped a few a panel for `tapegrad plot grads`, checked
// on the names of docs/cli.md's models (as train --grad-stats writes them) and on names without
// modules; the panels' structure, before anything is drawn.
#include <catch2/catch.hpp>

#include <map>
#include <string>
#include <vector>

#include "tapegrad/plot/module_panels.h"

namespace {

using Names = std::vector<std::string>;

// One series a name, with a point each that tells it apart (its index).
std::vector<tg::plot::Series> panel_series(const Names& names) {
  std::vector<tg::plot::Series> series;
  for (size_t i = 0; i < names.size(); ++i) {
    series.push_back({names[i], {1.0, 2.0}, {static_cast<double>(i), 0.5}});
  }
  return series;
}

// The names of a transformer layer's 16 tensors under `prefix` (nn/models.cpp's order).
Names layer_names(const std::string& prefix) {
  Names names;
  for (const char* name : {"norm1.weight", "norm1.bias", "attn.q_proj.weight", "attn.q_proj.bias",
                           "attn.k_proj.weight", "attn.k_proj.bias", "attn.v_proj.weight",
                           "attn.v_proj.bias", "attn.o_proj.weight", "attn.o_proj.bias",
                           "norm2.weight", "norm2.bias", "mlp.linear1.weight", "mlp.linear1.bias",
                           "mlp.linear2.weight", "mlp.linear2.bias"}) {
    names.push_back(prefix + name);
  }
  return names;
}

// Each panel as "title: series, series, ...".
Names panel_outline(const std::vector<tg::plot::LinePanel>& panels) {
  Names outline;
  for (const tg::plot::LinePanel& panel : panels) {
    std::string line = panel.title + ":";
    for (const tg::plot::Series& s : panel.series) line += " " + s.name;
    outline.push_back(line);
  }
  return outline;
}

}  // namespace

TEST_CASE("module panels: a layer's attention, its norms and mlp, the rest, at most 8 a panel",
          "[plot]") {
  // docs/cli.md's textcls (--layers 1): 19 tensors.
  Names names = {"embedding.weight"};
  for (const std::string& name : layer_names("layers.0.")) names.push_back(name);
  names.insert(names.end(), {"fc.weight", "fc.bias"});
  const auto panels = tg::plot::panels_by_module(panel_series(names));
  CHECK(panel_outline(panels) ==
        Names{"embedding: weight",
              "layers.0.norm1: weight bias",
              "layers.0.attn: q_proj.weight q_proj.bias k_proj.weight k_proj.bias v_proj.weight "
              "v_proj.bias o_proj.weight o_proj.bias",
              "layers.0: norm2, mlp: norm2.weight norm2.bias mlp.linear1.weight mlp.linear1.bias "
              "mlp.linear2.weight mlp.linear2.bias",
              "fc: weight bias"});
  // Every series once, with its own points.
  std::map<double, int> seen;
  for (const auto& panel : panels) {
    CHECK(panel.series.size() <= tg::plot::kMaxLinesPerPanel);
    for (const auto& s : panel.series) ++seen[s.y.at(0)];
  }
  CHECK(seen.size() == names.size());
  for (const auto& [index, count] : seen) CHECK(count == 1);
}

TEST_CASE("module panels: charlm's layers, timeseries' modules, names without modules", "[plot]") {
  Names charlm = {"embedding.weight"};
  for (const std::string& name : layer_names("layers.0.")) charlm.push_back(name);
  for (const std::string& name : layer_names("layers.10.")) charlm.push_back(name);
  charlm.insert(charlm.end(), {"norm.weight", "norm.bias", "head.weight", "head.bias"});
  Names titles;
  for (const auto& panel : tg::plot::panels_by_module(panel_series(charlm))) {
    titles.push_back(panel.title);
  }
  CHECK(titles == Names{"embedding", "layers.0.norm1", "layers.0.attn", "layers.0: norm2, mlp",
                        "layers.10.norm1", "layers.10.attn", "layers.10: norm2, mlp",
                        "norm, head"});

  const Names timeseries = {"input_proj.weight", "input_proj.bias", "mha.q_proj.weight",
                            "mha.q_proj.bias", "mha.k_proj.weight", "mha.k_proj.bias",
                            "mha.v_proj.weight", "mha.v_proj.bias", "mha.o_proj.weight",
                            "mha.o_proj.bias", "output.weight", "output.bias"};
  const auto panels = tg::plot::panels_by_module(panel_series(timeseries));
  REQUIRE(panels.size() == 3);
  CHECK(panels[0].title == "input_proj");
  CHECK(panels[1].title == "mha");
  CHECK(panels[1].series.size() == 8);
  CHECK(panels[2].title == "output");

  // Twenty names of no module: eight a panel, in order, the first few named in the title.
  Names flat;
  for (int i = 0; i < 20; ++i) flat.push_back("w" + std::to_string(i));
  CHECK(panel_outline(tg::plot::panels_by_module(panel_series(flat))) ==
        Names{"w0, w1, w2 and 5 more: w0 w1 w2 w3 w4 w5 w6 w7",
              "w8, w9, w10 and 5 more: w8 w9 w10 w11 w12 w13 w14 w15",
              "w16, w17, w18 and 1 more: w16 w17 w18 w19"});
}
