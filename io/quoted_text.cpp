#include "tapegrad/io/quoted_text.h"

#include <cstdint>
#include <cstdio>

namespace tg {
namespace {

// The code point of the well-formed sequence text[i, i + length).
uint32_t quoted_code_point(const std::string& text, size_t i, size_t length) {
  static constexpr unsigned char kLeadBits[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t point = static_cast<unsigned char>(text[i]) & kLeadBits[length];
  for (size_t k = 1; k < length; ++k) {
    point = (point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  }
  return point;
}

// Code points that print nothing visible but move or reorder what follows: C1 controls, the line
// and paragraph separators, and the bidirectional embeddings, overrides and isolates.
bool is_invisible_control(uint32_t point) {
  return (point >= 0x80 && point <= 0x9F) || point == 0x2028 || point == 0x2029 ||
         (point >= 0x202A && point <= 0x202E) || (point >= 0x2066 && point <= 0x2069);
}

// "\x00"-style spelling of one byte, or "\u202e"-style of one code point.
std::string quoted_escape(const char* format, uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, format, static_cast<unsigned>(value));
  return text;
}

}  // namespace

size_t utf8_sequence_length(const std::string& text, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) length = 2;
  else if (lead == 0xE0) length = 3, low = 0xA0;          // no overlong forms
  else if (lead >= 0xE1 && lead <= 0xEC) length = 3;
  else if (lead == 0xED) length = 3, high = 0x9F;         // no surrogates
  else if (lead >= 0xEE && lead <= 0xEF) length = 3;
  else if (lead == 0xF0) length = 4, low = 0x90;          // no overlong forms
  else if (lead >= 0xF1 && lead <= 0xF3) length = 4;
  else if (lead == 0xF4) length = 4, high = 0x8F;         // nothing above U+10FFFF
  else return 0;                                          // continuation byte, C0, C1, F5..FF
  if (i + length > text.size()) return 0;
  if (byte(i + 1) < low || byte(i + 1) > high) return 0;
  for (size_t k = 2; k < length; ++k)
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  return length;
}

std::string quoted_text(const std::string& bytes) {
  std::string quoted = "'";
  size_t i = 0;
  while (i < bytes.size() && i < kQuotedTextMaxBytes) {
    const unsigned char byte = static_cast<unsigned char>(bytes[i]);
    if (byte >= 0x20 && byte < 0x7F) {
      quoted += byte == '\\' ? "\\\\" : std::string(1, static_cast<char>(byte));
      i += 1;
      continue;
    }
    const size_t length = byte < 0x80 ? 0 : utf8_sequence_length(bytes, i);
    if (length == 0) {  // a control byte, DEL, or a byte that is not part of UTF-8
      quoted += quoted_escape("\\x%02x", byte);
      i += 1;
      continue;
    }
    const uint32_t point = quoted_code_point(bytes, i, length);
    const bool hidden = is_invisible_control(point);
    quoted += hidden ? quoted_escape("\\u%04x", point) : bytes.substr(i, length);
    i += length;
  }
  if (i == bytes.size()) return quoted + "'";
  return quoted + "...' (" + std::to_string(bytes.size()) + " bytes)";  // cut short
}

}  // namespace tg
