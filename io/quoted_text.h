#pragma once
// Text from a user's file, quoted in an error message. A CSV cell, a TSV label, a column or tensor
// name may hold any byte: a NUL would end the message early (what() is a C string), a newline or
// an escape sequence would break or repaint the one-line error. quoted_text() keeps printable
// ASCII and well-formed UTF-8 as they are and spells everything else out:
//
//   NUL, control bytes, DEL   \x00 \x0a \x1b \x7f     (every byte below 0x20, and 0x7f)
//   a backslash               \\                      (a "\x00" typed in a file stays distinct)
//   bytes that are not UTF-8  \xff                    (each on its own)
//   C1 controls, line and paragraph separators, bidirectional overrides  \u0085 \u2028 \u202e
//
// between single quotes. A text longer than kQuotedTextMaxBytes is cut (at a character) and
// followed by "..." and its size: 'abc...' (4096 bytes).
#include <cstddef>
#include <string>

namespace tg {

inline constexpr size_t kQuotedTextMaxBytes = 80;

std::string quoted_text(const std::string& bytes);

// Length of the well-formed UTF-8 sequence starting at text[i] (1 for ASCII), or 0 when it is not
// one (the table of well-formed byte sequences in the Unicode standard, section 3.9).
size_t utf8_sequence_length(const std::string& text, size_t i);

}  // namespace tg
