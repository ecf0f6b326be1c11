#pragma once
// Running the real `tapegrad` binary from tests: a temporary directory, files in and out, and
// the exit code, stdout and stderr of one command.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_files.h"

namespace tg::testing {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

// Runs `tapegrad <arguments>` (a shell-quoted string) with stdout and stderr captured; `launcher`
// (e.g. "timeout 120 mpirun -np 2") goes in front of the binary; `binary` is tapegrad's path.
inline CliResult run_cli(const std::string& arguments, const TempDir& dir,
                         const std::string& launcher = "",
                         const std::string& binary = TAPEGRAD_BIN) {
  const std::string out = dir.file(".stdout"), err = dir.file(".stderr");
  const std::string command = launcher + " '" + binary + "' " + arguments + " > '" + out +
                              "' 2> '" + err + "' < /dev/null";
  const int status = std::system(command.c_str());
  CliResult result;
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.out = read_bytes(out);
  result.err = read_bytes(err);
  return result;
}

#if defined(TAPEGRAD_MPIRUN)
// The launcher for `ranks` processes on this machine: `mpirun -np N --oversubscribe` (more ranks
// than cores), as root with --allow-run-as-root, inside `timeout 120` so that a hung job fails.
inline std::string mpi_launcher(int ranks) {
  return std::string("timeout 120 '") + TAPEGRAD_MPIRUN + "' -np " + std::to_string(ranks) + " --oversubscribe" +
         (geteuid() == 0 ? " --allow-run-as-root" : "");
}
#endif

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A --log's rows without the timing column (ms), the one thing that may differ between runs.
inline std::vector<std::string> log_without_ms(const std::string& path) {
  std::vector<std::string> rows;
  for (const std::string& line : lines_of(read_bytes(path))) {
    std::vector<std::string> cells;
    std::stringstream in(line);
    for (std::string cell; std::getline(in, cell, ',');) cells.push_back(cell);
    if (cells.size() > 4) cells.erase(cells.begin() + 4);
    std::string joined;
    for (const std::string& cell : cells) joined += cell + ",";
    rows.push_back(joined);
  }
  return rows;
}

// The training losses of a --log file (the third column, after the header line), one a step.
inline std::vector<double> logged_losses(const std::string& path) {
  std::vector<double> losses;
  const std::vector<std::string> lines = lines_of(read_bytes(path));
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t first = lines[i].find(','), second = lines[i].find(',', first + 1);
    losses.push_back(std::stod(lines[i].substr(second + 1)));
  }
  return losses;
}

// A bad-input run: exit code 2 and exactly one line on stderr that mentions `expected`.
inline void require_one_line_error(const CliResult& result, const std::string& expected) {
  INFO("stderr: " << result.err << "stdout: " << result.out);
  REQUIRE(result.exit_code == 2);
  REQUIRE(lines_of(result.err).size() == 1);
  REQUIRE_THAT(result.err, Catch::Contains(expected));
}

// Small data files for end-to-end runs: a sine series (times `scale`) with its index, 40 rows;
// and a pangram repeated 40 times.
inline std::string small_csv(double scale = 1.0) {
  std::string csv = "t,value\n";
  for (int i = 0; i < 40; ++i) {
    csv += std::to_string(i) + "," + std::to_string(scale * std::sin(i * 0.3)) + "\n";
  }
  return csv;
}

inline std::string small_text() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the quick brown fox jumps over the lazy dog. ";
  return text;
}

}  // namespace tg::testing
