// docs/reliability.md lists every environment variable that changes what tapegrad does. This test
// finds the variables in the sources (the library and the command line, not the tests): the
// argument of every getenv, secure_getenv, setenv and unsetenv (a string literal, a constant
// defined as one, or the variable of a loop over literals), and every string literal that
// spells a TAPEGRAD_ name; each must appear in the page, in backquotes.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

// In a namespace of its own, test cases included: the tests are compiled a few files together.
namespace environment_doc {

const fs::path kRoot = fs::path(TAPEGRAD_SOURCE_DIR).lexically_normal();

std::string read_text(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

// The shipped sources: every folder but tests/, examples/, bench/ and the build.
std::vector<fs::path> shipped_sources() {
  std::vector<fs::path> sources;
  for (const char* folder : {"autograd", "runtime", "ops", "cpu", "nn", "io", "train",
                             "analysis", "plot", "cli", "distributed", "cuda"}) {
    for (const auto& entry : fs::recursive_directory_iterator(kRoot / folder)) {
      const std::string extension = entry.path().extension().string();
      if (extension == ".cpp" || extension == ".h" || extension == ".cu" || extension == ".cuh") {
        sources.push_back(entry.path());
      }
    }
  }
  return sources;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A literal, or a constant defined as one anywhere in the sources
// (`const char* kName = "VARIABLE"`).
std::set<std::string> literal_or_constant(const std::string& argument,
                                          const std::vector<std::string>& all_lines) {
  static const std::regex literal("\"([A-Za-z0-9_]+)\"");
  std::smatch match;
  if (std::regex_match(argument, match, literal)) return {match[1]};
  const std::regex constant("char\\s*\\*\\s*(?:const\\s+)?" + argument + "\\s*=\\s*\"([A-Za-z0-9_]+)\"");
  for (const std::string& line : all_lines) {
    if (line.find(argument) != std::string::npos && std::regex_search(line, match, constant)) return {match[1]};
  }
  return {};
}

// The names a getenv-like call's argument stands for: a literal or a constant; a loop variable
// over literals on its line or the lines before (`for (const char* name : {"A", "B"})`); or a
// function's `const char*` parameter, which stands for the first arguments of the function's
// calls (`chosen_by(kPathVariable, ...)`).
std::set<std::string> names_of(const std::string& argument, const std::vector<std::string>& lines,
                               size_t line, const std::vector<std::string>& all_lines) {
  static const std::regex literal("\"([A-Za-z0-9_]+)\"");
  std::set<std::string> names = literal_or_constant(argument, all_lines);
  if (!names.empty()) return names;
  std::smatch match;
  const std::regex loop("for\\s*\\(\\s*const char\\s*\\*\\s*" + argument + "\\s*:\\s*\\{([^}]*)\\}");
  for (size_t back = 0; back <= line && back < 5; ++back) {
    if (!std::regex_search(lines[line - back], match, loop)) continue;
    const std::string list = match[1];
    for (auto it = std::sregex_iterator(list.begin(), list.end(), literal); it != std::sregex_iterator(); ++it) {
      names.insert((*it)[1]);
    }
    return names;
  }
  const std::regex parameter("(\\w+)\\s*\\(\\s*const char\\s*\\*\\s*" + argument + "\\b");
  for (size_t back = 0; back <= line && back < 40; ++back) {
    if (!std::regex_search(lines[line - back], match, parameter)) continue;
    const std::regex calls("\\b" + match[1].str() + "\\s*\\(\\s*([A-Za-z0-9_:\"]+)");
    for (const std::string& source_line : all_lines) {
      if (source_line.find(match[1].str()) == std::string::npos) continue;
      for (auto it = std::sregex_iterator(source_line.begin(), source_line.end(), calls);
           it != std::sregex_iterator(); ++it) {
        std::string first = (*it)[1];
        if (first == "const") continue;  // the definition
        first = first.substr(first.rfind(':') == std::string::npos ? 0 : first.rfind(':') + 1);
        const std::set<std::string> resolved = literal_or_constant(first, all_lines);
        names.insert(resolved.begin(), resolved.end());
      }
    }
    return names;
  }
  return names;
}


TEST_CASE("docs/reliability.md lists every environment variable the sources read or set", "[docs]") {
  const std::vector<fs::path> sources = shipped_sources();
  REQUIRE(sources.size() > 100);
  std::vector<std::string> all_lines;
  for (const fs::path& path : sources) {
    for (std::string& line : lines_of(read_text(path))) all_lines.push_back(std::move(line));
  }
  const std::string page = read_text(kRoot / "docs/reliability.md");
  REQUIRE_FALSE(page.empty());

  static const std::regex call("\\b(?:secure_getenv|getenv|setenv|unsetenv)\\s*\\(\\s*([A-Za-z0-9_:\"]+)");
  static const std::regex tapegrad_literal("\"(TAPEGRAD_[A-Z0-9_]+)\"");
  std::set<std::string> found;
  int calls = 0;
  for (const fs::path& path : sources) {
    const std::vector<std::string> lines = lines_of(read_text(path));
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string& line = lines[i];
      if (line.find("//") != std::string::npos && line.find("//") < line.find("env")) continue;
      for (auto it = std::sregex_iterator(line.begin(), line.end(), call); it != std::sregex_iterator(); ++it) {
        std::string argument = (*it)[1];
        if (argument.rfind("std::", 0) == 0) continue;
        const std::set<std::string> names = names_of(argument, lines, i, all_lines);
        INFO(path.string() << ":" << i + 1 << ": " << line);
        CHECK_FALSE(names.empty());  // an argument this test cannot follow: teach it, or use a literal
        found.insert(names.begin(), names.end());
        ++calls;
      }
      for (auto it = std::sregex_iterator(line.begin(), line.end(), tapegrad_literal);
           it != std::sregex_iterator(); ++it) {
        found.insert((*it)[1]);
      }
    }
  }
  // The reads this test must find at least: one per kind of source.
  CHECK(calls >= 8);
  for (const char* known : {"TAPEGRAD_FONT", "TAPEGRAD_INT8_KERNEL", "TAPEGRAD_ATTENTION_TILES",
                            "TAPEGRAD_MAX_CPU_ISA", "TAPEGRAD_OPENBLAS_FALLBACK", "OPENBLAS_CORETYPE",
                            "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    INFO(known);
    CHECK(found.count(known) == 1);
  }
  for (const std::string& name : found) {
    INFO("docs/reliability.md does not mention `" << name << "`");
    CHECK(page.find("`" + name + "`") != std::string::npos);
  }
}

TEST_CASE("the shipped tapegrad holds no test hook's variable", "[docs][cli]") {
  // The hooks (TAPEGRAD_TEST_*) are tapegrad_hooked's alone
  // (tests/distributed/hooked_tapegrad.cpp).
  std::ifstream binary(TAPEGRAD_BIN, std::ios::binary);
  std::ostringstream bytes;
  bytes << binary.rdbuf();
  REQUIRE(bytes.str().size() > 100000);
  CHECK(bytes.str().find("TAPEGRAD_TEST_") == std::string::npos);
}

}  // namespace environment_doc
