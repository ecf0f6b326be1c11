// A page that quotes source code names the file it quotes, in a comment on the line right before
// the fenced block:
//
//   <!-- quote: nn/attention.cpp -->
//   ```cpp
//   Tensor MultiHeadAttention::split_heads(const Tensor& x) const {
//   ```
//
// (the path from the repository's root). Every line of the block must then be a line of that file,
// verbatim (indentation included; trailing spaces aside), and the lines must come in the file's
// order: a quote may leave lines out, but not change, add or reorder any. So an edit of the code
// that a page shows breaks this test instead of leaving the page showing code that is gone.
// Blocks without the comment (usage sketches, shell sessions, formulas) are not quotes.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "doc_pages.h"

namespace doc_quotes {

namespace fs = std::filesystem;

const fs::path& kRoot = doc_pages::source_root();

std::string without_trailing_spaces(std::string line) {
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t' || line.back() == '\r')) {
    line.pop_back();
  }
  return line;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::vector<std::string> lines = doc_pages::read_lines(path);
  for (std::string& line : lines) line = without_trailing_spaces(line);
  return lines;
}

// The index of the first quoted line that is not found in `source` after the previous one's
// match, or quote.size() when every line is found in order.
size_t first_missing_line(const std::vector<std::string>& quote,
                          const std::vector<std::string>& source) {
  size_t from = 0;
  for (size_t i = 0; i < quote.size(); ++i) {
    const std::string wanted = without_trailing_spaces(quote[i]);
    while (from < source.size() && without_trailing_spaces(source[from]) != wanted) ++from;
    if (from == source.size()) return i;
    ++from;
  }
  return quote.size();
}

bool is_fence(const std::string& line) {
  const size_t start = line.find_first_not_of(' ');
  return start != std::string::npos && line.compare(start, 3, "```") == 0;
}

}  // namespace doc_quotes

TEST_CASE("docs: a quote of source code is that file's lines, in order", "[docs]") {
  namespace dq = doc_quotes;
  static const std::regex marker(R"(^<!-- quote: ([^ ]+) -->$)");
  int quotes = 0;
  for (const std::filesystem::path& page : doc_pages::pages()) {
    const std::vector<std::string> lines = dq::lines_of(page);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (!std::regex_match(lines[i], m, marker)) continue;
      const std::string source = m[1];
      INFO(page.lexically_relative(dq::kRoot).string() << ":" << i + 1 << ": a quote of "
                                                       << source);
      ++quotes;
      if (i + 1 == lines.size() || !dq::is_fence(lines[i + 1])) {
        FAIL_CHECK("the quote comment must stand right before the fenced block it names");
        continue;
      }
      std::vector<std::string> quote;
      size_t end = i + 2;
      for (; end < lines.size() && !dq::is_fence(lines[end]); ++end) quote.push_back(lines[end]);
      CHECK(end < lines.size());  // the block is closed
      CHECK(!quote.empty());
      const std::filesystem::path file = dq::kRoot / source;
      if (!std::filesystem::is_regular_file(file)) {
        FAIL_CHECK(source << " does not exist");
        continue;
      }
      const size_t missing = dq::first_missing_line(quote, dq::lines_of(file));
      if (missing < quote.size()) {
        FAIL_CHECK("line " << i + 3 + missing << " of the page is not in " << source
                           << " (after the lines quoted before it): " << quote[missing]
                           << "\ncopy the quote from " << source << " again");
      }
    }
  }
  REQUIRE(quotes >= 6);  // docs/attention.md and docs/engine.md quote the code they explain
}

TEST_CASE("docs: a quote matches verbatim and in order, with lines left out", "[docs]") {
  const std::vector<std::string> source = {"void f() {", "  int a = 1;", "  int b = 2;  ",
                                           "  return;", "}"};
  CHECK(doc_quotes::first_missing_line({"void f() {", "  int b = 2;", "}"}, source) == 3);
  CHECK(doc_quotes::first_missing_line({"  int b = 2;   "}, source) == 1);  // trailing spaces
  CHECK(doc_quotes::first_missing_line({"  int b = 2;", "  int a = 1;"}, source) == 1);  // order
  CHECK(doc_quotes::first_missing_line({"int a = 1;"}, source) == 0);  // indentation counts
  CHECK(doc_quotes::first_missing_line({"  int a = 1;", "  int c = 3;"}, source) == 1);
  CHECK(doc_quotes::first_missing_line({"  return;", "  return;"}, source) == 1);  // once each
}
