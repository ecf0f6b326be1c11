#pragma once
// Runs a shell command from a test: what it prints on stdout, and its exit code.
#include <catch2/catch.hpp>

#include <stdio.h>
#include <sys/wait.h>

#include <string>
#include <utility>

namespace tg::testing {

inline std::pair<std::string, int> run_command(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  const int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

}  // namespace tg::testing
