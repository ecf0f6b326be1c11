#include "tapegrad/io/strict_numbers.h"

#include <charconv>
#include <cmath>

#include "tapegrad/autograd/error.h"

namespace tg::train {
namespace {

// std::from_chars takes no sign, spaces or base prefixes and reports overflow: exactly the rules.
template <typename Number>
Number parse_whole(const std::string& text, const char* what, const char* kind) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  TG_CHECK(error != std::errc::result_out_of_range, what, ": '", text, "' is out of range for ", kind);
  TG_CHECK(error == std::errc() && stop == end && !text.empty(), what, ": '", text, "' is not ", kind);
  return value;
}

}  // namespace

int64_t parse_int64(const std::string& text, const char* what) {
  return parse_whole<int64_t>(text, what, "an integer");
}

uint64_t parse_uint64(const std::string& text, const char* what) {
  return parse_whole<uint64_t>(text, what, "a non-negative integer");
}

double parse_finite_double(const std::string& text, const char* what) {
  const double value = parse_whole<double>(text, what, "a number");
  TG_CHECK(std::isfinite(value), what, ": '", text, "' is not a finite number");
  return value;
}

std::string shortest_text(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);  // shortest round trip
  TG_CHECK(error == std::errc(), "shortest_text: cannot format ", value);
  return std::string(text, end);
}

}  // namespace tg::train
