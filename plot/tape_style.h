#pragma once
// What the PNG and the HTML of `tapegrad plot tape` share (plot/tape_plot.h): the colours of
// each kind of box, the text sizes, the boxes' sizes and the bands drawn behind expanded groups.
#include <string>
#include <vector>

#include "tapegrad/plot/png.h"
#include "tapegrad/plot/tape_layout.h"
#include "tapegrad/plot/tape_plot.h"

namespace tg::plot {

inline constexpr double kTapeTextSize = 12;    // pixels, every label
inline constexpr double kTapeLineHeight = 16;  // pixels between label lines
inline constexpr double kTapePadding = 8;      // pixels between a box's edge and its text
inline constexpr Rgb kTapeArrow{120, 120, 120};
inline constexpr Rgb kTapeText{20, 20, 20};
inline constexpr Rgb kTapeBandText{56, 118, 29};

struct TapeBoxColours {
  Rgb fill, border;
};
TapeBoxColours tape_box_colours(TapeBoxKind kind);
// "#rrggbb"
std::string tape_hex(Rgb colour);

// Each box's size: its widest line (measured in the plots' font) and its line count, padded.
std::vector<BoxSize> tape_box_sizes(const TapeView& view);

// The bands behind an expanded group: one a row it has boxes in, around them, from halfway to the
// row above to halfway to the row below (so that a group's bands join), its name on the first.
struct TapeBand {
  int group = -1;
  bool named = false;  // the group's first band: its name goes at its top left
  double left = 0, top = 0, right = 0, bottom = 0;
};
std::vector<TapeBand> tape_bands(const TapeView& view, const std::vector<BoxSize>& sizes,
                                 const LayeredDrawing& drawing);
// The fill of group `group`'s bands: two tints in turn, so that neighbouring layers stand apart.
Rgb tape_band_fill(int group);

// One line of the legend: each kind of box with what it means.
struct TapeLegendEntry {
  TapeBoxKind kind;
  const char* meaning;
};
std::vector<TapeLegendEntry> tape_legend();

}  // namespace tg::plot
