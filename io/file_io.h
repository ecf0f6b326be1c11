#pragma once
// Safe file input and output: the one place where tapegrad opens the files a user names on the
// command line (--data, --load, --save, --log, plot --log and --out). Each failure throws one
// tg::Error that starts with `what` (the operation or the flag) and names the path and the reason,
// and, when a system call failed, the strerror of that very call:
//
//   --log: 'runs/fifo' is a FIFO, not a regular file
//   load_safetensors: cannot open 'model.st': No such file or directory
//   --save: 'out/' is a directory, not a regular file
//
// Inputs (read_regular_file, InputFile) must be regular files. They are opened with O_NONBLOCK,
// so that a FIFO never blocks open() waiting for a writer, and refused unless fstat shows a regular
// file (the message names what the path is instead: a directory, a FIFO, a socket, a character
// device, a block device); only then is O_NONBLOCK cleared. A stat() before open() also keeps
// devices from being opened at all (opening some devices has side effects).
//
// Outputs that replace a file (AtomicFile, write_file_atomically) go to a temporary file next to
// the target, named .tapegrad-<hash of the target's name>.tmp-XXXXXX, which is written, fsync'ed
// and renamed over the target: a failed or interrupted save leaves the old file byte-identical.
// Rules:
// - Only a regular file, or a name that does not exist yet, is replaced. A directory, FIFO,
//   socket or device at the path is refused before anything is written (rename() would otherwise
//   silently put a regular file in place of a device node or a FIFO).
// - Only a file this process could open for writing is replaced: a read-only checkpoint stays, as
//   with a shell's `>` (rename() alone needs only the directory's permission).
// - Symbolic links are followed, like a shell's `>` redirect: the file the link leads to is
//   replaced atomically (the temporary is created in that file's directory, so the rename never
//   crosses file systems) and the link stays a link. A dangling link creates its target; a link
//   to anything but a regular file is refused.
// - The writer holds flock(LOCK_EX) on its temporary while it writes. A new save of X first
//   removes every regular file in X's directory named as a temporary of X (the hash marks it),
//   owned by this user, that it can lock with LOCK_EX|LOCK_NB: those are orphans of a process that
//   died mid-save. A temporary whose lock is held (a concurrent save of the same X) is left alone. On a file
//   system without flock nothing is removed.
// - Between the last type check and the rename there is a window in which someone could put a
//   FIFO at the path; the check is repeated right before rename() to keep it as small as possible.
//
// Logs (LogFile) are streams, not atomic replacements: the file is opened (and truncated, or cut
// back to the rows a resumed run keeps) in place, a line at a time is written straight to it with write(2) (nothing is buffered in the
// process, so a crash loses at most the line being written), and every write and the close are
// checked. A log may also be a character device (/dev/stdout on a terminal, /dev/null) or a pipe
// (/dev/stdout into `| tee`): a FIFO with no reader is an error at once (ENXIO), never a wait, and
// a reader that goes away is an error at the next write (EPIPE: the command line ignores SIGPIPE).
// It may not be a directory or a socket.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

// ---- Reading --------------------------------------------------------------------------------------

// The whole contents of the regular file `path`.
std::string read_regular_file(const std::string& path, const std::string& what);

// A regular file opened for reading at any offset (pread), for formats with an index (safetensors).
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // The size when it was opened.
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Exactly `nbytes` bytes from `offset`, or tg::Error (the file may shrink while it is read).
  void read_at(uint64_t offset, void* destination, uint64_t nbytes) const;

 private:
  std::string path_, what_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// ---- Replacing a file atomically ----------------------------------------------------------------

// A save in progress: write() any number of times, then commit() to put the data in place. Without
// commit() (an exception on the way), the destructor removes the temporary and the target stays
// as it was.
class AtomicFile {
 public:
  // Checks the target, removes orphaned temporaries of it and creates a locked temporary (0644,
  // or the mode of the file it replaces).
  AtomicFile(const std::string& path, const std::string& what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t nbytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync, close, check the target again, rename over it, then fsync the directory (best effort).
  void commit();

  // The file that will be replaced: `path` with its symbolic links followed.
  const std::string& target() const { return target_; }
  const std::string& temporary_path() const { return temporary_; }

 private:
  std::string path_, what_, target_, temporary_;
  int fd_ = -1;
  bool committed_ = false;
};

// The name every temporary of a target named `target_name` (no directory) starts with:
// ".tapegrad-" + a 16-hex-digit hash of the name + ".tmp-"; 6 letters or digits follow. Only files
// named so (and owned by this user, and not locked) are swept as orphans.
std::string temporary_name_prefix(const std::string& target_name);

// An AtomicFile holding `bytes`.
void write_file_atomically(const std::string& path, std::string_view bytes, const std::string& what);

// The pre-flight check for an output a command will write when it is done (--save, --out): call
// it before the long work. Refuses an empty path, a path ending in '/', a path that is (or whose
// symbolic links lead to) anything but a regular file, and a directory that does not exist or in
// which no file can be created (tested by creating and removing a temporary there). `flag` starts
// the message: "--save: 'out/' is a directory, not a regular file". Also refused, since the final
// rename would fail after all the work: a name longer than its directory allows (pathconf's
// NAME_MAX) or a path longer than PATH_MAX, and a file the rename may not replace (a sticky
// directory such as /tmp, and the file another user's). For a log, opening the LogFile before the
// long work is the check.
void check_output_path(const std::string& path, const std::string& flag);

// ---- Logs ---------------------------------------------------------------------------------------

// A log written line by line (see the top of this file).
class LogFile {
 public:
  // Opens `path` for writing, creating it if needed. A regular file is cut to its first
  // `keep_bytes` bytes (0: emptied) and written after them: a resumed run's log keeps the rows up
  // to its checkpoint's step. A stream is written as it is.
  LogFile(const std::string& path, const std::string& what, uint64_t keep_bytes = 0);
  // Closes the file if close() was not called; errors are not reported here (call close()).
  ~LogFile();
  LogFile(const LogFile&) = delete;
  LogFile& operator=(const LogFile&) = delete;

  // Writes `line` and a '\n' (partial writes and EINTR are retried).
  void write_line(std::string_view line);
  // Closes the file, reporting a failure (a network file system may report a lost write only here).
  void close();

  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  std::string path_, what_;
  int fd_ = -1;
};

// ---- Comparing paths ----------------------------------------------------------------------------

// True when `a` and `b` name the same file: std::filesystem::equivalent when both exist (hard and
// symbolic links included); otherwise their weakly_canonical forms, after following symbolic links
// (so a dangling link and the file it would create compare equal). Used to refuse an output path
// that is also an input ("--save data.csv --data data.csv").
bool same_file(const std::string& a, const std::string& b);

// One file a command names: the flag (or "font") and the path.
struct NamedPath {
  std::string flag, path;
};

// The one rule for the files of a command, which calls it with all of them before it reads or
// writes any: an output may be neither an input ("--log ck.st --resume ck.st") nor another output
// ("--log F --grad-stats F"), under any name (same_file: symbolic and hard links count). Empty
// paths are skipped. Two outputs may share only a stream that is not a regular file: two logs to
// /dev/stdout or /dev/null write whole lines. tg::Error names both flags and the path.
void check_distinct_files(const std::vector<NamedPath>& inputs, const std::vector<NamedPath>& outputs);

}  // namespace tg
