#pragma once
// A command run in the background from a test, so that the test can act while it runs (send it a
// signal once its stderr says it is waiting): started with /bin/sh, its stderr in a file.
#include <catch2/catch.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/support/temp_files.h"

extern char** environ;

namespace tg::testing {

struct BackgroundRun {
  pid_t pid = -1;    // the shell, which exec's the command: the command's own process
  std::string err;   // the file its stderr goes to
};

// Starts `sh -c "exec COMMAND 2> ERR"` (COMMAND redirects its stdout itself, if it wants), with
// SIGINT, SIGTERM and SIGHUP at their default actions and no signal blocked, whatever this process has
// (a test run in a shell's background ignores SIGINT).
inline BackgroundRun start_background(const std::string& command, const std::string& err) {
  BackgroundRun run{.pid = -1, .err = err};
  const std::string shell = "exec " + command + " 2> '" + err + "' < /dev/null";
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  sigset_t defaults, none;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGHUP);
  sigemptyset(&none);
  posix_spawnattr_setsigdefault(&attributes, &defaults);
  posix_spawnattr_setsigmask(&attributes, &none);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  const char* argv[] = {"/bin/sh", "-c", shell.c_str(), nullptr};
  const int failed = posix_spawn(&run.pid, "/bin/sh", nullptr, &attributes,
                                 const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attributes);
  REQUIRE(failed == 0);
  return run;
}

// Waits (up to 120 s) until the run's stderr holds `text`, and returns the stderr; fails when
// the run ends first.
inline std::string wait_for_text(const BackgroundRun& run, const std::string& text) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  for (std::string err = read_bytes(run.err);; err = read_bytes(run.err)) {
    if (err.find(text) != std::string::npos) return err;
    int status = 0;
    const bool ended = waitpid(run.pid, &status, WNOHANG) == run.pid;
    if (ended || std::chrono::steady_clock::now() > deadline) {
      if (!ended) kill(run.pid, SIGKILL);
      FAIL("no '" << text << "' on stderr: " << err);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// The run's wait status once it has ended (killed with SIGKILL after 120 s).
inline int wait_for_end(const BackgroundRun& run) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  int status = 0;
  while (waitpid(run.pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) kill(run.pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status;
}

}  // namespace tg::testing
