#pragma once
// Series named like a model's parameters ("layers.0.attn.q_proj.weight") grouped a few a panel,
// for small_multiples_png (png.h): `tapegrad plot grads` draws one panel a layer or module, so
// that every parameter keeps a colour of its own within its panel.
#include <vector>

#include "tapegrad/plot/png.h"

namespace tg::plot {

// The series grouped by the modules their names give, in their order, at most
// kMaxLinesPerPanel a panel:
//   - a name's parts are its dot-separated words, a number joined to the word before it
//     ("layers.0.attn.q_proj.weight": layers.0, attn, q_proj, weight);
//   - the series are split by their first part; a group of more than kMaxLinesPerPanel is split
//     again by the next part, and so on down; a group that fits stays whole, and consecutive
//     groups that fit share a panel while they fit together (a layer's norm2 with its mlp);
//   - a panel's title is the module path its series share, never a series' last part
//     ("layers.0.attn"), or, when they share none, their first parts ("norm, head"); each series
//     is renamed to the rest of its name ("q_proj.weight").
std::vector<LinePanel> panels_by_module(const std::vector<Series>& series);

}  // namespace tg::plot
