// quoted_text: a user's bytes in an error message, one printable line whatever they hold.
#include <catch2/catch.hpp>

#include <string>

#include "tapegrad/io/quoted_text.h"

using tg::kQuotedTextMaxBytes;
using tg::quoted_text;

TEST_CASE("quoted_text keeps printable text and UTF-8 as they are", "[quoted_text]") {
  REQUIRE(quoted_text("") == "''");
  REQUIRE(quoted_text("loss") == "'loss'");
  REQUIRE(quoted_text("a b,c\"d'") == "'a b,c\"d''");
  REQUIRE(quoted_text("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80") ==
          "'caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80'");  // é, the euro sign, an emoji
}

TEST_CASE("quoted_text spells out NUL, control bytes, DEL, backslashes and non-UTF-8 bytes",
          "[quoted_text]") {
  REQUIRE(quoted_text(std::string("1\0" "2", 3)) == "'1\\x002'");  // the NUL, then the rest
  REQUIRE(quoted_text("a\nb\rc\td\x1b[31m\x7f") == "'a\\x0ab\\x0dc\\x09d\\x1b[31m\\x7f'");
  REQUIRE(quoted_text("C:\\x00") == "'C:\\\\x00'");  // typed text stays distinct from a NUL
  REQUIRE(quoted_text("\xFF\xC3(\xED\xA0\x80") == "'\\xff\\xc3(\\xed\\xa0\\x80'");  // a surrogate
  REQUIRE(quoted_text("\xC0\xAF") == "'\\xc0\\xaf'");                              // overlong '/'
  REQUIRE(quoted_text("\xE2\x82") == "'\\xe2\\x82'");                              // cut short
  // Invisible code points that move or reorder the rest of the line: C1 NEL, U+2028, RLO.
  REQUIRE(quoted_text("a\xC2\x85" "b\xE2\x80\xA8" "c\xE2\x80\xAE" "d") ==
          "'a\\u0085b\\u2028c\\u202ed'");
  for (int byte = 0; byte < 256; ++byte) {
    const std::string quoted = quoted_text(std::string(1, static_cast<char>(byte)));
    INFO(byte);
    for (const char c : quoted) REQUIRE((static_cast<unsigned char>(c) >= 0x20 && c != 0x7f));
  }
}

TEST_CASE("quoted_text cuts a long text at a character and says how long it was",
          "[quoted_text]") {
  const std::string exact(kQuotedTextMaxBytes, 'x');
  REQUIRE(quoted_text(exact) == "'" + exact + "'");
  REQUIRE(quoted_text(exact + "y") == "'" + exact + "...' (" +
                                          std::to_string(kQuotedTextMaxBytes + 1) + " bytes)");
  // A two-byte character straddling the limit is kept whole, never split.
  const std::string straddling = std::string(kQuotedTextMaxBytes - 1, 'x') + "\xC3\xA9" + "z";
  REQUIRE(quoted_text(straddling) == "'" + straddling.substr(0, kQuotedTextMaxBytes + 1) +
                                         "...' (" + std::to_string(straddling.size()) + " bytes)");
  REQUIRE(quoted_text(std::string(1 << 20, '\0')).size() < 4 * kQuotedTextMaxBytes + 32);
}
