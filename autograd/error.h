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

// check(cond, "op 'x': ...", ...) throws tg::Error with the message when cond is false.
template <typename... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace tg
