#pragma once
// stb_truetype trusts the font it is given: every offset it reads from the file is followed
// without a bounds check, so a truncated or corrupted font (TAPEGRAD_FONT names any file) would
// make it read outside the bytes, recurse forever, or allocate without limit. check_truetype_font
// looks, before stb_truetype sees the font, at everything stb_truetype follows:
//   - the table directory: each table's offset and length inside the file;
//   - the tables it reads (cmap, head, hhea, hmtx, loca, glyf, maxp) present and long enough;
//   - head's indexToLocFormat (0 or 1) and unitsPerEm, hhea's ascent and descent (the text scale
//     divides by their difference), hmtx's advance widths (a bounded text width);
//   - loca: every glyph's offset inside glyf;
//   - cmap: every subtable inside the file, and the one stb_truetype uses of a format it reads;
//   - composite glyphs: no glyph made (directly or not) of itself, nesting and total size bounded;
//   - GPOS: the one array whose size is a product of two counts from the file inside it.
// What stb_truetype reads at 16-bit offsets from a checked position stays within
// kTrueTypeReadSlack bytes of the file's end: the font's bytes are kept with that many zero bytes
// after them, so those reads land on zeros rather than outside the allocation.
#include <cstddef>
#include <string>
#include <vector>

namespace tg::plot {

// Zero bytes kept after a font's bytes (see above): more than the farthest 16-bit offset chain
// stb_truetype follows from a checked position (about 0.7 MiB, in GPOS).
inline constexpr size_t kTrueTypeReadSlack = size_t{1} << 20;

// Throws a tg::Error "font '<path>' is damaged: <what>" (or is not a TrueType font) unless the
// first `file_size` bytes of `bytes` are a font stb_truetype can read safely. `bytes` holds the
// file followed by kTrueTypeReadSlack zero bytes.
void check_truetype_font(const std::vector<unsigned char>& bytes, size_t file_size,
                         const std::string& path);

}  // namespace tg::plot
