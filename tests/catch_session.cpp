// Catch2's implementation and the main of every test executable, compiled once for all of them:
// the slowest translation unit of the suite.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

// An executable may decline the whole run by defining this (tests/cuda/main.cpp: the real-GPU
// variant on a machine without a GPU): the exit code to stop with, or -1 to run the tests.
[[gnu::weak]] int tapegrad_tests_skip_code();

int main(int argc, char* argv[]) {
  if (tapegrad_tests_skip_code != nullptr) {
    const int code = tapegrad_tests_skip_code();
    if (code >= 0) return code;
  }
  return Catch::Session().run(argc, argv);
}
