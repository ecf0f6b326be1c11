// Strict number parsing: the whole text, the right kind, in range.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/strict_numbers.h"

using tg::train::parse_finite_double;
using tg::train::parse_int64;
using tg::train::parse_uint64;
using tg::train::read_finite_double;

TEST_CASE("parse_int64 and parse_uint64 take whole decimal numbers only", "[strict_numbers]") {
  REQUIRE(parse_int64("12", "step") == 12);
  REQUIRE(parse_int64("-7", "x") == -7);
  REQUIRE(parse_int64("9223372036854775807", "x") == INT64_MAX);
  REQUIRE(parse_uint64("18446744073709551615", "seed") == UINT64_MAX);
  REQUIRE(parse_uint64("0", "seed") == 0);
  for (const char* bad : {"", "12abc", "1e3", "+4", " 5", "5 ", "0x10", "abc", "--1"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse_int64(bad, "step"), Catch::Contains("step"));
    REQUIRE_THROWS_AS(parse_uint64(bad, "step"), tg::Error);
  }
  REQUIRE_THROWS_WITH(parse_uint64("-1", "--seed"), Catch::Contains("--seed") && Catch::Contains("'-1'"));
  REQUIRE_THROWS_WITH(parse_int64("9223372036854775808", "x"), Catch::Contains("out of range"));
  REQUIRE_THROWS_WITH(parse_uint64("18446744073709551616", "x"), Catch::Contains("out of range"));
}

TEST_CASE("parse_finite_double refuses NaN, infinities and trailing text", "[strict_numbers]") {
  REQUIRE(parse_finite_double("0.25", "scale") == 0.25);
  REQUIRE(parse_finite_double("1e3", "scale") == 1000.0);
  REQUIRE(parse_finite_double("-2", "scale") == -2.0);
  for (const char* bad : {"", "inf", "nan", "-inf", "1e400", "1.5x", " 1", "+1"}) {
    INFO(bad);
    REQUIRE_THROWS_AS(parse_finite_double(bad, "scale"), tg::Error);
  }
}

TEST_CASE("parse_finite_double takes subnormals and rounds what is below them to zero",
          "[strict_numbers]") {
  // 1e-320 is finite: a subnormal double (the smallest is 2^-1074, about 4.94e-324).
  REQUIRE(parse_finite_double("1e-320", "cell") == 1e-320);
  REQUIRE(parse_finite_double("1e-320", "cell") > 0);
  REQUIRE(parse_finite_double("4.9406564584124654e-324", "cell") == std::ldexp(1.0, -1074));
  REQUIRE(parse_finite_double("-2.5e-310", "cell") == -2.5e-310);
  // Below half the smallest subnormal: the nearest double is zero, with the sign kept.
  REQUIRE(parse_finite_double("1e-400", "cell") == 0.0);
  REQUIRE(std::signbit(parse_finite_double("-1e-400", "cell")));
  REQUIRE(parse_finite_double("0.0000001e-99999999999999999999999", "cell") == 0.0);
  REQUIRE(parse_finite_double("0e999999", "cell") == 0.0);
  // The largest double is in range; anything past it is not, however it is written.
  REQUIRE(parse_finite_double("1.7976931348623157e308", "cell") == DBL_MAX);
  for (const char* huge : {"1e309", "-1e400", "1000e306", "0.001e312", "1e99999999999999999999"}) {
    INFO(huge);
    REQUIRE_THROWS_WITH(parse_finite_double(huge, "cell"), Catch::Contains("out of range"));
  }
}

TEST_CASE("parse_finite_double refuses hex, inf and nan spellings and a '+' sign",
          "[strict_numbers]") {
  // std::strtod reads all of these (0x10 as 16); none is a decimal number.
  for (const char* bad : {"0x10", "0X1p4", "-0x1", "infinity", "INF", "-Infinity", "NaN",
                          "nan(123)", "+1", "+0.5", "1e", "e5", ".", "-", "1e+", "--1",
                          "1.2.3", "1e5e5", "+inf"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse_finite_double(bad, "cell"),
                        Catch::Contains("cell: '") && Catch::Contains("is not a decimal number"));
  }
  // What a decimal number may look like.
  REQUIRE(parse_finite_double(".5", "cell") == 0.5);
  REQUIRE(parse_finite_double("5.", "cell") == 5.0);
  REQUIRE(parse_finite_double("2.5E+8", "cell") == 2.5e8);
  REQUIRE(parse_finite_double("-0", "cell") == 0.0);
  REQUIRE(parse_finite_double("007", "cell") == 7.0);
}

TEST_CASE("strict numbers quote the text safely: a NUL does not end the message",
          "[strict_numbers]") {
  const std::string with_nul("1\0x\n2", 5);
  REQUIRE_THROWS_WITH(parse_finite_double(with_nul, "cell"),
                      Catch::Contains("cell: '1\\x00x\\x0a2' is not a decimal number"));
  REQUIRE_THROWS_WITH(parse_int64(with_nul, "step"),
                      Catch::Contains("step: '1\\x00x\\x0a2' is not"));
  std::string why;
  REQUIRE_FALSE(read_finite_double("0x10", &why).has_value());
  REQUIRE_THAT(why, Catch::StartsWith("is not a decimal number"));
  REQUIRE(read_finite_double("1e-320", &why) == 1e-320);
}
