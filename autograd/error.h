#pragma once
// tg::Error: the one exception tapegrad throws for bad input. Messages name the op and the shapes.
#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tg {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "[2, 3]" for a shape.
std::string shape_str(const std::vector<int64_t>& shape);

// A message as one line whatever it quotes: each control byte (a NUL would end what() early, a
// newline would split the CLI's one-line error) becomes \xHH. Sites that quote a user's text use
// io/quoted_text.h, which also marks where the text begins and ends; this is the safety net.
inline std::string one_line_message(const std::string& message) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string line;
  for (const char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte != 0x7F) line += c;
    else line += {'\\', 'x', kHex[byte >> 4], kHex[byte & 15]};
  }
  return line;
}

// Builds a message from any streamable pieces: fail("op 'add': shapes ", a, " and ", b).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(one_line_message(message.str()));
}

// Overflow-checked arithmetic for counts that come from users, files and checkpoints: the exact
// result, or tg::Error naming `what` (products of sizes must never wrap around).
int64_t checked_add(int64_t a, int64_t b, const char* what);
int64_t checked_mul(int64_t a, int64_t b, const char* what);

}  // namespace tg

// TG_CHECK(cond, "op 'x': ", shape_str(a), ...) throws tg::Error when cond is false. A macro, so
// that the message is built only on failure: a check that passes costs one branch, never the
// string formatting of its message.
#define TG_CHECK(condition, ...)                  \
  do {                                            \
    if (!(condition)) [[unlikely]] {              \
      ::tg::fail(__VA_ARGS__);                    \
    }                                             \
  } while (false)
