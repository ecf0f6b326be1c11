// `tapegrad plot tape --out tape.png`: the whole tape on one canvas (plot/tape_plot.h).
#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/plot/png.h"
#include "tapegrad/plot/tape_plot.h"
#include "tapegrad/plot/tape_style.h"

namespace tg::plot {
namespace {

constexpr double kTapeHeader = 64;              // the title and the legend, above the graph
constexpr int64_t kTapeMaxPixels = 40'000'000;  // 120 MB of RGB
constexpr double kTapeTitleSize = 15;

// An arrow along `path`, its head at the last point.
void draw_tape_arrow(Canvas& canvas, const std::vector<Point>& path, double dy) {
  for (size_t i = 0; i + 1 < path.size(); ++i) {
    canvas.line(path[i].x, path[i].y + dy, path[i + 1].x, path[i + 1].y + dy, kTapeArrow, 1.2);
  }
  const Point tip = path.back(), from = path[path.size() - 2];
  const double angle = std::atan2(tip.y - from.y, tip.x - from.x);
  for (const double side : {-0.45, 0.45}) {
    canvas.line(tip.x, tip.y + dy, tip.x - 8 * std::cos(angle + side),
                tip.y + dy - 8 * std::sin(angle + side), kTapeArrow, 1.4);
  }
}

// A box with a border, its lines centred.
void draw_tape_box(Canvas& canvas, const TapeBox& box, const BoxSize& size, Point centre) {
  const TapeBoxColours colours = tape_box_colours(box.kind);
  const int left = static_cast<int>(std::lround(centre.x - size.width / 2));
  const int top = static_cast<int>(std::lround(centre.y - size.height / 2));
  const int width = static_cast<int>(std::lround(size.width));
  const int height = static_cast<int>(std::lround(size.height));
  canvas.fill_rect(left, top, width, height, colours.border);
  canvas.fill_rect(left + 1, top + 1, width - 2, height - 2, colours.fill);
  for (size_t i = 0; i < box.lines.size(); ++i) {
    const double y = top + kTapePadding / 2 + (static_cast<double>(i) + 0.5) * kTapeLineHeight;
    canvas.text(box.lines[i], centre.x, y, kTapeTextSize, kTapeText, Align::center, Align::center);
  }
}

// The title, and the legend under it: a swatch and a meaning for each kind of box.
void draw_tape_header(Canvas& canvas, const std::string& title) {
  canvas.text(title, 20, 12, kTapeTitleSize, kBlack);
  double x = 20;
  for (const TapeLegendEntry& entry : tape_legend()) {
    const TapeBoxColours colours = tape_box_colours(entry.kind);
    canvas.fill_rect(static_cast<int>(x), 38, 14, 14, colours.border);
    canvas.fill_rect(static_cast<int>(x) + 1, 39, 12, 12, colours.fill);
    canvas.text(entry.meaning, x + 20, 45, kTapeTextSize, kTapeText, Align::start, Align::center);
    x += 20 + Canvas::text_width(entry.meaning, kTapeTextSize) + 24;
  }
}

// The legend's width, to make room for it.
double tape_legend_width() {
  double width = 20;
  for (const TapeLegendEntry& entry : tape_legend()) {
    width += 20 + Canvas::text_width(entry.meaning, kTapeTextSize) + 24;
  }
  return width;
}

}  // namespace

void tape_png(const std::string& path, const TapeGraph& graph, const TapeGroups& groups,
              const std::string& title) {
  const TapeView view = tape_view(graph, groups, std::vector<bool>(groups.names.size(), true));
  const std::vector<BoxSize> sizes = tape_box_sizes(view);
  const LayeredDrawing drawing = layered_drawing(sizes, view.edges);
  const double title_width = Canvas::text_width(title, kTapeTitleSize) + 40;
  const auto width =
      static_cast<int64_t>(std::ceil(std::max({drawing.width, title_width, tape_legend_width()})));
  const auto height = static_cast<int64_t>(std::ceil(drawing.height + kTapeHeader));
  TG_CHECK(width <= 16384 && height <= 16384 && width * height <= kTapeMaxPixels,
           "'", path, "': the tape's ", view.boxes.size(), " boxes would make a PNG of ", width,
           "x", height, " pixels, past the limit (16384 a side, ", kTapeMaxPixels,
           " pixels); write .html instead, where each repeated layer folds into one box");
  Canvas canvas(static_cast<int>(width), static_cast<int>(height));
  draw_tape_header(canvas, title);
  const std::vector<TapeBand> bands = tape_bands(view, sizes, drawing);
  for (const TapeBand& band : bands) {
    const int top = static_cast<int>(std::lround(band.top + kTapeHeader));
    canvas.fill_rect(static_cast<int>(std::lround(band.left)), top,
                     static_cast<int>(std::lround(band.right - band.left)),
                     static_cast<int>(std::lround(band.bottom + kTapeHeader)) - top,
                     tape_band_fill(band.group));
  }
  for (const TapeBand& band : bands) {
    if (band.named) {
      canvas.text(groups.names[band.group], band.left + 4, band.top + kTapeHeader + 2,
                  kTapeTextSize - 1, kTapeBandText);
    }
  }
  for (const auto& arrow : drawing.paths) draw_tape_arrow(canvas, arrow, kTapeHeader);
  for (size_t box = 0; box < view.boxes.size(); ++box) {
    const Point centre{drawing.centres[box].x, drawing.centres[box].y + kTapeHeader};
    draw_tape_box(canvas, view.boxes[box], sizes[box], centre);
  }
  canvas.save_png(path);
}

}  // namespace tg::plot
