// What stb_truetype follows in a font, checked before it follows it (plot/truetype_check.h).
// The offsets and fields are the OpenType specification's; the walks mirror stb_truetype's own
// (stbtt_InitFont, stbtt__GetGlyphShapeTT, stbtt__GetGlyphGPOSInfoAdvance), so that whatever it
// will read has been read here first, with bounds.
#include "tapegrad/plot/truetype_check.h"

#include <cstdint>
#include <utility>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/quoted_text.h"

namespace tg::plot {
namespace {

constexpr uint64_t kMaxFontBytes = uint64_t{1} << 28;  // 256 MiB: stb_truetype's offsets are int
constexpr int kMaxComponentDepth = 32;                 // composite glyphs in composite glyphs
constexpr int64_t kMaxShapeVertices = int64_t{1} << 20;  // what one glyph's outline may allocate
constexpr int kMaxComponents = 4096;                   // components of one composite glyph
constexpr uint64_t kMaxPairSubtables = uint64_t{1} << 16;  // GPOS subtables walked per kerning pair

// A table of the directory: where it starts in the file and how long it is.
struct Table {
  uint64_t offset = 0, length = 0;
  bool present = false;
};

// The font's bytes (the file, then kTrueTypeReadSlack zeros), read big-endian at 64-bit
// positions: a read past the slack is damage, never a read outside the buffer.
class FontBytes {
 public:
  FontBytes(const std::vector<unsigned char>& bytes, uint64_t file_size, const std::string& path)
      : bytes_(bytes), file_size_(file_size), path_(path) {}

  uint64_t file_size() const { return file_size_; }

  uint32_t u8(uint64_t at) const { return bytes_[checked(at, 1)]; }
  uint32_t u16(uint64_t at) const { return (u8(at) << 8) | u8(at + 1); }
  uint32_t u32(uint64_t at) const { return (u16(at) << 16) | u16(at + 2); }
  int32_t s16(uint64_t at) const { return static_cast<int16_t>(u16(at)); }
  bool tag_is(uint64_t at, const char* tag) const {
    for (int i = 0; i < 4; ++i) {
      if (u8(at + i) != static_cast<unsigned char>(tag[i])) return false;
    }
    return true;
  }

  template <typename... Parts>
  [[noreturn]] void damaged(const Parts&... parts) const {
    fail("font '", path_, "' is damaged: ", parts...);
  }
  // A table's [offset, offset + length) inside the file, and at least `minimum` bytes long.
  void require_table(const Table& table, const char* tag, uint64_t minimum) const {
    if (!table.present) damaged("it has no '", tag, "' table");
    if (table.length < minimum) {
      damaged("its '", tag, "' table is ", table.length, " bytes, less than the ", minimum, " it needs");
    }
  }
  // [start, start + length) inside the file; `what` names it in the error.
  void require_inside(uint64_t start, uint64_t length, const std::string& what) const {
    if (start > file_size_ || length > file_size_ - start) {
      damaged(what, " (bytes ", start, " to ", start + length, ") runs past the end of the file (",
              file_size_, " bytes)");
    }
  }

 private:
  uint64_t checked(uint64_t at, uint64_t count) const {
    if (at > bytes_.size() || count > bytes_.size() - at) {
      damaged("an offset leads to byte ", at, ", past the end of the file (", file_size_, " bytes)");
    }
    return at;
  }

  const std::vector<unsigned char>& bytes_;
  uint64_t file_size_;
  const std::string& path_;
};

// The tables stb_truetype reads, found as it finds them: the first directory entry of each tag.
struct Tables {
  Table cmap, head, hhea, hmtx, loca, glyf, maxp, gpos;
};

// Where the (first) font starts: 0, or the first offset of a TrueType collection ('ttcf').
uint64_t font_start(const FontBytes& f) {
  f.require_inside(0, 12, "the file header");
  if (!f.tag_is(0, "ttcf")) return 0;
  f.require_inside(0, 16, "the collection header");
  if (f.u32(8) == 0) f.damaged("the collection holds no font");
  return f.u32(12);
}

Tables read_table_directory(const FontBytes& f, uint64_t start) {
  f.require_inside(start, 12, "the table directory's header");
  if (f.u32(start) != 0x00010000 && !f.tag_is(start, "true")) {
    f.damaged("its font does not start with a TrueType version (0x00010000 or 'true')");
  }
  const uint64_t count = f.u16(start + 4);
  f.require_inside(start + 12, 16 * count, "the table directory of " + std::to_string(count) + " tables");
  Tables tables;
  std::pair<const char*, Table*> wanted[] = {
      {"cmap", &tables.cmap}, {"head", &tables.head}, {"hhea", &tables.hhea}, {"hmtx", &tables.hmtx},
      {"loca", &tables.loca}, {"glyf", &tables.glyf}, {"maxp", &tables.maxp}, {"GPOS", &tables.gpos}};
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t entry = start + 12 + 16 * i;
    Table table{f.u32(entry + 8), f.u32(entry + 12), true};
    std::string tag(4, ' ');
    for (int k = 0; k < 4; ++k) tag[k] = static_cast<char>(f.u8(entry + k));
    // Every table, not only the ones read below: stb_truetype also looks up kern (and others).
    f.require_inside(table.offset, table.length, "the " + quoted_text(tag) + " table");
    for (auto& [name, slot] : wanted) {
      if (!slot->present && tag == name) *slot = table;
    }
  }
  return tables;
}

// The font's metrics stb_truetype computes with.
struct Metrics {
  uint32_t glyphs = 0;          // maxp.numGlyphs
  bool long_offsets = false;    // head.indexToLocFormat == 1: loca holds 32-bit offsets
  uint32_t units_per_em = 0;
};

Metrics check_metrics(const FontBytes& f, const Tables& t) {
  f.require_table(t.head, "head", 54);
  f.require_table(t.hhea, "hhea", 36);
  f.require_table(t.maxp, "maxp", 6);
  Metrics m;
  const uint32_t format = f.u16(t.head.offset + 50);
  if (format > 1) f.damaged("head.indexToLocFormat is ", format, " (0 or 1)");
  m.long_offsets = format == 1;
  m.units_per_em = f.u16(t.head.offset + 18);
  if (m.units_per_em < 16 || m.units_per_em > 16384) {
    f.damaged("head.unitsPerEm is ", m.units_per_em, " (16 to 16384)");
  }
  // The text scale is the pixel height over (ascent - descent).
  const int64_t height = int64_t{f.s16(t.hhea.offset + 4)} - f.s16(t.hhea.offset + 6);
  if (height < m.units_per_em / 4 || height > 16 * int64_t{m.units_per_em}) {
    f.damaged("hhea's ascent - descent is ", height, " units, for ", m.units_per_em,
              " units per em");
  }
  m.glyphs = f.u16(t.maxp.offset + 4);
  if (m.glyphs == 0) f.damaged("maxp says it has no glyphs");
  return m;
}

// hmtx: numberOfHMetrics advance widths (and bearings), each at most 16 em (the text width is
// their sum).
void check_advances(const FontBytes& f, const Tables& t, const Metrics& m) {
  const uint64_t count = f.u16(t.hhea.offset + 34);
  if (count == 0) f.damaged("hhea.numberOfHMetrics is 0");
  f.require_table(t.hmtx, "hmtx", 4 * count);
  for (uint64_t i = 0; i < count; ++i) {
    const uint32_t advance = f.u16(t.hmtx.offset + 4 * i);
    if (advance > 16 * m.units_per_em) {
      f.damaged("glyph ", i, "'s advance width is ", advance, " units, for ", m.units_per_em,
                " units per em");
    }
  }
}

// loca: numGlyphs + 1 offsets into glyf, each inside it (with a glyph's 10-byte header).
std::vector<uint64_t> read_glyph_offsets(const FontBytes& f, const Tables& t, const Metrics& m) {
  const uint64_t entry = m.long_offsets ? 4 : 2;
  f.require_table(t.loca, "loca", (uint64_t{m.glyphs} + 1) * entry);
  f.require_table(t.glyf, "glyf", 0);
  std::vector<uint64_t> offsets(m.glyphs + 1);
  for (uint64_t i = 0; i <= m.glyphs; ++i) {
    const uint64_t at = t.loca.offset + i * entry;
    offsets[i] = m.long_offsets ? f.u32(at) : 2 * uint64_t{f.u16(at)};
    if (offsets[i] > t.glyf.length) {
      f.damaged("loca puts glyph ", i, " at byte ", offsets[i], " of a glyf table of ", t.glyf.length);
    }
  }
  for (uint64_t i = 0; i < m.glyphs; ++i) {
    if (offsets[i] != offsets[i + 1] && offsets[i] + 10 > t.glyf.length) {
      f.damaged("glyph ", i, "'s header runs past the glyf table");
    }
  }
  return offsets;
}

// The character map stb_truetype picks (the last Unicode one of the directory) must be of a
// format it reads, and every subtable's header inside cmap.
void check_character_map(const FontBytes& f, const Tables& t) {
  f.require_table(t.cmap, "cmap", 4);
  const uint64_t count = f.u16(t.cmap.offset + 2);
  f.require_table(t.cmap, "cmap", 4 + 8 * count);
  uint64_t chosen = 0;
  bool found = false;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t record = t.cmap.offset + 4 + 8 * i;
    const uint64_t subtable = f.u32(record + 4);
    if (subtable + 4 > t.cmap.length) f.damaged("cmap subtable ", i, " starts past the cmap table");
    const uint32_t platform = f.u16(record), encoding = f.u16(record + 2);
    if (platform == 0 || (platform == 3 && (encoding == 1 || encoding == 10))) {
      chosen = subtable;
      found = true;
    }
  }
  if (!found) return;  // stbtt_InitFont refuses it: "not a TrueType font"
  const uint64_t at = t.cmap.offset + chosen;
  const uint32_t format = f.u16(at);
  if (format == 12 || format == 13) {  // 32-bit counts: the groups must be in the file
    f.require_inside(at, 16, "the cmap format " + std::to_string(format) + " header");
    f.require_inside(at + 16, 12 * uint64_t{f.u32(at + 12)}, "the cmap groups");
  } else if (format != 0 && format != 4 && format != 6) {
    f.damaged("its Unicode cmap is of format ", format, " (stb_truetype reads 0, 4, 6, 12 and 13)");
  }
}

// The vertices stb_truetype allocates for each glyph's outline, composite glyphs expanded:
// computed once a glyph, with a glyph that contains itself caught by the depth limit.
class GlyphSizes {
 public:
  GlyphSizes(const FontBytes& f, const Tables& t, std::vector<uint64_t> offsets)
      : f_(f), glyf_(t.glyf.offset), offsets_(std::move(offsets)), sizes_(offsets_.size(), -1) {}

  int64_t vertices(uint64_t glyph, int depth) {
    if (depth > kMaxComponentDepth) {
      f_.damaged("composite glyphs nest more than ", kMaxComponentDepth,
                 " deep (or a glyph is made of itself)");
    }
    // stb_truetype draws nothing for a glyph past numGlyphs or of no bytes.
    if (glyph + 1 >= offsets_.size() || offsets_[glyph] == offsets_[glyph + 1]) return 0;
    if (sizes_[glyph] >= 0) return sizes_[glyph];
    const uint64_t start = glyf_ + offsets_[glyph];
    const int32_t contours = f_.s16(start);
    int64_t size = 0;
    if (contours > 0) {  // the last contour's end point + 1 points, two more vertices a contour
      size = 1 + int64_t{f_.u16(start + 10 + 2 * uint64_t(contours) - 2)} + 2 * int64_t{contours};
    } else if (contours < 0) {
      size = composite_vertices(glyph, start, depth);
    }
    if (size > kMaxShapeVertices) f_.damaged("glyph ", glyph, "'s outline has ", size, " vertices");
    sizes_[glyph] = size;
    return size;
  }

 private:
  // The components as stbtt__GetGlyphShapeTT reads them: flags, glyph index, the offset (two
  // bytes or two shorts) and an optional scale, 2x scales or 2x2 matrix, while MORE_COMPONENTS.
  int64_t composite_vertices(uint64_t glyph, uint64_t start, int depth) {
    int64_t size = 0;
    uint64_t at = start + 10;
    for (int count = 0;; ++count) {
      if (count == kMaxComponents) f_.damaged("glyph ", glyph, " has over ", kMaxComponents, " components");
      const uint32_t flags = f_.u16(at), component = f_.u16(at + 2);
      at += 4;
      // Without ARGS_ARE_XY_VALUES (matching points) stb_truetype stops with an assertion
      // (reported as an error when drawn): it reads no further.
      if (!(flags & 0x2)) return size;
      at += (flags & 0x1) ? 4 : 2;
      at += (flags & 0x8) ? 2 : (flags & 0x40) ? 4 : (flags & 0x80) ? 8 : 0;
      size += vertices(component, depth + 1);
      if (size > kMaxShapeVertices) f_.damaged("glyph ", glyph, "'s outline has ", size, " vertices");
      if (!(flags & 0x20)) return size;
    }
  }

  const FontBytes& f_;
  uint64_t glyf_;
  std::vector<uint64_t> offsets_;
  std::vector<int64_t> sizes_;
};

// GPOS pair adjustments by class (format 2): stb_truetype indexes an array of class1Count x
// class2Count values, both counts from the file; the array must be in the file. Every other GPOS
// read is at 16-bit offsets from the table, inside kTrueTypeReadSlack.
void check_kerning_classes(const FontBytes& f, const Table& gpos) {
  if (!gpos.present || gpos.length < 10) return;
  if (f.u16(gpos.offset) != 1 || f.u16(gpos.offset + 2) != 0) return;  // stb_truetype skips it
  const uint64_t lookups = gpos.offset + f.u16(gpos.offset + 8);
  const uint64_t lookup_count = f.u16(lookups);
  uint64_t walked = 0;
  for (uint64_t i = 0; i < lookup_count; ++i) {
    const uint64_t lookup = lookups + f.u16(lookups + 2 + 2 * i);
    if (f.u16(lookup) != 2) continue;  // pair adjustment lookups only
    const uint64_t subtables = f.u16(lookup + 4);
    walked += subtables;
    if (walked > kMaxPairSubtables) f.damaged("GPOS has over ", kMaxPairSubtables, " pair subtables");
    for (uint64_t s = 0; s < subtables; ++s) {
      const uint64_t table = lookup + f.u16(lookup + 6 + 2 * s);
      if (f.u16(table) != 2 || f.u16(table + 4) != 4 || f.u16(table + 6) != 0) continue;
      const uint64_t classes = uint64_t{f.u16(table + 12)} * f.u16(table + 14);
      f.require_inside(table + 16, 2 * classes, "a GPOS class-pair array");
    }
  }
}

}  // namespace

void check_truetype_font(const std::vector<unsigned char>& bytes, size_t file_size,
                         const std::string& path) {
  TG_CHECK(file_size <= kMaxFontBytes, "font '", path, "' is ", file_size,
           " bytes, more than any font (", kMaxFontBytes, ")");
  TG_CHECK(bytes.size() == file_size + kTrueTypeReadSlack, "check_truetype_font: the font's bytes ",
           "must be followed by ", kTrueTypeReadSlack, " zero bytes");
  const FontBytes f(bytes, file_size, path);
  const Tables tables = read_table_directory(f, font_start(f));
  const Metrics metrics = check_metrics(f, tables);
  check_advances(f, tables, metrics);
  GlyphSizes sizes(f, tables, read_glyph_offsets(f, tables, metrics));
  for (uint64_t glyph = 0; glyph < metrics.glyphs; ++glyph) sizes.vertices(glyph, 0);
  check_character_map(f, tables);
  check_kerning_classes(f, tables.gpos);
}

}  // namespace tg::plot
