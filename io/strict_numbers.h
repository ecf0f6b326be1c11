#pragma once
// Strict parsing of the numbers users type and files store. std::stoll("12abc") is 12 and
// std::stoull("-1") is 2^64 - 1; here the whole text must be a number of the asked-for kind,
// in range, or tg::Error names `what` and the text.
#include <cstdint>
#include <string>

namespace tg::train {

int64_t parse_int64(const std::string& text, const char* what);    // [-]digits
uint64_t parse_uint64(const std::string& text, const char* what);  // digits only
double parse_finite_double(const std::string& text, const char* what);

// The shortest text that reads back as exactly `value`: "0.1", not "0.10000000000000001" (what
// boost::program_options prints for a default_value given without its text).
std::string shortest_text(double value);

}  // namespace tg::train
