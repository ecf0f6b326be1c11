#pragma once
// Running the real `tapegrad` binary from tests: a temporary directory, files in and out, and
// the exit code, stdout and stderr of one command.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

namespace tg::testing {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "tapegrad-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
  REQUIRE(out.good());
}

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `tapegrad <arguments>` (a shell-quoted string) with stdout and stderr captured.
inline CliResult run_cli(const std::string& arguments, const TempDir& dir) {
  const std::string out = dir.file(".stdout"), err = dir.file(".stderr");
  const std::string command = std::string("'") + TAPEGRAD_BIN + "' " + arguments + " > '" + out +
                              "' 2> '" + err + "' < /dev/null";
  const int status = std::system(command.c_str());
  CliResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_file(out);
  result.err = read_file(err);
  return result;
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A bad-input run: exit code 2 and exactly one line on stderr that mentions `expected`.
inline void require_one_line_error(const CliResult& result, const std::string& expected) {
  INFO("stderr: " << result.err << "stdout: " << result.out);
  REQUIRE(result.exit_code == 2);
  REQUIRE(lines_of(result.err).size() == 1);
  REQUIRE_THAT(result.err, Catch::Contains(expected));
}

}  // namespace tg::testing
