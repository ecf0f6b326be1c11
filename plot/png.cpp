#include "tapegrad/plot/png.h"

#include <stb/stb_image_write.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iterator>
#include <string_view>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/plot/truetype_check.h"

namespace tg::plot {
// An stb_truetype assertion: a font that passed check_truetype_font but that stb_truetype still
// cannot draw (a format it leaves unimplemented, an outline its rasterizer rejects).
[[noreturn]] void stb_truetype_assertion_failed(const char* condition) {
  fail("font '", font_path(), "' is damaged: stb_truetype cannot draw it (", condition, ")");
}
}  // namespace tg::plot

// libstb (Debian's libstb-dev) carries the compiled stb_image_write, linked with -lstb. Its
// stb_truetype, though, would abort the process on a failed assertion (assert()), so
// stb_truetype is compiled here, into this file alone (STBTT_STATIC), with STBTT_assert throwing
// the tg::Error above instead.
#define STBTT_STATIC
#define STB_TRUETYPE_IMPLEMENTATION
#define STBTT_assert(condition) \
  ((condition) ? static_cast<void>(0) : ::tg::plot::stb_truetype_assertion_failed(#condition))
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include <stb/stb_truetype.h>
#pragma GCC diagnostic pop

namespace tg::plot {

std::string font_path() {
  const char* override_path = std::getenv("TAPEGRAD_FONT");
  const bool overridden = override_path != nullptr && *override_path != '\0';
  return overridden ? override_path : kDefaultFontPath;
}

namespace {

// ---- Font: DejaVu Sans through stb_truetype --------------------------------------------------

// A TrueType font starts with its sfnt version (0x00010000 or 'true'), a collection with 'ttcf';
// 'OTTO' (CFF outlines) stb_truetype reads without bounds checks at all, so it is not taken.
bool is_truetype_signature(const std::string& bytes) {
  const std::string_view start(bytes.data(), std::min<size_t>(bytes.size(), 4));
  return start == std::string_view("\0\1\0\0", 4) || start == "true" || start == "ttcf";
}

struct Font {
  std::vector<unsigned char> bytes;  // the file, then kTrueTypeReadSlack zero bytes
  stbtt_fontinfo info{};
};

Font load_font() {
  const std::string path = font_path();
  const bool overridden = path != kDefaultFontPath;
  const std::string remedy = std::string(" (DejaVu Sans comes with the Debian package ") + kFontPackage +
                             (overridden ? "; this path is from TAPEGRAD_FONT)" : ")");
  std::string bytes;
  try {
    bytes = read_regular_file(path, "font");  // never blocks: TAPEGRAD_FONT may name a FIFO
  } catch (const Error& error) {
    fail(error.what(), remedy);
  }
  TG_CHECK(bytes.size() >= 1024 && is_truetype_signature(bytes), "font '", path,
           "' is not a TrueType font", remedy);
  Font font;
  font.bytes.assign(bytes.begin(), bytes.end());
  font.bytes.resize(bytes.size() + kTrueTypeReadSlack, 0);
  // stb_truetype trusts the font it is given: everything it follows is checked first.
  try {
    check_truetype_font(font.bytes, bytes.size(), path);
  } catch (const Error& error) {
    fail(error.what(), remedy);
  }
  const int offset = stbtt_GetFontOffsetForIndex(font.bytes.data(), 0);
  TG_CHECK(offset >= 0 && stbtt_InitFont(&font.info, font.bytes.data(), offset) != 0, "font '", path,
           "' is not a TrueType font", remedy);
  return font;
}

// Loaded once, on first use (so a missing font only matters to commands that draw text).
const Font& font() {
  static const Font loaded = load_font();
  return loaded;
}

// The glyph a code point is drawn with. A damaged character map may name a glyph the font does
// not have: that one is drawn as glyph 0, the font's "missing character" box, as an unmapped
// code point is (stb_truetype would read its metrics past the hmtx table).
int glyph_of(const Font& f, int point) {
  const int glyph = stbtt_FindGlyphIndex(&f.info, point);
  return glyph >= 0 && glyph < f.info.numGlyphs ? glyph : 0;
}

}  // namespace

// UTF-8 to code points; a malformed byte becomes U+FFFD.
std::vector<int> code_points(const std::string& text) {
  std::vector<int> points;
  for (size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const int length = byte < 0x80 ? 1 : (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3
                                       : (byte >> 3) == 0x1E ? 4 : 0;
    bool valid = length > 0 && i + length <= text.size();
    int point = length == 1 ? byte : length == 2 ? byte & 0x1F : length == 3 ? byte & 0x0F : byte & 0x07;
    for (int k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next >> 6) == 0x2;
      point = (point << 6) | (next & 0x3F);
    }
    points.push_back(valid ? point : 0xFFFD);
    i += valid ? length : 1;
  }
  return points;
}

namespace {

// The glyphs of a UTF-8 text, one a code point.
std::vector<int> glyphs_of(const Font& f, const std::string& text) {
  std::vector<int> glyphs;
  for (const int point : code_points(text)) glyphs.push_back(glyph_of(f, point));
  return glyphs;
}

// A glyph's bitmap is allocated at its box's size: a box of more than 64 em (a damaged glyph
// header; real glyphs span an em or two) is refused rather than allocated.
void check_glyph_box(int width, int height, double size) {
  const double limit = 64 * size + 64;
  TG_CHECK(width <= limit && height <= limit, "font '", font_path(), "' is damaged: a glyph is ",
           width, "x", height, " pixels at text size ", size);
}

// A line of text as an 8-bit coverage bitmap. Column 1 is where the pen starts and row 0 is the
// font's ascent, so the text's box [0, width] x [0, size] starts at bitmap pixel (1, 0).
struct TextBitmap {
  int width = 0, height = 0;
  std::vector<uint8_t> alpha;
};

TextBitmap render_text(const std::string& text, double size) {
  const Font& f = font();
  const float scale = stbtt_ScaleForPixelHeight(&f.info, static_cast<float>(size));
  int ascent = 0, descent = 0, line_gap = 0;
  stbtt_GetFontVMetrics(&f.info, &ascent, &descent, &line_gap);
  const int baseline = static_cast<int>(std::lround(ascent * scale));
  TextBitmap bitmap;
  bitmap.width = static_cast<int>(std::ceil(Canvas::text_width(text, size))) + 3;
  bitmap.height = baseline + static_cast<int>(std::ceil(-descent * scale)) + 2;
  bitmap.alpha.assign(static_cast<size_t>(bitmap.width) * bitmap.height, 0);

  const std::vector<int> glyphs = glyphs_of(f, text);
  double pen = 1.0;
  std::vector<uint8_t> glyph;
  for (size_t i = 0; i < glyphs.size(); ++i) {
    const double shift = pen - std::floor(pen);
    int x0 = 0, y0 = 0, x1 = 0, y1 = 0;
    stbtt_GetGlyphBitmapBoxSubpixel(&f.info, glyphs[i], scale, scale, static_cast<float>(shift),
                                    0.0f, &x0, &y0, &x1, &y1);
    const int w = x1 - x0, h = y1 - y0;
    check_glyph_box(w, h, size);
    if (w > 0 && h > 0) {
      glyph.assign(static_cast<size_t>(w) * h, 0);
      stbtt_MakeGlyphBitmapSubpixel(&f.info, glyph.data(), w, h, w, scale, scale,
                                    static_cast<float>(shift), 0.0f, glyphs[i]);
      const int left = static_cast<int>(std::floor(pen)) + x0, top = baseline + y0;
      for (int gy = 0; gy < h; ++gy) {
        for (int gx = 0; gx < w; ++gx) {
          const int bx = left + gx, by = top + gy;
          if (bx < 0 || by < 0 || bx >= bitmap.width || by >= bitmap.height) continue;
          uint8_t& cell = bitmap.alpha[static_cast<size_t>(by) * bitmap.width + bx];
          cell = static_cast<uint8_t>(std::min(255, cell + glyph[static_cast<size_t>(gy) * w + gx]));
        }
      }
    }
    int advance = 0, bearing = 0;
    stbtt_GetGlyphHMetrics(&f.info, glyphs[i], &advance, &bearing);
    pen += advance * scale;
    if (i + 1 < glyphs.size()) pen += scale * stbtt_GetGlyphKernAdvance(&f.info, glyphs[i], glyphs[i + 1]);
  }
  return bitmap;
}

double align_offset(Align align, double extent) {
  return align == Align::start ? 0.0 : align == Align::center ? -extent / 2 : -extent;
}

void append_bytes(void* context, void* data, int size) {
  auto* out = static_cast<std::vector<uint8_t>*>(context);
  const auto* bytes = static_cast<const uint8_t*>(data);
  out->insert(out->end(), bytes, bytes + size);
}

}  // namespace

// Distance from (px, py) to the segment (x0, y0)-(x1, y1).
double segment_distance(double px, double py, double x0, double y0, double x1, double y1) {
  const double dx = x1 - x0, dy = y1 - y0;
  const double length2 = dx * dx + dy * dy;
  const double t = length2 > 0 ? std::clamp(((px - x0) * dx + (py - y0) * dy) / length2, 0.0, 1.0) : 0.0;
  return std::hypot(px - (x0 + t * dx), py - (y0 + t * dy));
}

// ---- Colour map --------------------------------------------------------------------------------

Rgb colormap(double t) {
  // Nine samples of matplotlib's viridis, linearly interpolated.
  static constexpr Rgb kStops[] = {{68, 1, 84},    {71, 44, 122},  {59, 81, 139},
                                   {44, 113, 142}, {33, 144, 141}, {39, 173, 129},
                                   {92, 200, 99},  {170, 220, 50}, {253, 231, 37}};
  constexpr int kLast = static_cast<int>(std::size(kStops)) - 1;
  if (!(t > 0)) t = 0;  // also NaN
  t = std::min(t, 1.0) * kLast;
  const int i = std::min(static_cast<int>(t), kLast - 1);
  const double f = t - i;
  auto mix = [f](uint8_t a, uint8_t b) { return static_cast<uint8_t>(std::lround(a + (b - a) * f)); };
  return {mix(kStops[i].r, kStops[i + 1].r), mix(kStops[i].g, kStops[i + 1].g),
          mix(kStops[i].b, kStops[i + 1].b)};
}

// ---- Canvas ------------------------------------------------------------------------------------

Canvas::Canvas(int width, int height, Rgb background) : width_(width), height_(height) {
  TG_CHECK(width > 0 && height > 0 && width <= 16384 && height <= 16384,
           "canvas: size ", width, "x", height, " is not between 1x1 and 16384x16384");
  rgb_.resize(static_cast<size_t>(width) * height * 3);
  fill(background);
}

Rgb Canvas::pixel(int x, int y) const {
  TG_CHECK(x >= 0 && y >= 0 && x < width_ && y < height_, "canvas: pixel (", x, ", ", y,
           ") is outside ", width_, "x", height_);
  const uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  return {p[0], p[1], p[2]};
}

void Canvas::fill(Rgb color) { fill_rect(0, 0, width_, height_, color); }

void Canvas::paste(const Canvas& other, int x, int y) {
  for (int j = std::max(0, -y); j < other.height_ && y + j < height_; ++j) {
    for (int i = std::max(0, -x); i < other.width_ && x + i < width_; ++i) {
      const uint8_t* from = &other.rgb_[(static_cast<size_t>(j) * other.width_ + i) * 3];
      uint8_t* to = &rgb_[(static_cast<size_t>(y + j) * width_ + x + i) * 3];
      to[0] = from[0], to[1] = from[1], to[2] = from[2];
    }
  }
}

void Canvas::fill_rect(int x, int y, int w, int h, Rgb color) {
  const int x0 = std::max(x, 0), y0 = std::max(y, 0);
  const int x1 = std::min(x + w, width_), y1 = std::min(y + h, height_);
  for (int j = y0; j < y1; ++j) {
    for (int i = x0; i < x1; ++i) {
      uint8_t* p = &rgb_[(static_cast<size_t>(j) * width_ + i) * 3];
      p[0] = color.r, p[1] = color.g, p[2] = color.b;
    }
  }
}

void Canvas::blend(int x, int y, Rgb color, double alpha) {
  if (x < 0 || y < 0 || x >= width_ || y >= height_ || !(alpha > 0)) return;
  alpha = std::min(alpha, 1.0);
  uint8_t* p = &rgb_[(static_cast<size_t>(y) * width_ + x) * 3];
  auto mix = [alpha](uint8_t under, uint8_t over) {
    return static_cast<uint8_t>(std::lround(under + (over - under) * alpha));
  };
  p[0] = mix(p[0], color.r), p[1] = mix(p[1], color.g), p[2] = mix(p[2], color.b);
}

void Canvas::line(double x0, double y0, double x1, double y1, Rgb color, double thickness) {
  // Coverage of each pixel: how far its centre lies inside the stroke, clamped to [0, 1].
  const double reach = thickness / 2 + 1;
  const int left = static_cast<int>(std::floor(std::min(x0, x1) - reach));
  const int right = static_cast<int>(std::ceil(std::max(x0, x1) + reach));
  const int top = static_cast<int>(std::floor(std::min(y0, y1) - reach));
  const int bottom = static_cast<int>(std::ceil(std::max(y0, y1) + reach));
  for (int j = std::max(top, 0); j <= std::min(bottom, height_ - 1); ++j) {
    for (int i = std::max(left, 0); i <= std::min(right, width_ - 1); ++i) {
      const double distance = segment_distance(i + 0.5, j + 0.5, x0, y0, x1, y1);
      blend(i, j, color, std::clamp(thickness / 2 + 0.5 - distance, 0.0, 1.0));
    }
  }
}

void Canvas::dot(double x, double y, double radius, Rgb color) { line(x, y, x, y, color, 2 * radius); }

double Canvas::text_width(const std::string& text, double size) {
  const Font& f = font();
  const float scale = stbtt_ScaleForPixelHeight(&f.info, static_cast<float>(size));
  const std::vector<int> glyphs = glyphs_of(f, text);
  double width = 0;
  for (size_t i = 0; i < glyphs.size(); ++i) {
    int advance = 0, bearing = 0;
    stbtt_GetGlyphHMetrics(&f.info, glyphs[i], &advance, &bearing);
    width += advance * scale;
    if (i + 1 < glyphs.size()) width += scale * stbtt_GetGlyphKernAdvance(&f.info, glyphs[i], glyphs[i + 1]);
  }
  return width;
}

double Canvas::text_height(double size) { return size; }

void Canvas::text(const std::string& text, double x, double y, double size, Rgb color, Align along,
                  Align across, Rotation rotation) {
  if (text.empty()) return;
  const TextBitmap bitmap = render_text(text, size);
  // The anchor's offset within the text's box, in the text's own frame (u along, v across).
  const double u0 = align_offset(along, text_width(text, size));
  const double v0 = align_offset(across, text_height(size));
  for (int j = 0; j < bitmap.height; ++j) {
    for (int i = 0; i < bitmap.width; ++i) {
      const uint8_t a = bitmap.alpha[static_cast<size_t>(j) * bitmap.width + i];
      if (a == 0) continue;
      if (rotation == Rotation::none) {
        blend(static_cast<int>(std::lround(x + u0)) + i - 1, static_cast<int>(std::lround(y + v0)) + j,
              color, a / 255.0);
      } else {  // (u, v) -> (x + v, y - u): the text reads upwards
        blend(static_cast<int>(std::lround(x + v0)) + j, static_cast<int>(std::lround(y - u0)) - i,
              color, a / 255.0);
      }
    }
  }
}

void Canvas::save_png(const std::string& path) const {
  TG_CHECK(!path.empty(), "cannot write a PNG to an empty path");
  std::vector<uint8_t> png;
  TG_CHECK(stbi_write_png_to_func(append_bytes, &png, width_, height_, 3, rgb_.data(), width_ * 3) != 0 &&
               !png.empty(),
           "cannot write '", path, "': PNG encoding failed");
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(png.data()), png.size()),
                        "save_png");
}

}  // namespace tg::plot
