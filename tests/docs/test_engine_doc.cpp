// docs/engine.md follows one training step through the engine. Two things keep it from going stale:
//   - it quotes the output of examples/engine_walkthrough, which must be that program's output,
//     byte for byte;
//   - it cites the code as links [`name` path:line](../path#Lline), and the cited line must still
//     contain `name` (as a whole identifier), so an edit that moves the code breaks this test
//     instead of silently breaking the walkthrough. Every other relative link must name an
//     existing file.
#include <catch2/catch.hpp>

#include "tests/support/quoted_output.h"
#include "tests/support/run_command.h"

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string kDoc = std::string(TAPEGRAD_SOURCE_DIR) + "/docs/engine.md";
const std::string kMarker = "<!-- output of examples/engine_walkthrough -->";

std::string read_file(const std::string& path) {
  std::ifstream file(path);
  REQUIRE(file.good());
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream file(path);
  INFO("cannot open " << path);
  REQUIRE(file.good());
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(file, line)) lines.push_back(line);
  return lines;
}


bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// True when `name` occurs in `line` as a whole identifier (not as part of a longer one).
bool contains_identifier(const std::string& line, const std::string& name) {
  for (size_t at = line.find(name); at != std::string::npos; at = line.find(name, at + 1)) {
    const bool starts = at == 0 || !is_identifier_char(line[at - 1]) || !is_identifier_char(name.front());
    const size_t end = at + name.size();
    const bool ends = end == line.size() || !is_identifier_char(line[end]) || !is_identifier_char(name.back());
    if (starts && ends) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("docs/engine.md quotes the current output of engine_walkthrough", "[docs]") {
  const auto [output, status] = tg::testing::run_command(std::string("'") + ENGINE_WALKTHROUGH_BIN + "'");
  REQUIRE(status == 0);
  REQUIRE(!output.empty());
  const std::string quoted = tg::testing::quoted_output(kDoc, kMarker);
  INFO("update the block in docs/engine.md with the output of ./build/engine_walkthrough");
  REQUIRE(quoted == output);
}

TEST_CASE("docs/engine.md: every file:line link points at the identifier it names", "[docs]") {
  const std::string doc = read_file(kDoc);
  // Any markdown link to a path relative to docs/: [text](../some/file#L12) or (other.md).
  const std::regex link(R"(\[([^\]]+)\]\((\.\./)?([A-Za-z0-9_./-]+)(#L([0-9]+))?\))");
  const std::regex cited(R"(^`([^`]+)` ([A-Za-z0-9_./-]+):([0-9]+)$)");
  int line_links = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), link); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const std::string text = m[1], target = m[3];
    if (target.find("://") != std::string::npos) continue;
    const std::string path = m[2].matched ? target : "docs/" + target;
    INFO("link " << m.str(0));
    REQUIRE(std::filesystem::is_regular_file(std::string(TAPEGRAD_SOURCE_DIR) + "/" + path));
    if (!m[4].matched) continue;
    // A line link: its text names the identifier and repeats the place, `name` path:line.
    std::smatch parts;
    INFO("a line link's text must read `identifier` path:line");
    REQUIRE(std::regex_match(text, parts, cited));
    REQUIRE(parts[2].str() == path);
    REQUIRE(parts[3].str() == m[5].str());
    const std::vector<std::string> lines = lines_of(std::string(TAPEGRAD_SOURCE_DIR) + "/" + path);
    const size_t number = std::stoul(m[5].str());
    REQUIRE(number >= 1);
    REQUIRE(number <= lines.size());
    std::string name = parts[1];
    if (name.size() > 2 && name.ends_with("()")) name.resize(name.size() - 2);
    INFO("line " << number << " of " << path << ": " << lines[number - 1]);
    CHECK(contains_identifier(lines[number - 1], name));
    ++line_links;
  }
  REQUIRE(line_links >= 10);  // the walkthrough cites the code throughout
}
