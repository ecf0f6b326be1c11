// README.md is the front door: what tapegrad is, how to run it, how to read it, and where every
// page is. Three things keep it that way:
//   - a C++ program it shows is a file of the repository, quoted whole and named in a link in
//     the paragraph before the block, so the program on the first screen is one that compiles (the
//     examples are built) and cannot drift from its file;
//   - every page of docs/ is linked from it, so a page moved out of the README stays reachable;
//   - it stays short (the reference lives in docs/).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

const fs::path kRoot = fs::path(TAPEGRAD_SOURCE_DIR).lexically_normal();
constexpr size_t kMaxReadmeLines = 300;

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  INFO("cannot open " << path);
  REQUIRE(file.good());
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// A ```cpp block of the README: the text between its fences (each line with its '\n') and the
// paragraph before its opening fence (its lines joined by spaces).
struct CppBlock {
  std::string body;
  std::string paragraph_before;
  size_t fence_line = 0;  // 1-based
};

std::vector<CppBlock> cpp_blocks(const std::vector<std::string>& lines) {
  std::vector<CppBlock> blocks;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].starts_with("```")) continue;
    const bool is_cpp = lines[i] == "```cpp";
    CppBlock block;
    block.fence_line = i + 1;
    size_t start = i;
    while (start > 0 && lines[start - 1].empty()) --start;  // the blank lines before the fence
    while (start > 0 && !lines[start - 1].empty()) --start;  // the paragraph's first line
    for (size_t line = start; line < i && !lines[line].empty(); ++line) {
      block.paragraph_before += lines[line] + " ";
    }
    for (++i; i < lines.size() && !lines[i].starts_with("```"); ++i) block.body += lines[i] + "\n";
    if (is_cpp) blocks.push_back(block);
  }
  return blocks;
}

}  // namespace

TEST_CASE("README.md: each C++ program it shows is a file of the repository, quoted whole",
          "[docs]") {
  const std::vector<std::string> readme = lines_of(read_text(kRoot / "README.md"));
  const std::vector<CppBlock> blocks = cpp_blocks(readme);
  REQUIRE(!blocks.empty());  // the front door shows a program
  // The paragraph before the block names the file: [examples/x.cpp](examples/x.cpp).
  const std::regex named(R"(\[([A-Za-z0-9_./-]+\.cpp)\]\(([A-Za-z0-9_./-]+\.cpp)\))");
  for (const CppBlock& block : blocks) {
    INFO("the ```cpp block at README.md:" << block.fence_line << ", after: "
                                           << block.paragraph_before);
    std::smatch m;
    REQUIRE(std::regex_search(block.paragraph_before, m, named));
    REQUIRE(m[1].str() == m[2].str());
    const fs::path source = kRoot / m[2].str();
    REQUIRE(fs::is_regular_file(source));
    INFO("copy " << m[2].str() << " into the block unchanged, or name the file it quotes");
    CHECK(block.body == read_text(source));
  }
}

TEST_CASE("README.md links every page of docs/", "[docs]") {
  const std::string readme = read_text(kRoot / "README.md");
  std::vector<std::string> unlinked;
  for (const auto& entry : fs::directory_iterator(kRoot / "docs")) {
    if (entry.path().extension() != ".md") continue;
    const std::string page = "docs/" + entry.path().filename().string();
    if (readme.find("](" + page + ")") == std::string::npos &&
        readme.find("](" + page + "#") == std::string::npos) {
      unlinked.push_back(page);
    }
  }
  INFO("link each page from the README's Documentation list");
  for (const std::string& page : unlinked) UNSCOPED_INFO(page);
  CHECK(unlinked.empty());
}

TEST_CASE("README.md stays a front door: at most 300 lines", "[docs]") {
  const size_t lines = lines_of(read_text(kRoot / "README.md")).size();
  INFO("README.md has " << lines << " lines; move the reference material into docs/ and link it");
  CHECK(lines <= kMaxReadmeLines);
}
