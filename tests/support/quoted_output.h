#pragma once
// The docs quote the output of example programs between a marker line and a fenced block; the
// docs tests compare the quote with what the program prints today.
#include <catch2/catch.hpp>

#include <fstream>
#include <string>

namespace tg::testing {

// The contents of the fenced block that follows the line `marker` in `doc_path` (fences excluded).
inline std::string quoted_output(const std::string& doc_path, const std::string& marker) {
  std::ifstream file(doc_path);
  REQUIRE(file.good());
  std::string line;
  while (std::getline(file, line) && line != marker) {
  }
  INFO("no line '" << marker << "' in " << doc_path);
  REQUIRE(line == marker);
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

}  // namespace tg::testing
