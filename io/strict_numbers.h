#pragma once
// Strict parsing of the numbers users type and files store. std::stoll("12abc") is 12 and
// std::stoull("-1") is 2^64 - 1; here the whole text must be a number of the asked-for kind,
// in range, or tg::Error names `what` and the text (quoted with io/quoted_text.h).
//
// Decimal numbers only, in every file and in --seed: an optional leading '-' (never '+'), digits,
// an optional '.' and fraction, an optional exponent ("1e-3", "2.5E+8"). No spaces, no hex
// ("0x10"), no "inf", "infinity" or "nan". A double may be subnormal ("1e-320") or round to zero
// ("1e-400" reads as 0, as strtod and Python read it); past the largest double (1.8e308) it is
// out of range.
#include <cstdint>
#include <optional>
#include <string>

namespace tg::train {

int64_t parse_int64(const std::string& text, const char* what);    // [-]digits
uint64_t parse_uint64(const std::string& text, const char* what);  // digits only
double parse_finite_double(const std::string& text, const char* what);
// The same rule without throwing: the value, or nullopt with the reason in *why (a phrase to
// follow the quoted text: "is not a decimal number (...)").
std::optional<double> read_finite_double(const std::string& text, std::string* why);

// The shortest text that reads back as exactly `value`: "0.1", not "0.10000000000000001" (what
// boost::program_options prints for a default_value given without its text).
std::string shortest_text(double value);

}  // namespace tg::train
