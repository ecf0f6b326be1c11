// Strict number parsing: the whole text, the right kind, in range.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/strict_numbers.h"

using tg::train::parse_finite_double;
using tg::train::parse_int64;
using tg::train::parse_uint64;

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
