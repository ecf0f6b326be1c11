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

// Builds a message from any streamable pieces: fail("op 'add': shapes ", a, " and ", b).
template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream message;
  (message << ... << parts);
  throw Error(message.str());
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
