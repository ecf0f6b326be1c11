#include "tapegrad/plot/tape_style.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <utility>

namespace tg::plot {

TapeBoxColours tape_box_colours(TapeBoxKind kind) {
  switch (kind) {
    case TapeBoxKind::parameter:
      return {{207, 226, 243}, {61, 133, 198}};
    case TapeBoxKind::data:
      return {{238, 238, 238}, {153, 153, 153}};
    case TapeBoxKind::output:
      return {{249, 203, 156}, {230, 145, 56}};
    case TapeBoxKind::group:
      return {{217, 234, 211}, {106, 168, 79}};
    case TapeBoxKind::op:
      break;
  }
  return {{255, 255, 255}, {85, 85, 85}};
}

std::string tape_hex(Rgb colour) {
  char text[8];
  std::snprintf(text, sizeof(text), "#%02x%02x%02x", colour.r, colour.g, colour.b);
  return text;
}

std::vector<BoxSize> tape_box_sizes(const TapeView& view) {
  std::vector<BoxSize> sizes;
  for (const TapeBox& box : view.boxes) {
    double widest = 0;
    for (const std::string& line : box.lines) {
      widest = std::max(widest, Canvas::text_width(line, kTapeTextSize));
    }
    sizes.push_back({std::ceil(widest) + 2 * kTapePadding,
                     static_cast<double>(box.lines.size()) * kTapeLineHeight + kTapePadding});
  }
  return sizes;
}

std::vector<TapeBand> tape_bands(const TapeView& view, const std::vector<BoxSize>& sizes,
                                 const LayeredDrawing& drawing) {
  constexpr double kAround = 8, kFar = std::numeric_limits<double>::max();
  const LayoutSpacing spacing;
  std::map<int, std::pair<double, double>> rows;  // layer -> its boxes' top and bottom
  for (size_t box = 0; box < view.boxes.size(); ++box) {
    auto [row, added] = rows.try_emplace(drawing.layers[box], kFar, -kFar);
    row->second.first = std::min(row->second.first, drawing.centres[box].y - sizes[box].height / 2);
    row->second.second =
        std::max(row->second.second, drawing.centres[box].y + sizes[box].height / 2);
  }
  std::map<std::pair<int, int>, TapeBand> bands;  // (group, layer) -> its band
  for (size_t box = 0; box < view.boxes.size(); ++box) {
    const int group = view.boxes[box].group;
    if (group < 0 || view.boxes[box].kind == TapeBoxKind::group) continue;
    const auto& [row_top, row_bottom] = rows.at(drawing.layers[box]);
    auto [band, added] = bands.try_emplace(
        {group, drawing.layers[box]}, TapeBand{group, false, kFar, row_top - spacing.row_gap / 2,
                                               -kFar, row_bottom + spacing.row_gap / 2});
    band->second.left =
        std::min(band->second.left, drawing.centres[box].x - sizes[box].width / 2 - kAround);
    band->second.right =
        std::max(band->second.right, drawing.centres[box].x + sizes[box].width / 2 + kAround);
  }
  std::vector<TapeBand> listed;
  for (auto& [key, band] : bands) {  // by group, then row: a group's first band is its top one
    band.named = listed.empty() || listed.back().group != band.group;
    listed.push_back(band);
  }
  return listed;
}

Rgb tape_band_fill(int group) { return group % 2 == 0 ? Rgb{236, 244, 229} : Rgb{250, 243, 224}; }

std::vector<TapeLegendEntry> tape_legend() {
  return {{TapeBoxKind::op, "op: output shape, dtype, bytes saved for backward"},
          {TapeBoxKind::parameter, "parameter (a leaf: its .grad fills)"},
          {TapeBoxKind::data, "data (no gradient)"},
          {TapeBoxKind::output, "the loss"}};
}

}  // namespace tg::plot
