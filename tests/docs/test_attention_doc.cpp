// docs/attention.md quotes the output of docs/examples/attention_shapes (shapes at every step of
// multi-head attention, and the tape). The quote must be that program's output, byte for byte.
#include <catch2/catch.hpp>

#include "tests/support/run_command.h"

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

namespace {

const std::string kMarker = "<!-- output of docs/examples/attention_shapes -->";

// The contents of the fenced block that follows the marker line (fences excluded).
std::string quoted_output(const std::string& doc_path) {
  std::ifstream file(doc_path);
  REQUIRE(file.good());
  std::string line;
  while (std::getline(file, line) && line != kMarker) {
  }
  INFO("no line '" << kMarker << "' in " << doc_path);
  REQUIRE(line == kMarker);
  REQUIRE(std::getline(file, line));
  INFO("the line after the marker must open a fenced block, got '" << line << "'");
  REQUIRE(line.rfind("```", 0) == 0);
  std::string block;
  bool closed = false;
  while (std::getline(file, line)) {
    if (line == "```") {
      closed = true;
      break;
    }
    block += line + "\n";
  }
  REQUIRE(closed);
  return block;
}

}  // namespace

TEST_CASE("docs/attention.md quotes the current output of attention_shapes", "[docs]") {
  const auto [output, status] = tg::testing::run_command(std::string("'") + ATTENTION_SHAPES_BIN + "'");
  REQUIRE(status == 0);
  REQUIRE(!output.empty());
  const std::string quoted = quoted_output(std::string(TAPEGRAD_SOURCE_DIR) + "/docs/attention.md");
  INFO("update the block in docs/attention.md with the output of ./build/attention_shapes");
  REQUIRE(quoted == output);
}
