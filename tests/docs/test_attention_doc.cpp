// docs/attention.md quotes the output of docs/examples/attention_shapes (shapes at every step of
// multi-head attention, and the tape). The quote must be that program's output, byte for byte.
#include <catch2/catch.hpp>

#include "tests/support/quoted_output.h"
#include "tests/support/run_command.h"

#include <string>

namespace {

const std::string kMarker = "<!-- output of docs/examples/attention_shapes -->";

}  // namespace

TEST_CASE("docs/attention.md quotes the current output of attention_shapes", "[docs]") {
  const auto [output, status] = tg::testing::run_command(std::string("'") + ATTENTION_SHAPES_BIN + "'");
  REQUIRE(status == 0);
  REQUIRE(!output.empty());
  const std::string quoted = tg::testing::quoted_output(std::string(TAPEGRAD_SOURCE_DIR) + "/docs/attention.md", kMarker);
  INFO("update the block in docs/attention.md with the output of ./build/attention_shapes");
  REQUIRE(quoted == output);
}
