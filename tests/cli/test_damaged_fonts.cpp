// A damaged font named by TAPEGRAD_FONT (truncated, a zeroed table directory, a glyph made of
// itself, bytes flipped at random): the plot is drawn, or the run ends with one line naming the
// font and exit code 2. Never a crash, an abort or a hang.
#include <cstdint>
#include <random>

#include "tests/cli/cli_support.h"

using namespace tg::testing;

// In a namespace of its own, test cases included: the tests are compiled a few files together.
namespace damaged_fonts {

const std::string kDejaVu = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

uint32_t u16(const std::string& font, size_t at) {
  return (uint32_t{static_cast<unsigned char>(font[at])} << 8) | static_cast<unsigned char>(font[at + 1]);
}
uint32_t u32(const std::string& font, size_t at) { return (u16(font, at) << 16) | u16(font, at + 2); }
void put16(std::string& font, size_t at, uint32_t value) {
  font[at] = static_cast<char>(value >> 8);
  font[at + 1] = static_cast<char>(value & 0xff);
}

// Where a table starts in a TrueType file (the table directory: 12 bytes, then 16 a table).
size_t table_offset(const std::string& font, const std::string& tag) {
  for (size_t i = 0; i < u16(font, 4); ++i) {
    if (font.compare(12 + 16 * i, 4, tag) == 0) return u32(font, 12 + 16 * i + 8);
  }
  FAIL("no table " << tag);
  return 0;
}

// `plot loss` with TAPEGRAD_FONT set to `font` (written to a file in `dir`).
CliResult plot_with_font(const TempDir& dir, const std::string& font) {
  write_bytes(dir.file("font.ttf"), font);
  return run_cli("plot loss --threads 1 --log " + dir.file("loss.csv") + " --out " + dir.file("loss.png"),
                 dir, "env TAPEGRAD_FONT='" + dir.file("font.ttf") + "' timeout 60");
}

// Drawn (exit 0, the PNG written), or refused with one line that names the font (exit 2).
void require_drawn_or_refused(const CliResult& run, const TempDir& dir) {
  INFO("exit " << run.exit_code << ", stderr: " << run.err);
  if (run.exit_code == 0) {
    CHECK(std::filesystem::exists(dir.file("loss.png")));
  } else {
    require_one_line_error(run, "font '" + dir.file("font.ttf") + "'");
  }
}

struct FontFixture {
  TempDir dir;
  std::string dejavu;
  FontFixture() {
    if (!std::filesystem::exists(kDejaVu)) return;
    dejavu = read_bytes(kDejaVu);
    write_bytes(dir.file("loss.csv"), "step,epoch,loss,lr,ms\n1,0,2.5,0.1,5\n2,0,2.0,0.1,5\n");
  }
};


TEST_CASE("a truncated font is refused with one line at any length", "[cli][plot][font][reliability]") {
  FontFixture fixture;
  if (fixture.dejavu.empty()) {
    WARN("DejaVu Sans is not installed: nothing to damage");
    return;
  }
  const std::string& font = fixture.dejavu;
  std::vector<size_t> lengths = {0, 4, 12, 100, 1023, 1024, 1100, font.size() - 1};
  for (size_t length = 2000; length < font.size(); length += font.size() / 23) lengths.push_back(length);
  for (const size_t length : lengths) {
    INFO("the first " << length << " bytes");
    const CliResult run = plot_with_font(fixture.dir, font.substr(0, length));
    require_one_line_error(run, "font '" + fixture.dir.file("font.ttf") + "'");
  }
  // The whole font draws.
  REQUIRE(plot_with_font(fixture.dir, font).exit_code == 0);
}

TEST_CASE("damaged font tables are refused before stb_truetype reads them", "[cli][plot][font][reliability]") {
  FontFixture fixture;
  if (fixture.dejavu.empty()) {
    WARN("DejaVu Sans is not installed: nothing to damage");
    return;
  }
  const std::string& dejavu = fixture.dejavu;
  const std::string path = "font '" + fixture.dir.file("font.ttf") + "' is damaged: ";
  SECTION("a zeroed table directory") {
    std::string font = dejavu;
    std::fill(font.begin() + 12, font.begin() + 12 + 16 * u16(font, 4), '\0');
    require_one_line_error(plot_with_font(fixture.dir, font), path);
  }
  SECTION("a table directory of 65535 tables") {
    std::string font = dejavu;
    put16(font, 4, 0xffff);
    require_one_line_error(plot_with_font(fixture.dir, font), "table directory");
  }
  SECTION("head.indexToLocFormat neither 0 nor 1") {
    std::string font = dejavu;
    put16(font, table_offset(font, "head") + 50, 7);
    require_one_line_error(plot_with_font(fixture.dir, font), path + "head.indexToLocFormat is 7");
  }
  SECTION("hhea's ascent equal to its descent (the text scale divides by their difference)") {
    std::string font = dejavu;
    const size_t hhea = table_offset(font, "hhea");
    put16(font, hhea + 6, u16(font, hhea + 4));
    require_one_line_error(plot_with_font(fixture.dir, font), path + "hhea's ascent - descent");
  }
  SECTION("a loca offset past the glyf table") {
    std::string font = dejavu;
    const bool long_offsets = u16(font, table_offset(font, "head") + 50) == 1;
    const size_t loca = table_offset(font, "loca");
    if (long_offsets) {
      font.replace(loca + 4 * 36, 4, std::string("\x7f\xff\xff\xff", 4));
    } else {
      put16(font, loca + 2 * 36, 0xffff);
    }
    require_one_line_error(plot_with_font(fixture.dir, font), path + "loca puts glyph 36");
  }
  SECTION("a composite glyph made of itself") {
    std::string font = dejavu;
    const bool long_offsets = u16(font, table_offset(font, "head") + 50) == 1;
    const size_t loca = table_offset(font, "loca"), glyf = table_offset(font, "glyf");
    const uint32_t glyphs = u16(font, table_offset(font, "maxp") + 4);
    bool found = false;
    for (uint32_t g = 0; g < glyphs && !found; ++g) {
      const size_t start = glyf + (long_offsets ? u32(font, loca + 4 * g) : 2 * u16(font, loca + 2 * g));
      const size_t end = glyf + (long_offsets ? u32(font, loca + 4 * g + 4) : 2 * u16(font, loca + 2 * g + 2));
      if (start == end || static_cast<int16_t>(u16(font, start)) >= 0) continue;
      put16(font, start + 12, g);  // the first component's glyph index: the glyph itself
      found = true;
    }
    REQUIRE(found);
    require_one_line_error(plot_with_font(fixture.dir, font), path + "composite glyphs nest");
  }
}

TEST_CASE("a font with bytes flipped at random is drawn or refused, never a crash",
          "[cli][plot][font][reliability]") {
  FontFixture fixture;
  if (fixture.dejavu.empty()) {
    WARN("DejaVu Sans is not installed: nothing to damage");
    return;
  }
  std::mt19937 random(20240611);  // fixed: the same fonts on every run
  const auto position = [&](size_t below) { return std::uniform_int_distribution<size_t>(0, below - 1)(random); };
  for (int trial = 0; trial < 48; ++trial) {
    std::string font = fixture.dejavu;
    // A third flips a few bits in the first 64 KiB (the directory and the small tables), a third
    // sets bytes anywhere, a third writes 16-bit values into the headers.
    const int changes = 1 + static_cast<int>(position(8));
    for (int c = 0; c < changes; ++c) {
      if (trial % 3 == 0) {
        font[position(65536)] ^= static_cast<char>(1 << position(8));
      } else if (trial % 3 == 1) {
        font[position(font.size())] = static_cast<char>(position(256));
      } else {
        put16(font, position(600), static_cast<uint32_t>(position(65536)));
      }
    }
    INFO("trial " << trial);
    require_drawn_or_refused(plot_with_font(fixture.dir, font), fixture.dir);
  }
}

}  // namespace damaged_fonts
