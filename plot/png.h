#pragma once
// PNG plots: a small RGB canvas (fill, anti-aliased lines, anti-aliased text, a viridis colour
// map) written with stb_image_write, text drawn with stb_truetype in DejaVu Sans, and charts
// on top of it: heatmaps, line charts and small multiples of line charts. Every failure is a
// tg::Error; a failed save leaves an existing file untouched (the PNG goes to a temporary file
// that is renamed into place).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tg::plot {

// The font every label is drawn in. Debian's fonts-dejavu-core installs it; the environment
// variable TAPEGRAD_FONT names another TrueType file instead.
inline constexpr const char* kDefaultFontPath = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
inline constexpr const char* kFontPackage = "fonts-dejavu-core";
// The font file the plots read: TAPEGRAD_FONT when set and not empty, else kDefaultFontPath.
// Commands list it among their inputs, so that no --out can replace it.
std::string font_path();

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Rgb&) const = default;
};

inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};

// Viridis-like colour map: t in [0, 1] (clamped) from dark purple through teal to yellow.
Rgb colormap(double t);

// Where a text's anchor point sits on the text, along and across its reading direction.
enum class Align { start, center, end };
// Horizontal text, or text turned a quarter turn anticlockwise (read from bottom to top).
enum class Rotation { none, up };

class Canvas {
 public:
  Canvas(int width, int height, Rgb background = kWhite);

  int width() const { return width_; }
  int height() const { return height_; }
  Rgb pixel(int x, int y) const;

  void fill(Rgb color);
  // The pixels [x, x + w) x [y, y + h), clipped to the canvas.
  void fill_rect(int x, int y, int w, int h, Rgb color);
  // Copies `other` onto this canvas with its top-left corner at (x, y), clipped to the canvas.
  void paste(const Canvas& other, int x, int y);
  // Mixes `color` into one pixel with opacity alpha in [0, 1]; outside the canvas does nothing.
  void blend(int x, int y, Rgb color, double alpha);
  // An anti-aliased segment of the given thickness between two points in pixel coordinates
  // (pixel (i, j) covers [i, i + 1] x [j, j + 1]).
  void line(double x0, double y0, double x1, double y1, Rgb color, double thickness = 1.0);
  // A filled anti-aliased disc.
  void dot(double x, double y, double radius, Rgb color);

  // Anti-aliased UTF-8 text, `size` pixels from the font's ascent to its descent. `along` places
  // the anchor at the start, centre or end of the text in its reading direction; `across` at
  // its top, middle or bottom.
  void text(const std::string& text, double x, double y, double size, Rgb color,
            Align along = Align::start, Align across = Align::start,
            Rotation rotation = Rotation::none);
  // The size of a text in pixels, along its reading direction and across it.
  static double text_width(const std::string& text, double size);
  static double text_height(double size);

  // Writes the canvas as an RGB PNG: to a temporary file next to `path`, renamed over it
  // (write_file_atomically in io/file_io.h: a symbolic link is followed, and a directory, FIFO,
  // socket or device at `path` is refused).
  void save_png(const std::string& path) const;

 private:
  int width_, height_;
  std::vector<uint8_t> rgb_;  // row-major, 3 bytes a pixel
};

// ---- Charts ----------------------------------------------------------------------------------

// UTF-8 to code points; a malformed byte becomes U+FFFD.
std::vector<int> code_points(const std::string& text);
// Distance from (px, py) to the segment (x0, y0)-(x1, y1), for anti-aliased lines.
double segment_distance(double px, double py, double x0, double y0, double x1, double y1);

// One matrix: values row-major [rows, cols]. Labels are optional: empty, or one per row/column.
struct Heatmap {
  std::string title;
  int64_t rows = 0, cols = 0;
  std::vector<double> values;
  std::vector<std::string> row_labels, col_labels;
  std::string x_label, y_label;
};

// The values a heatmap's colours span, matplotlib's vmin and vmax: lo gets colormap(0), hi
// colormap(1), and values beyond them the colour at their end (clamped).
struct ColorRange {
  double lo = 0, hi = 1;
};

// The colour of a cell whose value is NaN or infinite: a grey that the colour map never gives.
// Such cells take no part in the colour scale.
inline constexpr Rgb kNonFiniteCell{200, 200, 200};

// One panel per heatmap in a grid under `title`, row 0 at the top, and one colour bar (shared by
// every panel) from the smallest finite value to the largest, or over `range` when given (finite,
// lo < hi). Labelled rows/columns show their labels (turned upright when they do not fit across
// a column, shortened with an ellipsis when long, every k-th when there are too many); otherwise
// rows and columns get numeric ticks every few cells.
void heatmap_png(const std::string& path, const std::vector<Heatmap>& panels,
                 const std::string& title, std::optional<ColorRange> range = std::nullopt);

// y against x; a series may skip points by setting y to NaN (the line breaks there).
struct Series {
  std::string name;
  std::vector<double> x, y;
};

enum class YScale { linear, log };

// Every series in its own colour on shared axes with numeric ticks and a grid, and a legend (the
// chart grows taller when the legend needs it; past 40 series it names the first 39 and says how
// many more are drawn). YScale::log draws log10(y), ticked with the values themselves; points with
// y <= 0 have no place on it and are skipped like NaN. Any finite values are drawn, -1e308 to 1e308
// included (the axes' spans are taken in long double).
void line_chart_png(const std::string& path, const std::vector<Series>& series,
                    const std::string& title, const std::string& x_label,
                    const std::string& y_label, YScale y_scale = YScale::linear);

// ---- Small multiples: one small line chart a panel, for many series grouped a few a panel.

inline constexpr size_t kMaxLinesPerPanel = 8;  // each in its own colour, none of them grey
inline constexpr size_t kMaxPanels = 48;        // 3 columns of 16

struct LinePanel {
  std::string title;
  std::vector<Series> series;  // 1 to kMaxLinesPerPanel
};

// Where a panel landed in the PNG, in pixels: a box's top-left corner and size.
struct PanelBox {
  int x = 0, y = 0, width = 0, height = 0;
};
struct PanelsPlaced {
  int columns = 0;
  std::vector<PanelBox> plot_areas, legends;  // one each a panel, in the panels' order
};

// The panels in a grid of up to three columns under `title` (which says what y is), read left
// to right and down. Every panel has the same axes (the spans of all the series together, so
// that panels compare at a glance), `x_label` under its x axis, its title above it and its own
// legend on its right: series k of a panel is drawn in colour k (the line chart's first
// kMaxLinesPerPanel, all distinct). Returns where each panel's plot area and legend landed.
PanelsPlaced small_multiples_png(const std::string& path, const std::vector<LinePanel>& panels,
                                 const std::string& title, const std::string& x_label,
                                 YScale y_scale = YScale::linear);

}  // namespace tg::plot
