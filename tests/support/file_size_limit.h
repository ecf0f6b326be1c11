#pragma once
// A file-size limit for this process while it lives, for tests of writes that fail midway.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>

namespace tg::testing {

// RLIMIT_FSIZE lowered to `bytes` (SIGXFSZ ignored, so writes past the limit fail with EFBIG
// instead of killing the process): makes a write fail even for root. Restored when it ends.
struct FileSizeLimit {
  rlimit saved{};
  struct sigaction saved_action {};
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    REQUIRE(::sigaction(SIGXFSZ, &ignore, &saved_action) == 0);
    const rlimit limit{bytes, saved.rlim_max};
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &limit) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved);
    ::sigaction(SIGXFSZ, &saved_action, nullptr);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
};

}  // namespace tg::testing
