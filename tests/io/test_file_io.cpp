// io/file_io: inputs that are not regular files are refused without blocking, atomic writes that
// refuse to replace anything but a regular file, follow symbolic links and sweep orphaned
// temporaries, the pre-flight output check, logs whose every write is checked, and same_file.
// Each case works in a fresh temporary directory; the only thing touched under /dev is /dev/full
// (opened for writing, to make a write fail with ENOSPC) and /dev/null.
#include <catch2/catch.hpp>

#include "tests/support/file_size_limit.h"
#include "tests/support/temp_files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/file_io.h"

namespace fs = std::filesystem;
using Catch::Contains;
using tg::testing::FileSizeLimit;
using tg::testing::TempDir;
using tg::testing::read_bytes;
using tg::testing::write_bytes;

namespace {

std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string make_fifo(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
  return path;
}

// A Unix socket bound at dir/name; it stays a socket node after the descriptor is closed.
std::string make_socket(const TempDir& dir, const std::string& name) {
  const std::string path = dir.file(name);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  REQUIRE(path.size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  const int bound = ::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address);
  ::close(fd);
  REQUIRE(bound == 0);
  return path;
}

// The message of the tg::Error `call` throws ("" when it returns).
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const tg::Error& error) {
    return error.what();
  }
  return "";
}

// Runs `call` on a thread and reports whether it returned within a few seconds. A call stuck in
// open() on the FIFO is released by opening the FIFO at both ends (O_RDWR never blocks on Linux),
// so that a regression fails this check instead of hanging the test run.
bool returns_promptly(const std::function<void()>& call, const std::string& fifo) {
  std::promise<void> finished;
  std::future<void> done = finished.get_future();
  std::thread worker([&] {
    call();
    finished.set_value();
  });
  const bool prompt = done.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!prompt) {
    const int fd = ::open(fifo.c_str(), O_RDWR | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  }
  worker.join();
  return prompt;
}


}  // namespace

// ---- Reading ------------------------------------------------------------------------------------

TEST_CASE("read_regular_file returns every byte of a regular file", "[file_io]") {
  TempDir dir;
  std::string bytes = "line 1\nline 2\r\n";
  bytes += std::string("\0\xff\x01", 3);
  bytes += std::string(200000, 'x');  // more than one read() buffer
  write_bytes(dir.file("data.bin"), bytes);
  CHECK(tg::read_regular_file(dir.file("data.bin"), "--data") == bytes);
  write_bytes(dir.file("empty"), "");
  CHECK(tg::read_regular_file(dir.file("empty"), "--data").empty());
}

TEST_CASE("read_regular_file names the flag, the path and the reason", "[file_io]") {
  TempDir dir;
  const std::string missing = error_of([&] { tg::read_regular_file(dir.file("gone.csv"), "--data"); });
  CHECK_THAT(missing, Contains("--data") && Contains("cannot open") && Contains("gone.csv") &&
                          Contains("No such file or directory"));
  const std::string directory = error_of([&] { tg::read_regular_file(dir.path.string(), "--data"); });
  CHECK_THAT(directory, Contains("--data: '" + dir.path.string() + "' is a directory, not a regular file"));
  const std::string socket = make_socket(dir, "sock");
  CHECK_THAT(error_of([&] { tg::read_regular_file(socket, "--data"); }),
             Contains("'" + socket + "' is a socket, not a regular file"));
  CHECK_THAT(error_of([&] { tg::read_regular_file("/dev/null", "--data"); }),
             Contains("'/dev/null' is a character device, not a regular file"));
  fs::create_symlink(dir.path, dir.file("link"));
  CHECK_THAT(error_of([&] { tg::read_regular_file(dir.file("link"), "--data"); }),
             Contains("is a symbolic link to a directory, not a regular file"));
}

TEST_CASE("a FIFO as input is refused at once, not waited on", "[file_io]") {
  TempDir dir;
  const std::string fifo = make_fifo(dir, "pipe.csv");
  std::string message;
  SECTION("read_regular_file") {
    CHECK(returns_promptly([&] { message = error_of([&] { tg::read_regular_file(fifo, "--data"); }); }, fifo));
  }
  SECTION("InputFile") {
    CHECK(returns_promptly([&] { message = error_of([&] { tg::InputFile file(fifo, "--load"); }); }, fifo));
  }
  CHECK_THAT(message, Contains("'" + fifo + "' is a FIFO, not a regular file"));
  CHECK(fs::is_fifo(fifo));
}

TEST_CASE("InputFile reads at any offset and reports a file that ends early", "[file_io]") {
  TempDir dir;
  write_bytes(dir.file("f.bin"), "0123456789");
  const tg::InputFile file(dir.file("f.bin"), "load_safetensors");
  CHECK(file.size() == 10);
  char middle[4] = {};
  file.read_at(3, middle, 4);
  CHECK(std::string(middle, 4) == "3456");
  char past[4] = {};
  CHECK_THROWS_WITH(file.read_at(8, past, 4), Contains("load_safetensors") && Contains("ended early"));
  CHECK_THROWS_WITH(tg::InputFile(dir.path.string(), "load_safetensors"), Contains("is a directory"));
  CHECK_THROWS_WITH(tg::InputFile(dir.file("none"), "load_safetensors"),
                    Contains("cannot open") && Contains("No such file or directory"));
}

// ---- Atomic writes ------------------------------------------------------------------------------

TEST_CASE("write_file_atomically creates and replaces a regular file, leaving no temporary", "[file_io]") {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  tg::write_file_atomically(path, "first", "save");
  CHECK(read_bytes(path) == "first");
  CHECK(fs::status(path).permissions() ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read));
  fs::permissions(path, fs::perms::owner_read | fs::perms::owner_write);  // 0600: kept on replace
  tg::write_file_atomically(path, "second, longer", "save");
  CHECK(read_bytes(path) == "second, longer");
  CHECK(fs::status(path).permissions() == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(names_in(dir.path) == std::vector<std::string>{"out.bin"});
}

TEST_CASE("an atomic write refuses to replace a FIFO, a socket or a directory", "[file_io]") {
  TempDir dir;
  SECTION("a FIFO") {
    const std::string fifo = make_fifo(dir, "node");
    CHECK_THAT(error_of([&] { tg::write_file_atomically(fifo, "data", "--save"); }),
               Contains("--save: '" + fifo + "' is a FIFO, not a regular file"));
    CHECK(fs::is_fifo(fifo));
  }
  SECTION("a socket") {
    const std::string socket = make_socket(dir, "node");
    CHECK_THAT(error_of([&] { tg::write_file_atomically(socket, "data", "--save"); }),
               Contains("is a socket, not a regular file"));
    CHECK(fs::is_socket(socket));
  }
  SECTION("a directory") {
    fs::create_directory(dir.file("node"));
    write_bytes(dir.file("node/keep"), "untouched");
    CHECK_THAT(error_of([&] { tg::write_file_atomically(dir.file("node"), "data", "--save"); }),
               Contains("is a directory, not a regular file"));
    CHECK(read_bytes(dir.file("node/keep")) == "untouched");
  }
  SECTION("a path ending in '/'") {
    CHECK_THAT(error_of([&] { tg::write_file_atomically(dir.file("node") + "/", "data", "--save"); }),
               Contains("ends in '/'"));
    CHECK_FALSE(fs::exists(dir.file("node")));
    fs::create_directory(dir.file("node"));
  }
  CHECK(names_in(dir.path) == std::vector<std::string>{"node"});  // no temporary behind
}

TEST_CASE("an atomic write through a symbolic link replaces the file it leads to", "[file_io]") {
  TempDir dir;
  fs::create_directory(dir.file("sub"));
  SECTION("a link to an existing file in another directory") {
    write_bytes(dir.file("sub/real.bin"), "old contents");
    fs::create_symlink("sub/real.bin", dir.file("link"));
    tg::write_file_atomically(dir.file("link"), "new", "--save");
    CHECK(read_bytes(dir.file("sub/real.bin")) == "new");
    CHECK(fs::is_symlink(dir.file("link")));
    CHECK(fs::read_symlink(dir.file("link")) == "sub/real.bin");
    CHECK(names_in(dir.file("sub")) == std::vector<std::string>{"real.bin"});
  }
  SECTION("a chain of two links") {
    write_bytes(dir.file("sub/real.bin"), "old contents");
    fs::create_symlink("real.bin", dir.file("sub/inner"));
    fs::create_symlink(dir.file("sub/inner"), dir.file("link"));  // absolute
    tg::write_file_atomically(dir.file("link"), "new", "--save");
    CHECK(read_bytes(dir.file("sub/real.bin")) == "new");
    CHECK(fs::is_symlink(dir.file("link")));
    CHECK(fs::is_symlink(dir.file("sub/inner")));
  }
  SECTION("a dangling link creates its target") {
    fs::create_symlink("sub/new.bin", dir.file("link"));
    tg::write_file_atomically(dir.file("link"), "created", "--save");
    CHECK(read_bytes(dir.file("sub/new.bin")) == "created");
    CHECK(fs::is_symlink(dir.file("link")));
    CHECK(names_in(dir.file("sub")) == std::vector<std::string>{"new.bin"});
  }
  SECTION("a link to a FIFO is refused") {
    const std::string fifo = make_fifo(dir, "sub/fifo");
    fs::create_symlink(fifo, dir.file("link"));
    CHECK_THAT(error_of([&] { tg::write_file_atomically(dir.file("link"), "data", "--save"); }),
               Contains("is a symbolic link to a FIFO, not a regular file"));
    CHECK(fs::is_fifo(fifo));
    CHECK(fs::is_symlink(dir.file("link")));
  }
  SECTION("a loop of links is refused") {
    fs::create_symlink("b", dir.file("a"));
    fs::create_symlink("a", dir.file("b"));
    CHECK_THAT(error_of([&] { tg::write_file_atomically(dir.file("a"), "data", "--save"); }),
               Contains("Too many levels of symbolic links"));
  }
}

TEST_CASE("a failed or abandoned atomic write leaves the old file byte-identical", "[file_io]") {
  TempDir dir;
  const std::string path = dir.file("model.bin");
  const std::string old_bytes = std::string("old\0bytes", 9);
  write_bytes(path, old_bytes);
  SECTION("a write fails (a file-size limit of 4 bytes: one partial write, then EFBIG)") {
    std::string message;
    {
      const FileSizeLimit limit(4);
      message = error_of([&] { tg::write_file_atomically(path, std::string(100, 'n'), "--save"); });
    }
    CHECK_THAT(message, Contains("--save: writing '" + path + "' failed: File too large"));
  }
  SECTION("abandoned before commit (an exception on the way)") {
    tg::AtomicFile file(path, "--save");
    file.write("half of the new");
    CHECK(file.temporary_path().rfind(dir.file(tg::temporary_name_prefix("model.bin")), 0) == 0);
    CHECK(fs::exists(file.temporary_path()));
  }
  CHECK(read_bytes(path) == old_bytes);
  CHECK(names_in(dir.path) == std::vector<std::string>{"model.bin"});
}

TEST_CASE("a temporary's name marks it: .tapegrad-, a hash of the target's name, .tmp-, 6 more",
          "[file_io]") {
  const std::string prefix = tg::temporary_name_prefix("model.bin");
  REQUIRE(prefix.size() == std::string(".tapegrad-").size() + 16 + std::string(".tmp-").size());
  CHECK(prefix.rfind(".tapegrad-", 0) == 0);
  CHECK(prefix.substr(26) == ".tmp-");
  CHECK(prefix.substr(10, 16).find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(tg::temporary_name_prefix("model.bin") == prefix);  // a function of the name
  CHECK(tg::temporary_name_prefix("model.bim") != prefix);
  TempDir dir;
  tg::AtomicFile file(dir.file("model.bin"), "--save");
  const std::string name = fs::path(file.temporary_path()).filename().string();
  CHECK(name.rfind(prefix, 0) == 0);
  CHECK(name.size() == prefix.size() + 6);
}

TEST_CASE("a save holds a lock on its temporary and sweeps unlocked orphans of the same file", "[file_io]") {
  TempDir dir;
  const std::string path = dir.file("model.bin");
  const std::string ours = tg::temporary_name_prefix("model.bin");
  write_bytes(dir.file(ours + "abcdef"), "orphan of a killed save");
  write_bytes(dir.file(ours + "X1y2Z3"), "orphan too");
  write_bytes(dir.file(ours + "LOCKED"), "a save in progress");
  // Not temporaries of model.bin: kept. A user's file named like "model.bin.tmp-notes1" is one.
  write_bytes(dir.file("model.bin.tmp-notes1"), "a user's notes");
  write_bytes(dir.file(ours + "abcdefg"), "7 letters");
  write_bytes(dir.file(ours + "abc"), "3 letters");
  write_bytes(dir.file(ours + "ab.def"), "not a letter");
  const std::string others = tg::temporary_name_prefix("other.bin");
  write_bytes(dir.file(others + "abcdef"), "another file's");
  make_fifo(dir, ours + "fifo00");  // not a regular file

  const int held = ::open(dir.file(ours + "LOCKED").c_str(), O_RDONLY);
  REQUIRE(held >= 0);
  REQUIRE(::flock(held, LOCK_EX) == 0);
  {
    tg::AtomicFile file(path, "--save");
    // Our own temporary is locked while we write: nobody else can take it.
    const int probe = ::open(file.temporary_path().c_str(), O_RDONLY);
    REQUIRE(probe >= 0);
    const int locked = ::flock(probe, LOCK_EX | LOCK_NB);
    const int error = errno;
    CHECK(locked != 0);
    CHECK(error == EWOULDBLOCK);
    ::close(probe);
    file.write("new");
    file.commit();
  }
  ::close(held);
  CHECK(read_bytes(path) == "new");
  std::vector<std::string> kept = {"model.bin",        "model.bin.tmp-notes1", ours + "LOCKED",
                                   ours + "ab.def",    ours + "abc",           ours + "abcdefg",
                                   ours + "fifo00",    others + "abcdef"};
  std::sort(kept.begin(), kept.end());
  CHECK(names_in(dir.path) == kept);
  // Once its lock is gone, the next save takes it too.
  tg::write_file_atomically(path, "newer", "--save");
  CHECK_FALSE(fs::exists(dir.file(ours + "LOCKED")));
  CHECK(read_bytes(dir.file("model.bin.tmp-notes1")) == "a user's notes");
}

TEST_CASE("a file name of 255 bytes, the most a directory entry holds, can be saved", "[file_io]") {
  TempDir dir;
  const std::string path = dir.file(std::string(255, 'c'));
  tg::write_file_atomically(path, "long", "--save");
  CHECK(read_bytes(path) == "long");
  CHECK_NOTHROW(tg::check_output_path(path, "--save"));
}

namespace {

// Runs `call` as a user who does not own the test's files: as root, in a child process that
// drops to `nobody` (root may write any file), else in this process. True when it threw.
bool throws_as_another_user(const std::function<void()>& call) {
  if (::geteuid() != 0) return !error_of(call).empty();
  const pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    ::_exit(error_of(call).empty() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) != 3);
  return WEXITSTATUS(status) == 1;
}

}  // namespace

TEST_CASE("a read-only file is not replaced by a user who can write its directory", "[file_io]") {
  TempDir dir;
  fs::permissions(dir.path, fs::perms::all);  // anyone may create and rename here
  const std::string path = dir.file("ck.st");
  write_bytes(path, "trained");
  fs::permissions(path, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  CHECK(throws_as_another_user([&] { tg::write_file_atomically(path, "replaced", "--save"); }));
  CHECK(throws_as_another_user([&] { tg::check_output_path(path, "--save"); }));
  CHECK(read_bytes(path) == "trained");
  // A file the user may write is replaced as before.
  fs::permissions(path, fs::perms::all);
  CHECK_FALSE(throws_as_another_user([&] { tg::write_file_atomically(path, "new", "--save"); }));
  CHECK(read_bytes(path) == "new");
}

// ---- The pre-flight check -----------------------------------------------------------------------

TEST_CASE("check_output_path accepts a new or regular file and leaves nothing behind", "[file_io]") {
  TempDir dir;
  write_bytes(dir.file("old.st"), "x");
  fs::create_symlink("old.st", dir.file("link"));
  fs::create_symlink("new-target.st", dir.file("dangling"));
  CHECK_NOTHROW(tg::check_output_path(dir.file("new.st"), "--save"));
  CHECK_NOTHROW(tg::check_output_path(dir.file("old.st"), "--save"));
  CHECK_NOTHROW(tg::check_output_path(dir.file("link"), "--save"));
  CHECK_NOTHROW(tg::check_output_path(dir.file("dangling"), "--save"));
  CHECK(names_in(dir.path) == std::vector<std::string>{"dangling", "link", "old.st"});
  CHECK(read_bytes(dir.file("old.st")) == "x");
}

TEST_CASE("check_output_path refuses what a save could not replace", "[file_io]") {
  TempDir dir;
  fs::create_directory(dir.file("out"));
  write_bytes(dir.file("file.txt"), "x");
  auto refusal = [](const std::string& path) { return error_of([&] { tg::check_output_path(path, "--save"); }); };
  CHECK_THAT(refusal(""), Contains("--save: the path is empty"));
  CHECK_THAT(refusal(dir.file("out")), Contains("--save: '" + dir.file("out") + "' is a directory"));
  CHECK_THAT(refusal(dir.file("out") + "/"), Contains("'" + dir.file("out") + "/' is a directory"));
  CHECK_THAT(refusal(dir.file("newdir/")), Contains("ends in '/'"));
  CHECK_THAT(refusal(make_fifo(dir, "fifo")), Contains("is a FIFO, not a regular file"));
  CHECK_THAT(refusal(make_socket(dir, "sock")), Contains("is a socket, not a regular file"));
  fs::create_symlink("out", dir.file("to-dir"));
  CHECK_THAT(refusal(dir.file("to-dir")), Contains("is a symbolic link to a directory"));
  CHECK_THAT(refusal(dir.file("no/such/dir/model.st")),
             Contains("no/such/dir/model.st") && Contains("directory '" + dir.file("no/such/dir") + "' does not exist"));
  CHECK_THAT(refusal(dir.file("file.txt/model.st")),
             Contains("'" + dir.file("file.txt") + "' is a regular file, not a directory"));
  if (::geteuid() != 0) {  // root may write anywhere
    fs::permissions(dir.file("out"), fs::perms::owner_write, fs::perm_options::remove);
    CHECK_THAT(refusal(dir.file("out/model.st")), Contains("cannot create a file in") && Contains("Permission denied"));
    fs::permissions(dir.file("out"), fs::perms::owner_write, fs::perm_options::add);
  }
  CHECK(names_in(dir.file("out")).empty());
}

// ---- Logs ---------------------------------------------------------------------------------------

TEST_CASE("LogFile writes line by line, truncating what was there", "[file_io]") {
  TempDir dir;
  const std::string path = dir.file("log.csv");
  write_bytes(path, "an older and much longer log that must disappear\n");
  tg::LogFile log(path, "--log");
  log.write_line("step,loss");
  CHECK(read_bytes(path) == "step,loss\n");  // on disk at once: nothing buffered in the process
  log.write_line("1,0.5");
  log.close();
  CHECK_FALSE(log.is_open());
  CHECK(read_bytes(path) == "step,loss\n1,0.5\n");
  CHECK_THROWS_WITH(log.write_line("2,0.4"), Contains("already closed"));

  tg::LogFile null("/dev/null", "--log");  // a character device is a valid log
  null.write_line("discarded");
  null.close();
}

TEST_CASE("LogFile on a full device fails at the first line with ENOSPC", "[file_io]") {
  tg::LogFile log("/dev/full", "--log");  // opened for writing only, never renamed over
  CHECK_THROWS_WITH(log.write_line("step,loss"),
                    Contains("--log: writing '/dev/full' failed: No space left on device"));
}

TEST_CASE("LogFile refuses directories, sockets and readerless FIFOs without blocking", "[file_io]") {
  TempDir dir;
  CHECK_THROWS_WITH(tg::LogFile(dir.path.string(), "--log"),
                    Contains("is a directory, not a regular file, a character device or a pipe"));
  CHECK_THROWS_WITH(tg::LogFile(make_socket(dir, "sock"), "--log"), Contains("is a socket"));
  const std::string fifo = make_fifo(dir, "fifo");
  std::string message;
  CHECK(returns_promptly([&] { message = error_of([&] { tg::LogFile log(fifo, "--log"); }); }, fifo));
  CHECK_THAT(message, Contains("--log: cannot open '" + fifo + "' for writing: No such device or address"));
  CHECK(fs::is_fifo(fifo));
  // With a reader, a pipe is a log like any other (`--log /dev/stdout | tee`).
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  REQUIRE(reader >= 0);
  {
    tg::LogFile log(fifo, "--log");
    log.write_line("step,loss");
    log.close();
  }
  char received[16] = {};
  CHECK(::read(reader, received, sizeof received) == 10);
  CHECK(std::string(received) == "step,loss\n");
  ::close(reader);
  CHECK_THROWS_WITH(tg::LogFile(dir.file("none/log.csv"), "--log"),
                    Contains("cannot open") && Contains("No such file or directory"));
}

// ---- same_file ----------------------------------------------------------------------------------

TEST_CASE("same_file sees through relative paths, symbolic and hard links", "[file_io]") {
  TempDir dir;
  const std::string data = dir.file("data.csv");
  write_bytes(data, "a\n1\n");
  write_bytes(dir.file("other.csv"), "a\n1\n");
  const std::string relative = fs::relative(data, fs::current_path()).string();
  REQUIRE(fs::path(relative).is_relative());
  CHECK(tg::same_file(relative, data));
  CHECK(tg::same_file(dir.path.string() + "/./data.csv", data));
  fs::create_symlink("data.csv", dir.file("link.csv"));
  CHECK(tg::same_file(dir.file("link.csv"), data));
  fs::create_hard_link(data, dir.file("hard.csv"));
  CHECK(tg::same_file(dir.file("hard.csv"), data));
  CHECK_FALSE(tg::same_file(dir.file("other.csv"), data));  // equal contents, another file

  // Files that do not exist yet: where they would be.
  CHECK(tg::same_file(dir.file("sub/../new.st"), dir.file("new.st")));
  CHECK_FALSE(tg::same_file(dir.file("new.st"), dir.file("newer.st")));
  CHECK_FALSE(tg::same_file(dir.file("new.st"), data));
  fs::create_symlink("will-exist.st", dir.file("dangling"));
  CHECK(tg::same_file(dir.file("dangling"), dir.file("will-exist.st")));
  CHECK_FALSE(tg::same_file("", data));
}

TEST_CASE("check_distinct_files refuses an output that is an input or another output", "[file_io]") {
  TempDir dir;
  write_bytes(dir.file("ck.st"), "trained");
  fs::create_hard_link(dir.file("ck.st"), dir.file("hard.st"));
  fs::create_symlink("ck.st", dir.file("soft.st"));
  const std::vector<tg::NamedPath> inputs = {{"--data", dir.file("data.csv")},
                                             {"--resume", dir.file("ck.st")}};
  for (const std::string& alias : {"ck.st", "hard.st", "soft.st"}) {
    CHECK_THAT(error_of([&] { tg::check_distinct_files(inputs, {{"--log", dir.file(alias)}}); }),
               Contains("--log: '" + dir.file(alias) + "' is the --resume file") &&
                   Contains("an output may not replace an input"));
  }
  // Two outputs with one path, even one that does not exist yet.
  CHECK_THAT(error_of([&] {
               tg::check_distinct_files(inputs, {{"--save", dir.file("new.st")},
                                                 {"--log", dir.file("log.csv")},
                                                 {"--grad-stats", dir.file("./log.csv")}});
             }),
             Contains("--grad-stats: '" + dir.file("./log.csv") + "' is also the --log file") &&
                 Contains("two outputs cannot share a file"));
  // Distinct files, empty (not given) paths, and two logs to one stream are fine.
  CHECK_NOTHROW(tg::check_distinct_files(inputs, {{"--save", dir.file("new.st")},
                                                  {"--save-init", ""},
                                                  {"--log", "/dev/null"},
                                                  {"--grad-stats", "/dev/null"}}));
  CHECK(read_bytes(dir.file("ck.st")) == "trained");
}

