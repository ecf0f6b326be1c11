// Charts on the canvas of png.cpp: heatmaps (with a shared colour bar) and line charts, with
// tick placement and label fitting.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/plot/png.h"

namespace tg::plot {

// ---- Chart helpers -----------------------------------------------------------------------------

namespace {

constexpr Rgb kInk{34, 34, 34};          // text and axes
constexpr Rgb kGrid{225, 225, 225};      // grid lines
constexpr Rgb kFrame{90, 90, 90};        // plot frames
constexpr double kTitleSize = 20, kLabelSize = 15, kTickSize = 12.5;
constexpr int kMargin = 16;

// A step of 1, 2 or 5 times a power of ten giving about `target` intervals over `range` (a long
// double: the span of two doubles may pass DBL_MAX, see "Axis spans" below).
double nice_step(long double range, double target) {
  const long double rough = range / target;
  const long double magnitude = std::pow(10.0L, std::floor(std::log10(rough)));
  const long double norm = rough / magnitude;
  return static_cast<double>((norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude);
}

// The next step of the 1-2-5 progression.
double next_step(double step) {
  const double magnitude = std::pow(10.0, std::floor(std::log10(step) + 1e-9));
  const double norm = std::round(step / magnitude);
  return (norm < 2 ? 2 : norm < 5 ? 5 : 10) * magnitude;
}

// Multiples of `step` in [lo, hi]. The comparisons are in long double: near DBL_MAX, hi + slack
// and k * step would both be Inf in double, and Inf <= Inf would never end the loop.
std::vector<double> ticks_between(double lo, double hi, double step) {
  std::vector<double> ticks;
  const long double slack = step * 1e-9L, last = hi + slack;
  for (long double k = std::ceil((lo - slack) / step); k * step <= last; k += 1) {
    ticks.push_back(std::abs(k) < 0.5 ? 0.0 : static_cast<double>(k * step));
  }
  return ticks;
}

// A tick value with as many decimals as its step needs; very small or large steps in exponent
// form (every tick of an axis in the same form, since they share the step).
std::string format_tick(double value, double step) {
  char text[64];
  if (step < 1e-3 || step >= 1e5) {
    std::snprintf(text, sizeof text, "%.3g", value == 0 ? 0.0 : value);
  } else {
    const int decimals = std::clamp(static_cast<int>(std::ceil(-std::log10(step) - 1e-9)), 0, 6);
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
  }
  return text;
}

std::string format_value(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

// `label` cut to at most `max_width` pixels, ending in an ellipsis when cut.
std::string abbreviate(const std::string& label, double size, double max_width) {
  if (Canvas::text_width(label, size) <= max_width) return label;
  std::vector<int> points = code_points(label);
  std::string cut;
  for (int point : points) {
    std::string next = cut;
    if (point < 0x80) {
      next += static_cast<char>(point);
    } else if (point < 0x800) {
      next += static_cast<char>(0xC0 | (point >> 6)), next += static_cast<char>(0x80 | (point & 0x3F));
    } else if (point < 0x10000) {
      next += static_cast<char>(0xE0 | (point >> 12)), next += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
      next += static_cast<char>(0x80 | (point & 0x3F));
    } else {
      next += static_cast<char>(0xF0 | (point >> 18)), next += static_cast<char>(0x80 | ((point >> 12) & 0x3F));
      next += static_cast<char>(0x80 | ((point >> 6) & 0x3F)), next += static_cast<char>(0x80 | (point & 0x3F));
    }
    if (Canvas::text_width(next + "\u2026", size) > max_width) break;
    cut = std::move(next);
  }
  return cut + "\u2026";
}

// ---- Heatmap layout ----------------------------------------------------------------------------

// Which cells of one axis get a tick, and what it says.
struct AxisTicks {
  std::vector<int64_t> cells;
  std::vector<std::string> labels;
  bool upright = false;  // column labels turned to read upwards
  double extent = 0;     // the largest label size away from the axis
};

// Every k-th cell from 0, k the smallest 1-2-5 integer step that leaves `min_spacing` pixels.
std::vector<int64_t> every_kth(int64_t count, double cell_pixels, double min_spacing, bool nice) {
  int64_t k = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(min_spacing / cell_pixels - 1e-9)));
  if (nice) {
    double step = 1;
    while (step < static_cast<double>(k)) step = next_step(step);
    k = static_cast<int64_t>(step);
  }
  std::vector<int64_t> cells;
  for (int64_t c = 0; c < count; c += k) cells.push_back(c);
  return cells;
}

constexpr double kMaxLabelWidth = 110;  // longer labels are abbreviated

AxisTicks row_ticks(const Heatmap& map, double cell_height) {
  AxisTicks ticks;
  const double line = Canvas::text_height(kTickSize);
  if (map.row_labels.empty()) {
    ticks.cells = every_kth(map.rows, cell_height, 2.0 * line, true);
    for (int64_t c : ticks.cells) ticks.labels.push_back(std::to_string(c));
  } else {
    ticks.cells = every_kth(map.rows, cell_height, line, false);
    for (int64_t c : ticks.cells) ticks.labels.push_back(abbreviate(map.row_labels[c], kTickSize, kMaxLabelWidth));
  }
  for (const std::string& label : ticks.labels) ticks.extent = std::max(ticks.extent, Canvas::text_width(label, kTickSize));
  return ticks;
}

AxisTicks col_ticks(const Heatmap& map, double cell_width) {
  AxisTicks ticks;
  const double line = Canvas::text_height(kTickSize);
  if (map.col_labels.empty()) {
    const double widest = Canvas::text_width(std::to_string(map.cols - 1), kTickSize);
    ticks.cells = every_kth(map.cols, cell_width, widest + 14, true);
    for (int64_t c : ticks.cells) ticks.labels.push_back(std::to_string(c));
    ticks.extent = line;
    return ticks;
  }
  std::vector<std::string> all;
  double widest = 0;
  for (const std::string& label : map.col_labels) {
    all.push_back(abbreviate(label, kTickSize, kMaxLabelWidth));
    widest = std::max(widest, Canvas::text_width(all.back(), kTickSize));
  }
  ticks.upright = widest + 6 > cell_width;  // do not fit side by side: turn them
  ticks.cells = ticks.upright ? every_kth(map.cols, cell_width, line, false)
                              : every_kth(map.cols, cell_width, 0, false);
  for (int64_t c : ticks.cells) ticks.labels.push_back(all[c]);
  ticks.extent = ticks.upright ? widest : line;
  return ticks;
}

// Pixels for `count` cells: whole pixels per cell while they fit in `budget` (at most 48 a cell,
// but at least 120 in all), else `budget` (and cells share pixels, nearest cell).
int axis_pixels(int64_t count, int budget) {
  if (count > budget) return budget;
  const int64_t per_cell = std::clamp<int64_t>(budget / count, 1, 48);
  return static_cast<int>(count * std::max(per_cell, (120 + count - 1) / count));
}

struct PanelLayout {
  int area_w = 0, area_h = 0;  // the cells
  int left = 0, top = 0;       // from the panel's corner to the cells
  int width = 0, height = 0;   // the whole panel
  AxisTicks rows, cols;
};

constexpr int kTickLength = 4, kGap = 6;

PanelLayout layout_panel(const Heatmap& map, int budget) {
  PanelLayout p;
  p.area_w = axis_pixels(map.cols, budget);
  p.area_h = axis_pixels(map.rows, budget);
  p.rows = row_ticks(map, static_cast<double>(p.area_h) / map.rows);
  p.cols = col_ticks(map, static_cast<double>(p.area_w) / map.cols);
  const double label_line = Canvas::text_height(kLabelSize);
  p.left = static_cast<int>(std::ceil((map.y_label.empty() ? 0 : label_line + kGap) + p.rows.extent +
                                      kTickLength + kGap));
  p.top = map.title.empty() ? 4 : static_cast<int>(std::ceil(label_line + 2 * kGap));
  const int bottom = static_cast<int>(std::ceil(kTickLength + kGap + p.cols.extent +
                                                (map.x_label.empty() ? 0 : kGap + label_line) + kGap));
  // The x label is centred under the cells: room for it on the left.
  const double x_label_w = Canvas::text_width(map.x_label, kLabelSize);
  p.left = std::max(p.left, static_cast<int>(std::ceil(x_label_w / 2 - p.area_w / 2.0)) + 2);
  p.width = static_cast<int>(std::ceil(p.left + p.area_w / 2.0 + x_label_w / 2)) + 2;
  // Room for the panel title and for the last column label that overhangs the cells.
  const double title_w = Canvas::text_width(map.title, kLabelSize);
  p.width = std::max({p.width, p.left + p.area_w + 10, static_cast<int>(std::ceil(p.left + title_w + 10))});
  if (!p.cols.upright && !p.cols.labels.empty()) {
    p.width = std::max(p.width, static_cast<int>(std::ceil(p.left + p.area_w +
                                                           Canvas::text_width(p.cols.labels.back(), kTickSize) / 2 + 4)));
  }
  p.height = p.top + p.area_h + bottom;
  return p;
}

void draw_panel(Canvas& canvas, const Heatmap& map, const PanelLayout& p, int x, int y, double lo,
                double hi) {
  const int ax = x + p.left, ay = y + p.top;
  if (!map.title.empty()) {
    canvas.text(map.title, ax + p.area_w / 2.0, y + kGap, kLabelSize, kInk, Align::center);
  }
  // Each pixel shows the cell under its centre.
  for (int j = 0; j < p.area_h; ++j) {
    const int64_t row = std::min<int64_t>(map.rows - 1, static_cast<int64_t>((j + 0.5) * map.rows / p.area_h));
    for (int i = 0; i < p.area_w; ++i) {
      const int64_t col = std::min<int64_t>(map.cols - 1, static_cast<int64_t>((i + 0.5) * map.cols / p.area_w));
      const double v = map.values[row * map.cols + col];
      const Rgb color = !std::isfinite(v) ? kNonFiniteCell : colormap(hi > lo ? (v - lo) / (hi - lo) : 0.5);
      canvas.fill_rect(ax + i, ay + j, 1, 1, color);
    }
  }
  // Frame just outside the cells.
  const double l = ax - 0.5, t = ay - 0.5, r = ax + p.area_w + 0.5, b = ay + p.area_h + 0.5;
  canvas.line(l, t, r, t, kFrame), canvas.line(r, t, r, b, kFrame);
  canvas.line(r, b, l, b, kFrame), canvas.line(l, b, l, t, kFrame);

  const double cell_h = static_cast<double>(p.area_h) / map.rows;
  for (size_t k = 0; k < p.rows.cells.size(); ++k) {
    const double cy = ay + (p.rows.cells[k] + 0.5) * cell_h;
    canvas.line(l - kTickLength, std::floor(cy) + 0.5, l, std::floor(cy) + 0.5, kFrame);
    canvas.text(p.rows.labels[k], l - kTickLength - 3, cy, kTickSize, kInk, Align::end, Align::center);
  }
  const double cell_w = static_cast<double>(p.area_w) / map.cols;
  for (size_t k = 0; k < p.cols.cells.size(); ++k) {
    const double cx = ax + (p.cols.cells[k] + 0.5) * cell_w;
    canvas.line(std::floor(cx) + 0.5, b, std::floor(cx) + 0.5, b + kTickLength, kFrame);
    if (p.cols.upright) {
      canvas.text(p.cols.labels[k], cx, b + kTickLength + 3, kTickSize, kInk, Align::end, Align::center,
                  Rotation::up);
    } else {
      canvas.text(p.cols.labels[k], cx, b + kTickLength + 2, kTickSize, kInk, Align::center);
    }
  }
  if (!map.x_label.empty()) {
    canvas.text(map.x_label, ax + p.area_w / 2.0, b + kTickLength + kGap + p.cols.extent + kGap,
                kLabelSize, kInk, Align::center);
  }
  if (!map.y_label.empty()) {
    canvas.text(map.y_label, x + 2, ay + p.area_h / 2.0, kLabelSize, kInk, Align::center, Align::start,
                Rotation::up);
  }
}

void check_heatmap(const Heatmap& map, size_t index) {
  const std::string name = map.title.empty() ? "heatmap " + std::to_string(index) : "heatmap '" + map.title + "'";
  TG_CHECK(map.rows > 0 && map.cols > 0, name, ": rows and cols must be positive, got ", map.rows, " and ",
           map.cols);
  TG_CHECK(map.rows <= 1'000'000 && map.cols <= 1'000'000 && map.rows * map.cols <= 100'000'000, name,
           ": ", map.rows, "x", map.cols, " is too large to plot");
  TG_CHECK(static_cast<int64_t>(map.values.size()) == map.rows * map.cols, name, ": ", map.values.size(),
           " values for ", map.rows, "x", map.cols, " cells");
  TG_CHECK(map.row_labels.empty() || static_cast<int64_t>(map.row_labels.size()) == map.rows, name, ": ",
           map.row_labels.size(), " row labels for ", map.rows, " rows");
  TG_CHECK(map.col_labels.empty() || static_cast<int64_t>(map.col_labels.size()) == map.cols, name, ": ",
           map.col_labels.size(), " column labels for ", map.cols, " columns");
}

// The colour bar: `height` pixels of the colour map, max at the top, with its min, max and a few
// round values between.
int colorbar_width(double lo, double hi) {
  return 18 + kTickLength + 3 + static_cast<int>(std::ceil(std::max(
                                    Canvas::text_width(format_value(lo), kTickSize),
                                    Canvas::text_width(format_value(hi), kTickSize)))) + 8;
}

void draw_colorbar(Canvas& canvas, int x, int y, int height, double lo, double hi) {
  const int bar_w = 18;
  for (int j = 0; j < height; ++j) {
    canvas.fill_rect(x, y + j, bar_w, 1, colormap(1.0 - (j + 0.5) / height));
  }
  const double l = x - 0.5, t = y - 0.5, r = x + bar_w + 0.5, b = y + height + 0.5;
  canvas.line(l, t, r, t, kFrame), canvas.line(r, t, r, b, kFrame);
  canvas.line(r, b, l, b, kFrame), canvas.line(l, b, l, t, kFrame);
  auto tick = [&](double value, const std::string& label) {
    const double fraction = hi > lo ? (value - lo) / (hi - lo) : 0.5;
    const double cy = y + (1.0 - fraction) * height;
    canvas.line(r, std::floor(cy) + 0.5, r + kTickLength, std::floor(cy) + 0.5, kFrame);
    canvas.text(label, r + kTickLength + 3, cy, kTickSize, kInk, Align::start, Align::center);
  };
  tick(hi, format_value(hi));
  if (!(hi > lo)) return;
  tick(lo, format_value(lo));
  const double step = nice_step(hi - lo, 4);
  const double keep_clear = Canvas::text_height(kTickSize) * 1.2 / height * (hi - lo);
  for (double value : ticks_between(lo, hi, step)) {
    if (value - lo > keep_clear && hi - value > keep_clear) tick(value, format_value(value));
  }
}

}  // namespace

void heatmap_png(const std::string& path, const std::vector<Heatmap>& panels, const std::string& title,
                 std::optional<ColorRange> range) {
  TG_CHECK(!panels.empty(), "heatmap: nothing to plot (no panels)");
  for (size_t i = 0; i < panels.size(); ++i) check_heatmap(panels[i], i);
  TG_CHECK(!range || (std::isfinite(range->lo) && std::isfinite(range->hi) && range->lo < range->hi),
           "heatmap: the colour range [", range->lo, ", ", range->hi,
           "] must be finite with its low end below its high end");

  // One colour scale for every panel: the given range, or the finite values' span.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const Heatmap& map : panels) {
    for (double v : map.values) {
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
    }
  }
  if (!(lo <= hi)) lo = 0, hi = 1;  // nothing finite: every cell is grey
  if (range) lo = range->lo, hi = range->hi;

  const int n = static_cast<int>(panels.size());
  const int grid_cols = static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n))));
  const int grid_rows = (n + grid_cols - 1) / grid_cols;
  const int budget = n == 1 ? 480 : n <= 4 ? 320 : 240;
  std::vector<PanelLayout> layouts;
  int cell_w = 0, cell_h = 0;
  for (const Heatmap& map : panels) {
    layouts.push_back(layout_panel(map, budget));
    cell_w = std::max(cell_w, layouts.back().width);
    cell_h = std::max(cell_h, layouts.back().height);
  }
  const int grid_w = grid_cols * cell_w + (grid_cols - 1) * kMargin;
  const int grid_h = grid_rows * cell_h + (grid_rows - 1) * kMargin;
  const int title_h = title.empty() ? 0 : static_cast<int>(std::ceil(Canvas::text_height(kTitleSize))) + 2 * kGap;
  const int bar_w = colorbar_width(lo, hi);
  const int width = std::max(kMargin + grid_w + kMargin + bar_w + kMargin,
                             static_cast<int>(std::ceil(Canvas::text_width(title, kTitleSize))) + 2 * kMargin);
  // The bar spans the first panel's cells (120 to 400 pixels).
  const PanelLayout& first = layouts[0];
  const int bar_h = std::clamp(first.area_h, 120, 400);
  const int height = std::max(kMargin + title_h + grid_h + kMargin,
                              kMargin + title_h + first.top + bar_h + static_cast<int>(kTickSize) + kMargin);

  Canvas canvas(width, height);
  if (!title.empty()) canvas.text(title, width / 2.0, kMargin, kTitleSize, kInk, Align::center);
  const int grid_x = kMargin, grid_y = kMargin + title_h;
  for (int i = 0; i < n; ++i) {
    const PanelLayout& p = layouts[i];
    const int x = grid_x + (i % grid_cols) * (cell_w + kMargin) + (cell_w - p.width) / 2;
    const int y = grid_y + (i / grid_cols) * (cell_h + kMargin);
    draw_panel(canvas, panels[i], p, x, y, lo, hi);
  }
  draw_colorbar(canvas, kMargin + grid_w + kMargin, grid_y + first.top, bar_h, lo, hi);
  canvas.save_png(path);
}

// ---- Line chart --------------------------------------------------------------------------------

namespace {

// matplotlib's "tab10" colours, its grey last (the nearest to the frame and the grid): the first
// kMaxLinesPerPanel are the small multiples' colours.
constexpr Rgb kPalette[] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},  {214, 39, 40},
                            {148, 103, 189}, {140, 86, 75}, {227, 119, 194}, {188, 189, 34},
                            {23, 190, 207}, {127, 127, 127}};
static_assert(kMaxLinesPerPanel <= std::size(kPalette) - 1, "a panel's lines in distinct colours");

// ---- Axis spans: the difference of two finite doubles may pass DBL_MAX (-1e308 to 1e308 spans
// 2e308) and a tiny one may fall below the smallest double. Spans are taken in long double, whose
// exponent range is wider (x86-64: 80-bit, aarch64: 128-bit), and an axis's ends stay doubles.
static_assert(std::numeric_limits<long double>::max_exponent >
                  std::numeric_limits<double>::max_exponent,
              "plot/charts.cpp takes the spans of doubles in long double");

// Spans narrower than this get widened around their middle: their ticks could not be labelled.
constexpr double kNarrowestAxisSpan = 1e-290;

// hi - lo, without overflow.
long double axis_span_between(double lo, double hi) { return static_cast<long double>(hi) - lo; }

// A long double rounded to the nearest finite double (an axis end past DBL_MAX becomes DBL_MAX).
double axis_end(long double value) {
  const long double largest = std::numeric_limits<double>::max();
  return static_cast<double>(std::clamp(value, -largest, largest));
}

// The span [lo, hi] of an axis's finite values (empty until the first one).
struct Range {
  double lo = std::numeric_limits<double>::infinity(), hi = -std::numeric_limits<double>::infinity();
  void add(double v) {
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  }
  long double span() const { return axis_span_between(lo, hi); }
  // Where v lies along the range: 0 at lo, 1 at hi.
  double fraction(double v) const {
    return static_cast<double>((v - static_cast<long double>(lo)) / span());
  }
  // Widened by `pad` of its span on each side; a single value (or a span too narrow to tick) gets
  // a span around it. The ends stay finite doubles.
  void widen(double pad) {
    if (hi == lo || span() < kNarrowestAxisSpan) {
      const long double middle = (static_cast<long double>(lo) + hi) / 2;
      const long double half =
          middle == 0 ? 1 : std::max<long double>(std::abs(middle) * 0.1L, kNarrowestAxisSpan);
      lo = axis_end(middle - half), hi = axis_end(middle + half);
    }
    const long double padding = pad * span();
    lo = axis_end(lo - padding), hi = axis_end(hi + padding);
  }
};

// The coverage of one stroke over the box [x0, x1) x [y0, y1), kept between strokes (all zero
// then) with the list of pixels the stroke touched: a stroke costs the pixels it covers, not the
// whole box, so that a chart of 16000 series draws in seconds.
struct StrokeCoverage {
  int x0, y0, w, h;
  std::vector<float> coverage;  // [h][w]
  std::vector<size_t> touched;  // indices into coverage that are not zero
  StrokeCoverage(int left, int top, int right, int bottom)
      : x0(left), y0(top), w(right - left), h(bottom - top),
        coverage(static_cast<size_t>(w) * h, 0.0f) {}
  // Raises pixel (i, j)'s coverage to c (the maximum over segments: joints do not darken).
  void cover(int i, int j, double c) {
    if (!(c > 0)) return;
    float& cell = coverage[static_cast<size_t>(j - y0) * w + (i - x0)];
    if (cell == 0) touched.push_back(static_cast<size_t>(j - y0) * w + (i - x0));
    cell = std::max(cell, static_cast<float>(std::min(c, 1.0)));
  }
  // Mixes the stroke into the canvas in `color`, and clears it for the next one.
  void blend_into(Canvas& canvas, Rgb color) {
    for (const size_t at : touched) {
      const int i = x0 + static_cast<int>(at % w), j = y0 + static_cast<int>(at / w);
      canvas.blend(i, j, color, coverage[at]);
      coverage[at] = 0;
    }
    touched.clear();
  }
};

// The columns of the row centred at yc that may lie within `reach` of the segment (x0, y0)-(x1,
// y1): where the segment crosses the band yc +- reach, widened by reach. Empty when first > last.
std::pair<int, int> segment_columns(double x0, double y0, double x1, double y1, double yc,
                                    double reach) {
  double t_first = 0, t_last = 1;  // the part of the segment inside the band
  if (y1 != y0) {
    const double ta = (yc - reach - y0) / (y1 - y0), tb = (yc + reach - y0) / (y1 - y0);
    t_first = std::max(0.0, std::min(ta, tb)), t_last = std::min(1.0, std::max(ta, tb));
  } else if (std::abs(yc - y0) > reach) {
    return {1, 0};
  }
  if (t_first > t_last) return {1, 0};
  const double xa = x0 + t_first * (x1 - x0), xb = x0 + t_last * (x1 - x0);
  return {static_cast<int>(std::floor(std::min(xa, xb) - reach)),
          static_cast<int>(std::ceil(std::max(xa, xb) + reach))};
}

// Adds one anti-aliased segment of the given thickness to the stroke, clipped to its box.
void cover_segment(StrokeCoverage& stroke, double x0, double y0, double x1, double y1,
                   double thickness) {
  const double reach = thickness / 2 + 1;
  const int top = std::max(stroke.y0, static_cast<int>(std::floor(std::min(y0, y1) - reach)));
  const int bottom =
      std::min(stroke.y0 + stroke.h - 1, static_cast<int>(std::ceil(std::max(y0, y1) + reach)));
  for (int j = top; j <= bottom; ++j) {
    const auto [first, last] = segment_columns(x0, y0, x1, y1, j + 0.5, reach);
    const int left = std::max(stroke.x0, first), right = std::min(stroke.x0 + stroke.w - 1, last);
    for (int i = left; i <= right; ++i) {
      stroke.cover(i, j, thickness / 2 + 0.5 - segment_distance(i + 0.5, j + 0.5, x0, y0, x1, y1));
    }
  }
}

// Draws the finite runs of (xs, ys) (already in pixels) as one anti-aliased stroke, clipped to
// the stroke's box.
void polyline(Canvas& canvas, StrokeCoverage& stroke, const std::vector<double>& xs,
              const std::vector<double>& ys, Rgb color, double thickness) {
  for (size_t k = 0; k + 1 < xs.size(); ++k) {
    const double x0 = xs[k], y0 = ys[k], x1 = xs[k + 1], y1 = ys[k + 1];
    if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1)) continue;
    cover_segment(stroke, x0, y0, x1, y1, thickness);
  }
  stroke.blend_into(canvas, color);
}

}  // namespace

// A tick of a log axis at log10(value) = exponent: the value itself, "1e-5" style past 1e+/-3.
std::string format_log_tick(double exponent) {
  char text[64];
  const double rounded = std::round(exponent);
  if (std::abs(exponent - rounded) < 1e-9) {
    if (rounded >= -3 && rounded <= 3) std::snprintf(text, sizeof text, "%g", std::pow(10.0, rounded));
    else std::snprintf(text, sizeof text, "1e%d", static_cast<int>(rounded));
  } else {
    std::snprintf(text, sizeof text, "%.2g", std::pow(10.0, exponent));
  }
  return text;
}


// ---- Line chart steps --------------------------------------------------------------------------

namespace {

constexpr int kAreaW = 640, kAreaH = 400;     // the plot area, in pixels
constexpr int kPanelAreaW = 300, kPanelAreaH = 170;  // a small multiple's
constexpr int kSwatch = 24, kLegendLine = 20;  // a legend entry: its swatch, its line's height
// A legend of more rows would only make the chart taller (1024 layers have over 16000 parameter
// tensors): past kMaxLegendRows, the last row says how many more series are drawn.
constexpr size_t kMaxLegendRows = 40;
constexpr double kMaxLegendNameWidth = 320;  // longer names end in an ellipsis

// What the legend lists: a name per series, or the first kMaxLegendRows - 1 and "... and N more".
struct LegendRows {
  std::vector<std::string> names;
  std::string more;  // empty when every series is named
  int count() const { return static_cast<int>(names.size()) + (more.empty() ? 0 : 1); }
};

LegendRows legend_rows(const std::vector<Series>& series) {
  LegendRows rows;
  const size_t named = series.size() <= kMaxLegendRows ? series.size() : kMaxLegendRows - 1;
  for (size_t k = 0; k < named; ++k) {
    rows.names.push_back(abbreviate(series[k].name, kTickSize, kMaxLegendNameWidth));
  }
  if (named < series.size()) {
    rows.more = "\u2026 and " + std::to_string(series.size() - named) + " more";
  }
  return rows;
}

// The series as drawn. On a log axis everything is drawn in log10(y) (y <= 0 has no place there
// and becomes NaN, a gap); only the tick labels show y itself.
std::vector<Series> on_drawn_scale(const std::vector<Series>& given_series, bool log_y) {
  std::vector<Series> series = given_series;
  if (log_y) {
    for (Series& s : series) {
      for (double& y : s.y) y = y > 0 ? std::log10(y) : std::nan("");
    }
  }
  return series;
}

// The two axes: the span of each and its ticks.
struct LineAxes {
  bool log_y = false;
  Range x, y;
  double x_step = 0, y_step = 0;
  std::vector<double> x_ticks, y_ticks;
  // What a y tick says: on a log axis the value itself, not its log10.
  std::string y_tick_text(double v) const {
    return log_y ? format_log_tick(v) : format_tick(v, y_step);
  }
};

// The spans of the finite points of every series, padded a little on each side.
LineAxes data_ranges(const std::vector<Series>& series, bool log_y) {
  LineAxes axes;
  axes.log_y = log_y;
  for (const Series& s : series) {
    TG_CHECK(s.x.size() == s.y.size(), "line chart: series '", s.name, "' has ", s.x.size(),
             " x values but ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) axes.x.add(s.x[i]), axes.y.add(s.y[i]);
    }
  }
  TG_CHECK(axes.x.lo <= axes.x.hi, "line chart: nothing to plot (no series has a finite",
           log_y ? ", positive point)" : " point)");
  axes.x.widen(0.02);
  axes.y.widen(0.05);
  return axes;
}

// The widest label of the x ticks `step` apart.
double widest_x_label(const Range& x, double step) {
  double widest = 0;
  for (double v : ticks_between(x.lo, x.hi, step)) {
    widest = std::max(widest, Canvas::text_width(format_tick(v, step), kTickSize));
  }
  return widest;
}

// Ticks for a plot area of area_w x area_h: about six a side (four on a small one's y axis),
// fewer when the x labels would collide.
void place_ticks(LineAxes& axes, int area_w, int area_h) {
  const long double x_span = axes.x.span(), y_span = axes.y.span();
  axes.x_step = nice_step(x_span, 6);
  while ((widest_x_label(axes.x, axes.x_step) + 16) * x_span / axes.x_step > area_w) {
    axes.x_step = next_step(axes.x_step);
  }
  axes.y_step = nice_step(y_span, area_h < kAreaH ? 4 : 6);
  if (axes.log_y && y_span >= 2) axes.y_step = std::max(1.0, axes.y_step);  // whole decades
  axes.x_ticks = ticks_between(axes.x.lo, axes.x.hi, axes.x_step);
  axes.y_ticks = ticks_between(axes.y.lo, axes.y.hi, axes.y_step);
}

// How a line chart is drawn: the plot area's size and the title's text size.
struct LineLook {
  int area_w = kAreaW, area_h = kAreaH;
  double title_size = kTitleSize;
};

// The axes placed on the canvas: the plot area's corner, the legend's size, the canvas's size.
struct LineChart {
  LineAxes axes;
  int area_w = kAreaW, area_h = kAreaH;
  double title_size = kTitleSize;
  int left = 0, top = 0;           // the plot area's top-left pixel
  LegendRows legend;
  int legend_w = 0, legend_h = 0;  // the legend box
  int width = 0, height = 0;       // the canvas
  // Pixel coordinates of a data point.
  double px(double x) const { return left + axes.x.fraction(x) * area_w; }
  double py(double y) const { return top + (1 - axes.y.fraction(y)) * area_h; }
};

// Room around the plot area: the y label and tick labels on the left, the title above, the tick
// labels and x label below, the legend on the right (the chart grows taller for a long legend).
LineChart layout_line_chart(LineAxes axes, const std::vector<Series>& series,
                            const std::string& title, const std::string& x_label,
                            const std::string& y_label, const LineLook& look) {
  LineChart c;
  c.axes = std::move(axes);
  c.area_w = look.area_w, c.area_h = look.area_h, c.title_size = look.title_size;
  double y_tick_w = 0;
  for (double v : c.axes.y_ticks) {
    y_tick_w = std::max(y_tick_w, Canvas::text_width(c.axes.y_tick_text(v), kTickSize));
  }
  // Legend entries: a 24-pixel swatch, then the name.
  c.legend = legend_rows(series);
  double legend_text_w = Canvas::text_width(c.legend.more, kTickSize);
  for (const std::string& name : c.legend.names) {
    legend_text_w = std::max(legend_text_w, Canvas::text_width(name, kTickSize));
  }
  c.legend_w = static_cast<int>(std::ceil(8 + kSwatch + 6 + legend_text_w + 8));
  c.legend_h = 8 + kLegendLine * c.legend.count() + 4;

  const double label_line = Canvas::text_height(kLabelSize);
  const double y_label_w = y_label.empty() ? 0 : label_line + kGap;
  c.left = kMargin + static_cast<int>(std::ceil(y_label_w + y_tick_w + kTickLength + kGap));
  const int title_h = static_cast<int>(std::ceil(Canvas::text_height(c.title_size))) + 2 * kGap;
  c.top = kMargin + (title.empty() ? 0 : title_h);
  const double x_label_h = x_label.empty() ? 0 : kGap + label_line;
  const double tick_label_h = Canvas::text_height(kTickSize);
  const int bottom =
      static_cast<int>(std::ceil(kTickLength + kGap + tick_label_h + x_label_h + kMargin));
  const int title_w = static_cast<int>(std::ceil(Canvas::text_width(title, c.title_size)));
  c.width = std::max(c.left + c.area_w + kMargin + c.legend_w + kMargin, title_w + 2 * kMargin);
  // A long legend fits.
  c.height = std::max(c.top + c.area_h + bottom, c.top + c.legend_h + kMargin);
  return c;
}

// The grid, the ticks with their labels, and the frame around the plot area.
void draw_axes(Canvas& canvas, const LineChart& c) {
  const double l = c.left - 0.5, t = c.top - 0.5;
  const double r = c.left + c.area_w + 0.5, b = c.top + c.area_h + 0.5;
  for (double v : c.axes.x_ticks) {
    const double x = std::floor(c.px(v)) + 0.5;
    canvas.line(x, t, x, b, kGrid);
    canvas.line(x, b, x, b + kTickLength, kFrame);
    canvas.text(format_tick(v, c.axes.x_step), x, b + kTickLength + 2, kTickSize, kInk,
                Align::center);
  }
  for (double v : c.axes.y_ticks) {
    const double y = std::floor(c.py(v)) + 0.5;
    canvas.line(l, y, r, y, kGrid);
    canvas.line(l - kTickLength, y, l, y, kFrame);
    canvas.text(c.axes.y_tick_text(v), l - kTickLength - 3, y, kTickSize, kInk, Align::end,
                Align::center);
  }
  canvas.line(l, t, r, t, kFrame), canvas.line(r, t, r, b, kFrame);
  canvas.line(r, b, l, b, kFrame), canvas.line(l, b, l, t, kFrame);
}

// One series as a 2-pixel line through its finite points, clipped to the plot area.
void draw_series(Canvas& canvas, StrokeCoverage& stroke, const LineChart& c, const Series& s,
                 Rgb color) {
  std::vector<double> xs(s.x.size()), ys(s.y.size());
  size_t finite = 0;
  for (size_t i = 0; i < s.x.size(); ++i) {
    const bool ok = std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
    xs[i] = ok ? c.px(s.x[i]) : std::nan("");
    ys[i] = ok ? c.py(s.y[i]) : std::nan("");
    finite += ok ? 1 : 0;
  }
  polyline(canvas, stroke, xs, ys, color, 2.0);
  // Markers when the points are few (a sparse validation curve), and for isolated points.
  for (size_t i = 0; i < xs.size(); ++i) {
    if (!std::isfinite(xs[i])) continue;
    const bool gap_before = i == 0 || !std::isfinite(xs[i - 1]);
    const bool gap_after = i + 1 == xs.size() || !std::isfinite(xs[i + 1]);
    const bool isolated = gap_before && gap_after;
    if (finite <= 60 || isolated) canvas.dot(xs[i], ys[i], 3.0, color);
  }
}

// The title above the plot area, the x label under its tick labels, the y label turned up.
void draw_labels(Canvas& canvas, const LineChart& c, const std::string& title,
                 const std::string& x_label, const std::string& y_label) {
  const double centre_x = c.left + c.area_w / 2.0;
  const double b = c.top + c.area_h + 0.5;  // the bottom of the frame
  if (!title.empty()) canvas.text(title, centre_x, kMargin, c.title_size, kInk, Align::center);
  if (!x_label.empty()) {
    canvas.text(x_label, centre_x, b + kTickLength + kGap + Canvas::text_height(kTickSize) + kGap,
                kLabelSize, kInk, Align::center);
  }
  if (!y_label.empty()) {
    canvas.text(y_label, kMargin, c.top + c.area_h / 2.0, kLabelSize, kInk, Align::center,
                Align::start, Rotation::up);
  }
}

// The legend, right of the plot, level with its top: each series' colour, then its name.
void draw_legend(Canvas& canvas, const LineChart& c) {
  const int lx = c.left + c.area_w + kMargin, ly = c.top;
  const double ll = lx - 0.5, lt = ly - 0.5, lr = lx + c.legend_w - 0.5, lb = ly + c.legend_h - 0.5;
  canvas.line(ll, lt, lr, lt, kGrid), canvas.line(lr, lt, lr, lb, kGrid);
  canvas.line(lr, lb, ll, lb, kGrid), canvas.line(ll, lb, ll, lt, kGrid);
  const std::vector<std::string>& names = c.legend.names;
  for (size_t k = 0; k < names.size(); ++k) {
    const Rgb color = kPalette[k % std::size(kPalette)];
    const double cy = ly + 8 + kLegendLine * (k + 0.5);
    canvas.line(lx + 8, cy, lx + 8 + kSwatch, cy, color, 2.0);
    canvas.text(names[k], lx + 8 + kSwatch + 6, cy, kTickSize, kInk, Align::start, Align::center);
  }
  if (!c.legend.more.empty()) {
    const double cy = ly + 8 + kLegendLine * (names.size() + 0.5);
    canvas.text(c.legend.more, lx + 8 + kSwatch + 6, cy, kTickSize, kInk, Align::start,
                Align::center);
  }
}

// A line chart on a canvas of its own: `series` (on the drawn scale) on `axes` (ticks placed),
// each in its palette colour, with its legend; `placed` gets the layout when given.
Canvas draw_line_chart(const std::vector<Series>& series, const LineAxes& axes,
                       const LineLook& look, const std::string& title, const std::string& x_label,
                       const std::string& y_label, LineChart* placed = nullptr) {
  const LineChart chart = layout_line_chart(axes, series, title, x_label, y_label, look);
  Canvas canvas(chart.width, chart.height);
  draw_axes(canvas, chart);
  StrokeCoverage stroke(chart.left, chart.top, chart.left + chart.area_w,
                        chart.top + chart.area_h);
  for (size_t k = 0; k < series.size(); ++k) {
    draw_series(canvas, stroke, chart, series[k], kPalette[k % std::size(kPalette)]);
  }
  draw_labels(canvas, chart, title, x_label, y_label);
  draw_legend(canvas, chart);
  if (placed != nullptr) *placed = chart;
  return canvas;
}

}  // namespace

void line_chart_png(const std::string& path, const std::vector<Series>& given_series,
                    const std::string& title, const std::string& x_label,
                    const std::string& y_label, YScale y_scale) {
  TG_CHECK(!given_series.empty(), "line chart: nothing to plot (no series)");
  const bool log_y = y_scale == YScale::log;
  const std::vector<Series> series = on_drawn_scale(given_series, log_y);
  LineAxes axes = data_ranges(series, log_y);
  place_ticks(axes, kAreaW, kAreaH);
  draw_line_chart(series, axes, LineLook{}, title, x_label, y_label).save_png(path);
}

// ---- Small multiples ---------------------------------------------------------------------------

namespace {

constexpr int kPanelColumns = 3;

// Each panel's series on the drawn scale, checked: 1 to kMaxLinesPerPanel of them.
std::vector<std::vector<Series>> panels_on_drawn_scale(const std::vector<LinePanel>& panels,
                                                       bool log_y) {
  TG_CHECK(!panels.empty(), "small multiples: nothing to plot (no panels)");
  TG_CHECK(panels.size() <= kMaxPanels, "small multiples: ", panels.size(),
           " panels, more than the ", kMaxPanels, " drawn");
  std::vector<std::vector<Series>> drawn;
  for (const LinePanel& panel : panels) {
    TG_CHECK(!panel.series.empty() && panel.series.size() <= kMaxLinesPerPanel,
             "small multiples: panel '", panel.title, "' has ", panel.series.size(),
             " series (1 to ", kMaxLinesPerPanel, " a panel)");
    drawn.push_back(on_drawn_scale(panel.series, log_y));
  }
  return drawn;
}

// The axes every panel shares: the spans of all their series, ticked for a panel's plot area.
LineAxes shared_panel_axes(const std::vector<std::vector<Series>>& drawn, bool log_y) {
  std::vector<Series> all;
  for (const std::vector<Series>& panel : drawn) all.insert(all.end(), panel.begin(), panel.end());
  LineAxes axes = data_ranges(all, log_y);
  place_ticks(axes, kPanelAreaW, kPanelAreaH);
  return axes;
}

}  // namespace

PanelsPlaced small_multiples_png(const std::string& path, const std::vector<LinePanel>& panels,
                                 const std::string& title, const std::string& x_label,
                                 YScale y_scale) {
  const bool log_y = y_scale == YScale::log;
  const std::vector<std::vector<Series>> drawn = panels_on_drawn_scale(panels, log_y);
  const LineAxes axes = shared_panel_axes(drawn, log_y);
  const LineLook look{.area_w = kPanelAreaW, .area_h = kPanelAreaH, .title_size = kLabelSize};
  std::vector<Canvas> canvases;
  std::vector<LineChart> charts(panels.size());
  int cell_w = 0, cell_h = 0;  // the largest panel's
  for (size_t i = 0; i < panels.size(); ++i) {
    canvases.push_back(draw_line_chart(drawn[i], axes, look, panels[i].title, x_label, "",
                                       &charts[i]));
    cell_w = std::max(cell_w, canvases.back().width());
    cell_h = std::max(cell_h, canvases.back().height());
  }
  const int n = static_cast<int>(panels.size());
  PanelsPlaced placed{.columns = std::min(kPanelColumns, n), .plot_areas = {}, .legends = {}};
  const int rows = (n + placed.columns - 1) / placed.columns;
  const int title_h = static_cast<int>(std::ceil(Canvas::text_height(kTitleSize))) + kMargin;
  const int title_w = static_cast<int>(std::ceil(Canvas::text_width(title, kTitleSize)));
  Canvas canvas(std::max(placed.columns * cell_w, title_w + 2 * kMargin),
                kMargin + title_h + rows * cell_h);
  canvas.text(title, canvas.width() / 2.0, kMargin, kTitleSize, kInk, Align::center);
  for (int i = 0; i < n; ++i) {
    const int x = (i % placed.columns) * cell_w;
    const int y = kMargin + title_h + (i / placed.columns) * cell_h;
    canvas.paste(canvases[i], x, y);
    const LineChart& c = charts[i];
    placed.plot_areas.push_back({x + c.left, y + c.top, c.area_w, c.area_h});
    placed.legends.push_back({x + c.left + c.area_w + kMargin, y + c.top, c.legend_w, c.legend_h});
  }
  canvas.save_png(path);
  return placed;
}

}  // namespace tg::plot
