#include "tapegrad/runtime/trace_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tapegrad/autograd/error.h"

namespace tg {
namespace {

// What `path` is when it is not a regular file, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// The file a write to `path` replaces: `path` with its symbolic links followed (a dangling link
// names the file it would create).
std::string target_of(const std::string& path) {
  std::error_code error;
  const std::filesystem::path resolved = std::filesystem::weakly_canonical(path, error);
  return error ? path : resolved.string();
}

// Writes all of `text` to `fd`: write(2) may write less than asked, or be interrupted.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t written = ::write(fd, text.data(), text.size());
    if (written < 0 && errno == EINTR) continue;
    if (written == 0) errno = EIO;  // no progress and no reason: do not spin
    if (written <= 0) return false;
    text.remove_prefix(static_cast<size_t>(written));
  }
  return true;
}

}  // namespace

void write_trace_file(const std::string& path, std::string_view text, const std::string& what) {
  TG_CHECK(!path.empty(), what, ": the path is empty");
  const std::string target = target_of(path);
  struct stat existing {};
  if (::stat(target.c_str(), &existing) == 0) {
    TG_CHECK(S_ISREG(existing.st_mode), what, ": '", path, "' is ", kind_of(existing.st_mode),
             ", not a regular file");
  }
  const std::filesystem::path target_path(target);
  TG_CHECK(target_path.has_filename(), what, ": '", path, "' names a directory, not a file");
  const std::filesystem::path directory = target_path.parent_path();
  std::string temporary =
      (directory / ("." + target_path.filename().string() + ".tmp-XXXXXX")).string();

  const int fd = ::mkstemp(temporary.data());
  if (fd < 0) {
    const int error = errno;
    fail(what, ": cannot create a file next to '", path, "': ", std::strerror(error));
  }
  // From here on a failure removes the temporary, so the target stays as it was.
  auto give_up = [&](const char* doing, int error) {
    ::close(fd);
    ::unlink(temporary.c_str());
    fail(what, ": cannot write '", path, "' (", doing, "): ", std::strerror(error));
  };
  if (::fchmod(fd, 0644) != 0) give_up("chmod", errno);  // mkstemp's 0600 would hide it from others
  if (!write_all(fd, text)) give_up("write", errno);
  if (::fsync(fd) != 0) give_up("fsync", errno);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(what, ": cannot write '", path, "' (close): ", std::strerror(error));
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    fail(what, ": cannot rename the written trace over '", path, "': ", std::strerror(error));
  }
}

}  // namespace tg
