#pragma once
// What the doc tests share: the Markdown pages they check (every docs/*.md and the pages beside
// the code, sorted; scripts/doc-links.sh lists the same ones) and a file's lines.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace doc_pages {

inline const std::filesystem::path& source_root() {
  static const std::filesystem::path root =
      std::filesystem::path(TAPEGRAD_SOURCE_DIR).lexically_normal();
  return root;
}

// The pages under `root` (a copy of the tree in some tests): those of the list that exist, and
// every docs/*.md.
inline std::vector<std::filesystem::path> pages(const std::filesystem::path& root = source_root()) {
  std::vector<std::filesystem::path> found;
  for (const char* page : {"README.md", "cpu/README.md", "data/README.md", "bench/RESULTS.md",
                           "tests/fuzz/README.md"}) {
    if (std::filesystem::exists(root / page)) found.push_back(root / page);
  }
  for (const auto& entry : std::filesystem::directory_iterator(root / "docs")) {
    if (entry.path().extension() == ".md") found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end());
  return found;
}

// The file's lines (a test failure naming the file if it cannot be read).
inline std::vector<std::string> read_lines(const std::filesystem::path& path) {
  std::ifstream file(path);
  INFO("cannot open " << path);
  REQUIRE(file.good());
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(file, line)) lines.push_back(line);
  return lines;
}

}  // namespace doc_pages
