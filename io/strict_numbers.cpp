#include "tapegrad/io/strict_numbers.h"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/quoted_text.h"

namespace tg::train {
namespace {

// std::from_chars takes no sign, spaces or base prefixes and reports overflow: exactly the rules.
template <typename Number>
Number parse_whole(const std::string& text, const char* what, const char* kind) {
  Number value{};
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  TG_CHECK(error != std::errc::result_out_of_range, what, ": ", quoted_text(text),
           " is out of range for ", kind);
  TG_CHECK(error == std::errc() && stop == end && !text.empty(), what, ": ", quoted_text(text),
           " is not ", kind);
  return value;
}

// Only what a decimal number is written with: std::from_chars alone would also read "inf",
// "infinity" and "nan(...)".
bool has_only_decimal_characters(const std::string& text) {
  return text.find_first_not_of("0123456789.eE+-") == std::string::npos;
}

}  // namespace

int64_t parse_int64(const std::string& text, const char* what) {
  return parse_whole<int64_t>(text, what, "an integer");
}

uint64_t parse_uint64(const std::string& text, const char* what) {
  return parse_whole<uint64_t>(text, what, "a non-negative integer");
}

std::optional<double> read_finite_double(const std::string& text, std::string* why) {
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  const bool whole = !text.empty() && has_only_decimal_characters(text) && stop == end;
  if (whole && error == std::errc()) return value;
  if (whole && error == std::errc::result_out_of_range) {
    // strtod rounds what from_chars refuses: below the smallest subnormal to +-0 (the nearest
    // double), past the largest to +-HUGE_VAL (the text then reads no double at all).
    const double nearest = std::strtod(text.c_str(), nullptr);
    if (std::isfinite(nearest)) return nearest;
    *why = "is out of range for a double (past 1.8e308)";
  } else {
    *why = "is not a decimal number (digits with an optional leading '-', '.' and exponent; "
           "no '+' sign, hex, inf or nan)";
  }
  return std::nullopt;
}

double parse_finite_double(const std::string& text, const char* what) {
  std::string why;
  const std::optional<double> value = read_finite_double(text, &why);
  TG_CHECK(value.has_value(), what, ": ", quoted_text(text), " ", why);
  return *value;
}

std::string shortest_text(double value) {
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);  // shortest round trip
  TG_CHECK(error == std::errc(), "shortest_text: cannot format ", value);
  return std::string(text, end);
}

}  // namespace tg::train
