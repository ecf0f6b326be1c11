// TG_CHECK builds its message only when the check fails; checked arithmetic never wraps.
#include <catch2/catch.hpp>

#include <cstdint>
#include <ostream>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/runtime/threads.h"

namespace {

// A message piece that counts how often it is formatted.
struct Counted {
  int* formatted;
};
std::ostream& operator<<(std::ostream& out, const Counted& piece) {
  ++*piece.formatted;
  return out << "piece";
}

}  // namespace

TEST_CASE("TG_CHECK formats its message only on failure", "[error]") {
  int formatted = 0;
  const Counted piece{&formatted};
  for (int i = 0; i < 1000; ++i) TG_CHECK(i >= 0, "never shown: ", piece);
  REQUIRE(formatted == 0);
  REQUIRE_THROWS_WITH([&] { TG_CHECK(formatted > 0, "op 'x': ", piece, " ", 42); }(), "op 'x': piece 42");
  REQUIRE(formatted == 1);
}

TEST_CASE("checked_add and checked_mul are exact or throw", "[error]") {
  REQUIRE(tg::checked_add(INT64_MAX - 1, 1, "sum") == INT64_MAX);
  REQUIRE(tg::checked_mul(INT64_C(3037000499), INT64_C(3037000499), "square") == INT64_C(9223372030926249001));
  REQUIRE(tg::checked_mul(-4, 5, "product") == -20);
  REQUIRE_THROWS_AS(tg::checked_add(INT64_MAX, 1, "sum"), tg::Error);
  REQUIRE_THROWS_AS(tg::checked_add(INT64_MIN, -1, "sum"), tg::Error);
  REQUIRE_THROWS_WITH(tg::checked_mul(INT64_C(3037000500), INT64_C(3037000500), "--epochs x steps"),
                      Catch::Contains("--epochs x steps") && Catch::Contains("overflows"));
}

TEST_CASE("shapes are bounded in rank and element count", "[error][tensor]") {
  const std::vector<int64_t> deep(tg::kMaxRank + 1, 1);  // a Shape cannot hold it
  REQUIRE_THROWS_WITH(tg::empty(deep), Catch::Contains("17 dims"));
  REQUIRE(tg::empty(tg::Shape(tg::kMaxRank, 1)).numel() == 1);
  REQUIRE_THROWS_WITH(tg::empty({INT64_C(1) << 40, INT64_C(1) << 40}), Catch::Contains("int64"));
  // 2^61 f32 elements fit an int64 count but not an int64 byte count.
  REQUIRE_THROWS_WITH(tg::empty({INT64_C(1) << 61}), Catch::Contains("bytes"));
  const tg::Tensor one = tg::zeros({1});
  REQUIRE_THROWS_WITH(one.view(deep), Catch::Contains("dims"));
}

TEST_CASE("set_num_threads takes 0 (all cores) to kMaxThreads", "[error][threads]") {
  REQUIRE_THROWS_WITH(tg::set_num_threads(-3), Catch::Contains("-3"));
  REQUIRE_THROWS_WITH(tg::set_num_threads(100000), Catch::Contains("100000"));
  tg::set_num_threads(1);
  REQUIRE(tg::num_threads() == 1);
  tg::set_num_threads(0);
  REQUIRE(tg::num_threads() >= 1);
}

TEST_CASE("tg::fail keeps a message on one line: a NUL or newline it quotes is spelled out",
          "[error]") {
  const std::string cell("1\0" "2\n3", 5);
  REQUIRE_THROWS_WITH(tg::fail("value '", cell, "' is bad"), "value '1\\x002\\x0a3' is bad");
  REQUIRE_THROWS_WITH([] { TG_CHECK(false, "tab\there, DEL\x7f, esc\x1b[2J"); }(),
                      "tab\\x09here, DEL\\x7f, esc\\x1b[2J");
  REQUIRE_THROWS_WITH(tg::fail("caf\xC3\xA9 \\x00 stays"), "caf\xC3\xA9 \\x00 stays");  // UTF-8, text
}
