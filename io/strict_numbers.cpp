#include "tapegrad/io/strict_numbers.h"

#include <algorithm>
#include <charconv>

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

// Whether a decimal number that std::from_chars found out of range is tiny (it underflows to
// zero) rather than huge: the power of ten of its first nonzero digit is negative.
bool decimal_text_underflows(const std::string& text) {
  const size_t e = text.find_first_of("eE");
  const std::string mantissa = text.substr(0, e);
  const size_t point = std::min(mantissa.find('.'), mantissa.size());
  const size_t first = mantissa.find_first_of("123456789");
  if (first == std::string::npos) return true;  // all zeros
  const int64_t digits_power = first < point ? static_cast<int64_t>(point - first) - 1
                                             : -static_cast<int64_t>(first - point);
  int64_t exponent = 0;
  if (e != std::string::npos) {
    const char* begin = text.data() + e + 1 + (text[e + 1] == '+' ? 1 : 0);
    const auto [stop, error] = std::from_chars(begin, text.data() + text.size(), exponent);
    // An exponent past int64: only its sign matters, the mantissa's digits cannot outweigh it.
    if (error == std::errc::result_out_of_range) {
      exponent = text[e + 1] == '-' ? INT64_MIN / 2 : INT64_MAX / 2;
    }
  }
  return digits_power + exponent < 0;
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
  if (whole && error == std::errc::result_out_of_range && decimal_text_underflows(text)) {
    return text[0] == '-' ? -0.0 : 0.0;  // below the smallest subnormal: the nearest double
  }
  if (whole && error == std::errc::result_out_of_range) {
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
