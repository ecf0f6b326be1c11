// docs/engine.md follows one training step through the engine, and quotes the output of
// examples/engine_walkthrough: the quote must be that program's output, byte for byte. (Its links
// to the code are checked with every page's: test_doc_links.cpp and test_doc_definitions.cpp.)
#include <catch2/catch.hpp>

#include "tests/support/quoted_output.h"
#include "tests/support/run_command.h"

#include <string>

namespace {

const std::string kDoc = std::string(TAPEGRAD_SOURCE_DIR) + "/docs/engine.md";
const std::string kMarker = "<!-- output of examples/engine_walkthrough -->";

}  // namespace

TEST_CASE("docs/engine.md quotes the current output of engine_walkthrough", "[docs]") {
  const auto [output, status] = tg::testing::run_command(std::string("'") + ENGINE_WALKTHROUGH_BIN + "'");
  REQUIRE(status == 0);
  REQUIRE(!output.empty());
  const std::string quoted = tg::testing::quoted_output(kDoc, kMarker);
  INFO("update the block in docs/engine.md with the output of ./build/engine_walkthrough");
  REQUIRE(quoted == output);
}
