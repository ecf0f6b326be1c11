// Byte strings survive a trip through JSON text, valid UTF-8 or not.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/json_bytes.h"

using namespace tg::train;

TEST_CASE("bytes_to_json keeps valid UTF-8 readable and any bytes lossless", "[json_bytes]") {
  const std::string readable = "caf\xC3\xA9 \xE2\x82\xAC";  // "café €"
  REQUIRE(is_valid_utf8(readable));
  REQUIRE(bytes_to_json(readable).is_string());
  const std::string broken = std::string("a\xFF") + '\0' + "\xC3";  // a lone 0xFF, a NUL, a cut sequence
  REQUIRE_FALSE(is_valid_utf8(broken));
  const nlohmann::json stored = bytes_to_json(broken);
  REQUIRE(stored == nlohmann::json::array({97, 255, 0, 195}));
  for (const std::string& bytes : {readable, broken, std::string()}) {
    const std::string text = bytes_to_json(bytes).dump();  // never throws
    REQUIRE(bytes_from_json(nlohmann::json::parse(text), "token") == bytes);
  }
}

TEST_CASE("bytes_from_json refuses anything but a string or bytes", "[json_bytes]") {
  REQUIRE_THROWS_WITH(bytes_from_json(nlohmann::json(5), "vocab token 3"), Catch::Contains("vocab token 3"));
  REQUIRE_THROWS_AS(bytes_from_json(nlohmann::json::array({256}), "token"), tg::Error);
  REQUIRE_THROWS_AS(bytes_from_json(nlohmann::json::array({-1}), "token"), tg::Error);
  REQUIRE_THROWS_AS(bytes_from_json(nlohmann::json::array({"a"}), "token"), tg::Error);
  REQUIRE_THROWS_AS(bytes_from_json(nlohmann::json::object(), "token"), tg::Error);
}
