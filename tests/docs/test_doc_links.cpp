// The Markdown pages link to each other and to the sources with relative links, which a move
// breaks silently. For every link [text](target) outside fenced code blocks, of README.md,
// cpu/README.md, docs/*.md and the other pages below: the target must be a file or directory of
// the repository (not outside it), a line anchor #L12 or #L12-L20 must lie within the file, and a
// section anchor #name must be a heading of the page it names (GitHub's spelling of headings).
// Links with a scheme (https:, mailto:) are not checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "doc_pages.h"

namespace fs = std::filesystem;

namespace doc_links {

const fs::path& kRoot = doc_pages::source_root();

// The lines of a file that are not inside a fenced code block (fences excluded), with their
// numbers; or every line, fences included, when `all` is set.
std::vector<std::pair<int, std::string>> lines_of(const fs::path& path, bool all = false) {
  std::vector<std::pair<int, std::string>> lines;
  bool fenced = false;
  int number = 0;
  for (const std::string& line : doc_pages::read_lines(path)) {
    ++number;
    const size_t start = line.find_first_not_of(' ');
    const bool fence = start != std::string::npos && line.compare(start, 3, "```") == 0;
    if (fence) fenced = !fenced;
    if (all || (!fence && !fenced)) lines.emplace_back(number, line);
  }
  return lines;
}

// GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation but - and _ dropped.
std::string slug(const std::string& heading) {
  std::string anchor;
  for (const char c : heading) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == ' ') {
      anchor += '-';
    } else if (std::isalnum(byte) || c == '-' || c == '_' || byte >= 0x80) {
      anchor += static_cast<char>(std::tolower(byte));
    }
  }
  return anchor;
}

// The section anchors of a page: each heading's slug, and slug-1, slug-2, ... for repeats.
std::set<std::string> anchors_of(const fs::path& page) {
  static const std::regex heading(R"(^#{1,6}\s+(.*?)\s*#*\s*$)");
  std::set<std::string> anchors;
  for (const auto& [number, line] : lines_of(page)) {
    std::smatch m;
    if (!std::regex_match(line, m, heading)) continue;
    const std::string first = slug(m[1]);
    std::string anchor = first;
    for (int repeat = 1; anchors.count(anchor) > 0; ++repeat) {
      anchor = first + "-" + std::to_string(repeat);
    }
    anchors.insert(anchor);
  }
  return anchors;
}

// Checks the fragment of a link to `target` (an existing path): a line range, or a heading.
void check_fragment(const fs::path& target, const std::string& fragment) {
  static const std::regex line_range(R"(L([0-9]+)(-L([0-9]+))?)");
  std::smatch m;
  if (std::regex_match(fragment, m, line_range)) {
    const size_t count = lines_of(target, /*all=*/true).size();
    const size_t first = std::stoul(m[1].str());
    const size_t last = m[3].matched ? std::stoul(m[3].str()) : first;
    INFO(target << " has " << count << " lines");
    CHECK(1 <= first);
    CHECK(first <= last);
    CHECK(last <= count);
    return;
  }
  INFO("a section anchor must name a heading of a Markdown page");
  CHECK(target.extension() == ".md");
  if (target.extension() == ".md") CHECK(anchors_of(target).count(fragment) == 1);
}

// Checks one link of `page`: the target exists inside the repository, and so does its fragment.
void check_link(const fs::path& page, const std::string& target) {
  const size_t hash = target.find('#');
  const std::string path = target.substr(0, hash);
  const std::string fragment = hash == std::string::npos ? "" : target.substr(hash + 1);
  const fs::path resolved = path.empty() ? page : (page.parent_path() / path).lexically_normal();
  const std::string relative = resolved.lexically_relative(kRoot).string();
  const bool inside = !relative.empty() && relative.rfind("..", 0) != 0;
  INFO("the link must stay inside the repository, and its target must exist");
  CHECK(inside);
  CHECK(fs::exists(resolved));
  if (inside && fs::exists(resolved) && !fragment.empty()) check_fragment(resolved, fragment);
}

}  // namespace doc_links

TEST_CASE("docs: every relative link of the Markdown pages resolves", "[docs]") {
  static const std::regex link(R"(\]\(([^)\s]+)\))");
  static const std::regex scheme(R"(^[A-Za-z][A-Za-z0-9+.-]*:)");
  int links = 0;
  for (const fs::path& page : doc_pages::pages()) {
    for (const auto& [number, line] : doc_links::lines_of(page)) {
      const auto end = std::sregex_iterator();
      for (auto it = std::sregex_iterator(line.begin(), line.end(), link); it != end; ++it) {
        const std::string target = (*it)[1];
        if (std::regex_search(target, scheme)) continue;
        INFO(page.lexically_relative(doc_links::kRoot).string() << ":" << number << ": " << it->str());
        doc_links::check_link(page, target);
        ++links;
      }
    }
  }
  REQUIRE(links >= 50);  // the pages link to each other and to the code throughout
}
