#include "tapegrad/io/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <system_error>
#include <utility>

#include "tapegrad/autograd/error.h"

namespace tg {
namespace {

namespace fs = std::filesystem;

// The text of an errno value (thread-safe, unlike std::strerror). Callers capture errno right
// after the call that failed, before anything else can change it.
std::string error_text(int error) { return std::generic_category().message(error); }

// What a file is, for messages: "a FIFO".
const char* kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

bool is_symlink(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode);
}

// "what: 'path' is a FIFO, not a regular file", or "... is a symbolic link to a FIFO, ...".
[[noreturn]] void fail_not_regular(const std::string& what, const std::string& path, mode_t mode,
                                   const char* expected = "a regular file") {
  fail(what, ": '", path, "' is ", is_symlink(path) ? "a symbolic link to " : "", kind_of(mode),
       ", not ", expected);
}

// A file descriptor closed when it goes out of scope (close errors ignored: callers that care,
// writers, close explicitly and check).
class Descriptor {
 public:
  explicit Descriptor(int fd = -1) : fd_(fd) {}
  ~Descriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// Opens the regular file `path` for reading without ever blocking on a FIFO; returns the
// descriptor (blocking again) and fills `info`.
int open_regular_for_reading(const std::string& path, const std::string& what, struct stat& info) {
  // Refuse what is plainly not a regular file before opening it; fstat below decides for real.
  if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    fail_not_regular(what, path, info.st_mode);
  }
  Descriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int error = errno;
    fail(what, ": cannot open '", path, "': ", error_text(error));
  }
  if (::fstat(fd.get(), &info) != 0) {
    const int error = errno;
    fail(what, ": cannot stat '", path, "': ", error_text(error));
  }
  if (!S_ISREG(info.st_mode)) fail_not_regular(what, path, info.st_mode);  // it changed meanwhile
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int error = errno;
    fail(what, ": cannot make '", path, "' blocking again: ", error_text(error));
  }
  return fd.release();
}

// Writes all of `bytes` to `fd`, retrying EINTR and partial writes; throws naming `path`.
void write_all(int fd, const char* bytes, size_t nbytes, const std::string& what,
               const std::string& path) {
  while (nbytes > 0) {
    const ssize_t written = ::write(fd, bytes, nbytes);
    if (written < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      fail(what, ": writing '", path, "' failed: ", error_text(error));
    }
    TG_CHECK(written > 0, what, ": writing '", path, "' failed: nothing was written");
    bytes += written;
    nbytes -= static_cast<size_t>(written);
  }
}

// `path` with its symbolic links followed as long as it is one (the directories on the way are
// left to the kernel): a file that exists and is not a link, or a name that does not exist yet.
std::string follow_symlinks(const std::string& path, const std::string& what) {
  constexpr int kMaxLinks = 40;  // the kernel's limit (ELOOP)
  fs::path current = path;
  for (int links = 0; links <= kMaxLinks; ++links) {
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0 || !S_ISLNK(info.st_mode)) return current.string();
    std::error_code error;
    const fs::path target = fs::read_symlink(current, error);
    if (error) fail(what, ": cannot read the symbolic link '", current.string(), "': ", error.message());
    // A relative target is relative to the link's directory (not normalised: '..' after a
    // symbolic link to a directory is for the kernel to resolve).
    current = target.is_absolute() || !current.has_parent_path() ? target : current.parent_path() / target;
  }
  fail(what, ": '", path, "': ", error_text(ELOOP));
}

// The directory part of `path` ("." for a bare name) and the name in it.
std::string directory_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string name_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The checks every output path gets first: not empty and not a directory name.
void check_file_name(const std::string& path, const std::string& what) {
  TG_CHECK(!path.empty(), what, ": the path is empty");
  if (path.back() == '/') {
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
      fail_not_regular(what, path, info.st_mode);
    }
    fail(what, ": '", path, "' ends in '/': expected the name of a file, not of a directory");
  }
}

// "0444": the permission bits of `mode`, for messages.
std::string octal_mode(mode_t mode) {
  char digits[8];
  std::snprintf(digits, sizeof digits, "%04o", static_cast<unsigned>(mode & 07777));
  return digits;
}

// Follows `path`'s symbolic links and refuses anything but a regular file or a new name; returns
// the file to replace. `info` is filled when it exists.
std::string replaceable_target(const std::string& path, const std::string& what, struct stat& info,
                               bool& exists) {
  check_file_name(path, what);
  const std::string target = follow_symlinks(path, what);
  exists = ::stat(target.c_str(), &info) == 0;
  if (exists && !S_ISREG(info.st_mode)) fail_not_regular(what, path, info.st_mode);
  // rename() needs only the directory's permission; a shell's `>` needs the file's. Replace only
  // a file this process could have opened for writing (a 0444 checkpoint stays).
  if (exists && ::faccessat(AT_FDCWD, target.c_str(), W_OK, AT_EACCESS) != 0) {
    const int error = errno;
    fail(what, ": cannot replace '", path, "': ", error_text(error), " (mode ",
         octal_mode(info.st_mode), ")");
  }
  return target;
}

// Temporaries are named ".tapegrad-" + 16 hex digits + ".tmp-" + 6 letters or digits (mkstemp's
// XXXXXX), in the target's directory. The hex digits are a hash of the target's name: the name
// marks the file as a temporary tapegrad made for that target, so the sweep below never takes a
// user's "ck.st.tmp-notes1", and its length does not grow with the target's (a 255-byte file name,
// the most a directory entry holds, still gets a temporary).
constexpr const char* kTemporaryMarker = ".tapegrad-";
constexpr const char* kTemporaryInfix = ".tmp-";
constexpr size_t kTemporaryLetters = 6;

// The 64-bit FNV-1a hash of `name` in 16 hex digits.
std::string name_hash(const std::string& name) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const unsigned char byte : name) hash = (hash ^ byte) * 0x100000001b3ull;
  char digits[17];
  std::snprintf(digits, sizeof digits, "%016llx", static_cast<unsigned long long>(hash));
  return digits;
}

// True for `name` == temporary_name_prefix(base) + 6 letters or digits.
bool is_temporary_of(const std::string& name, const std::string& base) {
  const std::string prefix = temporary_name_prefix(base);
  if (name.size() != prefix.size() + kTemporaryLetters || name.compare(0, prefix.size(), prefix) != 0) {
    return false;
  }
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
  }
  return true;
}

// A mkstemp pattern for a temporary of `target` (see above).
std::string temporary_pattern(const std::string& target) {
  return directory_of(target) + "/" + temporary_name_prefix(name_of(target)) +
         std::string(kTemporaryLetters, 'X');
}

// Removes the orphaned temporaries of `target` (see the header): the regular files named like its
// temporaries that nobody holds a lock on. Best effort: a save never fails because of an orphan.
void remove_orphan_temporaries(const std::string& target) {
  const std::string directory = directory_of(target), base = name_of(target);
  DIR* listing = ::opendir(directory.c_str());
  if (listing == nullptr) return;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string name = entry->d_name;
    if (!is_temporary_of(name, base)) continue;
    const std::string path = directory + "/" + name;
    struct stat by_name {}, opened {};
    if (::lstat(path.c_str(), &by_name) != 0 || !S_ISREG(by_name.st_mode)) continue;
    if (by_name.st_uid != ::geteuid()) continue;  // only our own user's saves leave ours
    Descriptor fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (fd.get() < 0 || ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) continue;  // a save in progress
    // Unlink only the file that was locked: the name must still lead to it.
    if (::fstat(fd.get(), &opened) == 0 && ::lstat(path.c_str(), &by_name) == 0 &&
        opened.st_dev == by_name.st_dev && opened.st_ino == by_name.st_ino) {
      ::unlink(path.c_str());
    }
  }
  ::closedir(listing);
}

// Makes a rename in `directory` durable. Best effort: the new file is already in place, so a
// failure here is not reported as a failed save.
void sync_directory(const std::string& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

// ---- Reading --------------------------------------------------------------------------------------

std::string read_regular_file(const std::string& path, const std::string& what) {
  struct stat info {};
  const Descriptor fd(open_regular_for_reading(path, what, info));
  std::string contents;
  contents.reserve(static_cast<size_t>(info.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof buffer);
    if (got < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      fail(what, ": reading '", path, "' failed: ", error_text(error));
    }
    if (got == 0) return contents;
    contents.append(buffer, static_cast<size_t>(got));
  }
}

InputFile::InputFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  struct stat info {};
  fd_ = open_regular_for_reading(path, what, info);
  size_ = static_cast<uint64_t>(info.st_size);
}

InputFile::~InputFile() { ::close(fd_); }

void InputFile::read_at(uint64_t offset, void* destination, uint64_t nbytes) const {
  char* bytes = static_cast<char*>(destination);
  while (nbytes > 0) {
    const ssize_t got = ::pread(fd_, bytes, nbytes, static_cast<off_t>(offset));
    if (got < 0) {
      const int error = errno;
      if (error == EINTR) continue;
      fail(what_, ": reading '", path_, "' failed: ", error_text(error));
    }
    TG_CHECK(got > 0, what_, ": '", path_, "' ended early (truncated while being read?)");
    bytes += got;
    offset += static_cast<uint64_t>(got);
    nbytes -= static_cast<uint64_t>(got);
  }
}

// ---- Replacing a file atomically ----------------------------------------------------------------

std::string temporary_name_prefix(const std::string& target_name) {
  return kTemporaryMarker + name_hash(target_name) + kTemporaryInfix;
}

AtomicFile::AtomicFile(const std::string& path, const std::string& what) : path_(path), what_(what) {
  struct stat existing {};
  bool exists = false;
  target_ = replaceable_target(path, what, existing, exists);
  remove_orphan_temporaries(target_);
  // A sweep by another save can remove our temporary between mkstemp and flock; then the locked
  // file has no name any more (st_nlink 0) and we make another.
  for (int attempt = 0; attempt < 10 && fd_ < 0; ++attempt) {
    std::string pattern = temporary_pattern(target_);
    Descriptor fd(::mkostemp(pattern.data(), O_CLOEXEC));
    if (fd.get() < 0) {
      const int error = errno;
      fail(what, ": cannot create a temporary file '", pattern, "' next to '", path, "': ",
           error_text(error));
    }
    int locked = -1;
    do {
      locked = ::flock(fd.get(), LOCK_EX);
    } while (locked != 0 && errno == EINTR);
    // Without flock (some network file systems) there is no lock, and no sweep can remove it.
    struct stat created {};
    if (::fstat(fd.get(), &created) == 0 && created.st_nlink == 0) continue;
    // mkstemp makes the file 0600; a saved file gets the mode of the one it replaces, else 0644.
    const mode_t mode = exists ? (existing.st_mode & 07777) : 0644;
    if (::fchmod(fd.get(), mode) != 0) {
      const int error = errno;
      ::unlink(pattern.c_str());
      fail(what, ": cannot set the mode of the temporary file '", pattern, "': ", error_text(error));
    }
    temporary_ = pattern;
    fd_ = fd.release();
  }
  TG_CHECK(fd_ >= 0, what, ": cannot keep a temporary file next to '", path,
           "': other processes removed each one");
}

AtomicFile::~AtomicFile() {
  if (committed_) return;
  if (!temporary_.empty()) ::unlink(temporary_.c_str());  // while it is still locked
  if (fd_ >= 0) ::close(fd_);
}

void AtomicFile::write(const void* data, size_t nbytes) {
  TG_CHECK(fd_ >= 0, what_, ": the temporary file for '", path_, "' is already closed");
  write_all(fd_, static_cast<const char*>(data), nbytes, what_, path_);  // the name the user gave
}

void AtomicFile::commit() {
  TG_CHECK(fd_ >= 0, what_, ": the temporary file for '", path_, "' is already closed");
  // The lock belongs to the open file description, which a dup() shares: it stays held through
  // the rename after the written descriptor is closed (no sweep can take the temporary meanwhile).
  const Descriptor lock(::dup(fd_));
  if (lock.get() < 0) {
    const int error = errno;
    fail(what_, ": cannot duplicate the descriptor of '", temporary_, "': ", error_text(error));
  }
  if (::fsync(fd_) != 0) {
    const int error = errno;
    fail(what_, ": fsync of '", temporary_, "' failed: ", error_text(error));
  }
  // POSIX leaves the descriptor unspecified after a failed close (Linux always frees it): never
  // close it twice.
  if (::close(std::exchange(fd_, -1)) != 0) {
    const int error = errno;
    fail(what_, ": closing '", temporary_, "' failed: ", error_text(error));
  }
  // The target may have become a FIFO or a directory while we wrote: check again.
  struct stat info {};
  if (::stat(target_.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
    fail_not_regular(what_, path_, info.st_mode);
  }
  if (::rename(temporary_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    fail(what_, ": cannot rename the temporary file '", temporary_, "' over '", target_, "': ",
         error_text(error));
  }
  committed_ = true;
  sync_directory(directory_of(target_));
}

void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what) {
  AtomicFile file(path, what);
  file.write(bytes);
  file.commit();
}

namespace {

// The rename that puts an output in place fails with ENAMETOOLONG when its name is longer than
// the directory's file system allows, or the whole path longer than PATH_MAX: found here, before
// the work, not at the end of it.
void check_name_length(const std::string& path, const std::string& target,
                       const std::string& directory, const std::string& flag) {
  TG_CHECK(target.size() < PATH_MAX, flag, ": cannot write '", path, "': the path is ",
           target.size(), " bytes, more than the ", PATH_MAX - 1, " a path may have");
  const long name_max = ::pathconf(directory.c_str(), _PC_NAME_MAX);  // -1: no such directory
  const std::string name = name_of(target);
  TG_CHECK(name_max < 0 || name.size() <= static_cast<size_t>(name_max), flag, ": cannot write '",
           path, "': its name is ", name.size(), " bytes, more than the ", name_max,
           " a file name may have in '", directory, "'");
}

// In a sticky directory (mode 1777, like /tmp) only the file's owner, the directory's owner or
// root may rename over a file (EPERM otherwise), whatever the file's own permissions say.
void check_sticky_replace(const std::string& path, const struct stat& file,
                          const struct stat& directory, const std::string& flag) {
  const uid_t self = ::geteuid();
  if ((directory.st_mode & S_ISVTX) == 0 || self == 0) return;
  TG_CHECK(file.st_uid == self || directory.st_uid == self, flag, ": cannot replace '", path,
           "': it belongs to another user (uid ", file.st_uid, ") and its directory is sticky "
           "(mode ", octal_mode(directory.st_mode), "): only the file's owner may replace it");
}

}  // namespace

void check_output_path(const std::string& path, const std::string& flag) {
  struct stat info {};
  bool exists = false;
  const std::string target = replaceable_target(path, flag, info, exists);
  const std::string directory = directory_of(target);
  check_name_length(path, target, directory, flag);  // (a directory path past PATH_MAX: no stat)
  struct stat directory_info {};
  if (::stat(directory.c_str(), &directory_info) != 0) {
    const int error = errno;
    TG_CHECK(error != ENOENT, flag, ": cannot write '", path, "': the directory '", directory,
             "' does not exist");
    fail(flag, ": cannot write '", path, "': cannot stat its directory '", directory, "': ",
         error_text(error));
  }
  TG_CHECK(S_ISDIR(directory_info.st_mode), flag, ": cannot write '", path, "': '", directory,
           "' is ", kind_of(directory_info.st_mode), ", not a directory");
  if (exists) check_sticky_replace(path, info, directory_info, flag);
  // Can a file be created there? Try it, with a name a later save sweeps if we die right here.
  std::string probe = temporary_pattern(target);
  const int fd = ::mkostemp(probe.data(), O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    fail(flag, ": cannot write '", path, "': cannot create a file in '", directory, "': ",
         error_text(error));
  }
  ::unlink(probe.c_str());
  ::close(fd);
}

// ---- Logs ---------------------------------------------------------------------------------------

LogFile::LogFile(const std::string& path, const std::string& what, uint64_t keep_bytes)
    : path_(path), what_(what) {
  check_file_name(path, what);
  constexpr const char* kExpected = "a regular file, a character device or a pipe";
  const auto loggable = [](mode_t mode) { return S_ISREG(mode) || S_ISCHR(mode) || S_ISFIFO(mode); };
  struct stat info {};
  if (::stat(path.c_str(), &info) == 0 && !loggable(info.st_mode)) {
    fail_not_regular(what, path, info.st_mode, kExpected);
  }
  // O_NONBLOCK: a FIFO without a reader fails to open (ENXIO) instead of waiting for one.
  // (Not O_TRUNC: a regular file is cut to `keep_bytes` below, a stream is left as it is.)
  Descriptor fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int error = errno;
    fail(what, ": cannot open '", path, "' for writing: ", error_text(error));
  }
  if (::fstat(fd.get(), &info) != 0) {
    const int error = errno;
    fail(what, ": cannot stat '", path, "': ", error_text(error));
  }
  if (!loggable(info.st_mode)) {
    fail_not_regular(what, path, info.st_mode, kExpected);
  }
  if (S_ISREG(info.st_mode)) {
    // Never past the end: ftruncate would add zeros there.
    const off_t keep = static_cast<off_t>(std::min<uint64_t>(keep_bytes, info.st_size));
    if (::ftruncate(fd.get(), keep) != 0 || ::lseek(fd.get(), keep, SEEK_SET) < 0) {
      const int error = errno;
      fail(what, ": cannot truncate '", path, "': ", error_text(error));
    }
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int error = errno;
    fail(what, ": cannot make '", path, "' blocking again: ", error_text(error));
  }
  fd_ = fd.release();
}

LogFile::~LogFile() {
  if (fd_ >= 0) ::close(fd_);
}

void LogFile::write_line(std::string_view line) {
  TG_CHECK(fd_ >= 0, what_, ": '", path_, "' is already closed");
  std::string text;
  text.reserve(line.size() + 1);
  text.append(line);
  text.push_back('\n');
  write_all(fd_, text.data(), text.size(), what_, path_);
}

void LogFile::close() {
  if (fd_ < 0) return;
  // POSIX leaves the descriptor unspecified after a failed close (Linux always frees it): never
  // close it twice.
  if (::close(std::exchange(fd_, -1)) != 0) {
    const int error = errno;
    fail(what_, ": closing '", path_, "' failed: ", error_text(error));
  }
}

// ---- Comparing paths ----------------------------------------------------------------------------

bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code error;
  if (fs::exists(a, error) && fs::exists(b, error)) {
    const bool same = fs::equivalent(a, b, error);
    if (!error) return same;
  }
  // At least one does not exist (yet): compare where each would be, links followed.
  auto where = [](const std::string& path) {
    std::string followed;
    try {
      followed = follow_symlinks(path, "same_file");
    } catch (const Error&) {
      followed = path;  // a loop of links: compare the paths as given
    }
    std::error_code ignored;
    fs::path canonical = fs::weakly_canonical(followed, ignored);
    return ignored ? fs::absolute(followed, ignored).lexically_normal() : canonical;
  };
  return where(a) == where(b);
}

namespace {

// True when `path` exists and is a stream (a character device or a FIFO), not a regular file.
bool is_stream(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && (S_ISCHR(info.st_mode) || S_ISFIFO(info.st_mode));
}

}  // namespace

void check_distinct_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& output = outputs[i];
    if (output.path.empty()) continue;
    for (const NamedPath& input : inputs) {
      TG_CHECK(!same_file(output.path, input.path), output.flag, ": '", output.path, "' is the ",
               input.flag, " file '", input.path, "': an output may not replace an input");
    }
    for (size_t j = 0; j < i; ++j) {
      const NamedPath& earlier = outputs[j];
      if (!same_file(output.path, earlier.path) || is_stream(output.path)) continue;
      fail(output.flag, ": '", output.path, "' is also the ", earlier.flag, " file '", earlier.path,
           "': two outputs cannot share a file");
    }
  }
}

}  // namespace tg
