#pragma once
// Shared by the fuzz targets. The loaders under test take a path, not bytes, so each input is
// written to one scratch file per process: created once with mkstemp in the temporary directory
// ($TMPDIR or /tmp), rewritten every iteration, removed when the process exits normally (a crash
// leaves it behind; it is small).
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>

#include "tapegrad/runtime/threads.h"

namespace tg::fuzz {

// One thread a fuzzing process, set before the first input: libFuzzer may run several processes
// at once, and the kernels' pool would otherwise start a worker a core for a large input.
inline const bool kFuzzOneThread = [] {
  tg::set_num_threads(1);
  return true;
}();

// Stops the fuzzer with a message: for a harness that cannot do its job (the scratch file cannot
// be written) and for a broken promise of the code under test, which libFuzzer reports as a crash.
[[noreturn]] inline void die(const std::string& message) {
  std::fprintf(stderr, "fuzz: %s\n", message.c_str());
  std::abort();
}

class ScratchFile {
 public:
  ScratchFile() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tapegrad-fuzz-XXXXXX").string();
    const int fd = ::mkstemp(pattern.data());
    if (fd < 0) die("cannot create a scratch file " + pattern);
    ::close(fd);
    path_ = pattern;
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  // Replaces the file's contents with `bytes`; returns its path.
  const std::string& write(std::string_view bytes) const {
    std::FILE* file = std::fopen(path_.c_str(), "wb");
    if (file == nullptr) die("cannot open the scratch file " + path_);
    const bool written = std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size();
    if (std::fclose(file) != 0 || !written) die("cannot write the scratch file " + path_);
    return path_;
  }
  const std::string& write(const uint8_t* data, size_t size) const {
    return write(std::string_view(reinterpret_cast<const char*>(data), size));
  }

 private:
  std::string path_;
};

// This process's scratch file.
inline const ScratchFile& scratch() {
  static const ScratchFile file;
  return file;
}

}  // namespace tg::fuzz
