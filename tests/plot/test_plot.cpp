// `tapegrad plot`: runs the real binary into a temporary directory and reads back what it wrote:
// the PNG signature and IHDR, the decoded pixels (stb_image, from the same libstb), one line on
// stderr and exit code 2 for every kind of bad input, and atomic writes.
#include <catch2/catch.hpp>

#include "tapegrad/plot/png.h"
#include "tests/support/temp_files.h"

#include <poll.h>
#include <signal.h>
#include <stb/stb_image.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

using tg::testing::TempDir;
using tg::testing::read_bytes;
using tg::testing::write_bytes;

std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

struct Run {
  int code = -1;
  std::string out, err;
};

// How the child is started: extra environment, and a file-size limit of 0 (every write to a
// regular file fails with EFBIG: tapegrad ignores SIGXFSZ) to make a save fail even when run as
// root.
struct Launch {
  std::map<std::string, std::string> env;
  bool no_file_writes = false;
  unsigned alarm_seconds = 0;  // > 0: SIGALRM kills a child that hangs (exit code -1), not the test
};

// Runs `tapegrad <args>` and collects its exit code, stdout and stderr.
Run tapegrad(const std::vector<std::string>& args, const Launch& launch = {}) {
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    if (!launch.env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : launch.env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (std::string& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {const_cast<char*>(TAPEGRAD_BIN), const_cast<char*>("plot")};
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);

  int out_pipe[2], err_pipe[2];
  REQUIRE(::pipe(out_pipe) == 0);
  REQUIRE(::pipe(err_pipe) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(out_pipe[1], 1);
    ::dup2(err_pipe[1], 2);
    ::close(out_pipe[0]), ::close(out_pipe[1]), ::close(err_pipe[0]), ::close(err_pipe[1]);
    if (launch.no_file_writes) {
      const rlimit limit{0, 0};
      ::setrlimit(RLIMIT_FSIZE, &limit);
    }
    if (launch.alarm_seconds > 0) ::alarm(launch.alarm_seconds);  // survives execve
    ::execve(TAPEGRAD_BIN, argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  Run run;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&run.out, &run.err};
  int open_pipes = 2;
  while (open_pipes > 0) {
    REQUIRE(::poll(fds, 2, -1) >= 0);
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[4096];
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n > 0) {
        sinks[i]->append(buffer, static_cast<size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_pipes;
      }
    }
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

uint32_t big_endian(const std::string& bytes, size_t at) {
  return (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) << 24) |
         (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 16) |
         (static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 8) |
         static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 3]));
}

// A PNG read back: the IHDR size, and the pixels as decoded by stb_image.
struct Png {
  uint32_t width = 0, height = 0;
  std::vector<unsigned char> rgb;
  bool has_pixel_near(int r, int g, int b, int tolerance = 6) const {
    for (size_t i = 0; i + 2 < rgb.size(); i += 3) {
      if (std::abs(rgb[i] - r) <= tolerance && std::abs(rgb[i + 1] - g) <= tolerance &&
          std::abs(rgb[i + 2] - b) <= tolerance) {
        return true;
      }
    }
    return false;
  }
};

Png read_png(const std::string& path) {
  const std::string bytes = read_bytes(path);
  REQUIRE(bytes.size() > 33);
  REQUIRE(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));  // the signature
  REQUIRE(big_endian(bytes, 8) == 13);                                  // IHDR comes first
  REQUIRE(bytes.substr(12, 4) == "IHDR");
  Png png;
  png.width = big_endian(bytes, 16);
  png.height = big_endian(bytes, 20);
  int w = 0, h = 0, channels = 0;
  unsigned char* pixels = stbi_load_from_memory(reinterpret_cast<const unsigned char*>(bytes.data()),
                                                static_cast<int>(bytes.size()), &w, &h, &channels, 3);
  REQUIRE(pixels != nullptr);
  CHECK(static_cast<uint32_t>(w) == png.width);
  CHECK(static_cast<uint32_t>(h) == png.height);
  png.rgb.assign(pixels, pixels + static_cast<size_t>(w) * h * 3);
  stbi_image_free(pixels);
  return png;
}

// A failure: exit code 2, exactly one line on stderr that mentions `needle`, nothing on stdout.
void require_one_line_error(const Run& run, const std::string& needle) {
  INFO("stderr: " << run.err);
  CHECK(run.code == 2);
  CHECK(run.out.empty());
  REQUIRE(!run.err.empty());
  CHECK(run.err.back() == '\n');
  CHECK(std::count(run.err.begin(), run.err.end(), '\n') == 1);
  CHECK(run.err.rfind("tapegrad plot: error: ", 0) == 0);
  CHECK(run.err.find(needle) != std::string::npos);
}

const char* kLog =
    "step,epoch,loss,lr,ms,val_loss,val_accuracy\n"
    "1,0,2.30,0.001,10.5,,\n"
    "2,0,2.10,0.001,10.1,,\n"
    "3,0,1.90,0.001,10.2,1.95,0.40\n"
    "4,0,1.60,0.001,10.0,,\n"
    "5,1,1.40,0.001,10.3,,\n"
    "6,1,1.25,0.001,10.1,1.35,0.55\n"
    "7,1,1.10,0.001,10.4,,\n"
    "8,1,1.00,0.001,10.2,,\n"
    "9,2,0.95,0.001,10.0,1.05,0.62\n";

constexpr int kViridisLow[3] = {68, 1, 84}, kViridisHigh[3] = {253, 231, 37};
constexpr int kBlue[3] = {31, 119, 180}, kOrange[3] = {255, 127, 14};  // series 1 and 2

}  // namespace

TEST_CASE("plot pe writes a PNG heatmap of the positional encoding", "[plot]") {
  TempDir dir;
  const std::string out = dir.file("pe.png");
  const Run run = tapegrad({"pe", "--dim", "64", "--len", "100", "--out", out});
  INFO("stderr: " << run.err);
  REQUIRE(run.code == 0);
  CHECK(run.err.empty());
  CHECK(run.out.find(out) != std::string::npos);
  const Png png = read_png(out);
  // Room for 100 rows and 64 columns of cells plus axes, and not absurdly large.
  CHECK(png.width >= 64 + 100);
  CHECK(png.height >= 100 + 100);
  CHECK(png.width <= 2000);
  CHECK(png.height <= 2000);
  // sin and cos reach -1 and 1: both ends of the colour map are drawn, and so is dark text.
  CHECK(png.has_pixel_near(kViridisLow[0], kViridisLow[1], kViridisLow[2]));
  CHECK(png.has_pixel_near(kViridisHigh[0], kViridisHigh[1], kViridisHigh[2]));
  CHECK(png.has_pixel_near(34, 34, 34, 10));
  CHECK(names_in(dir.path) == std::vector<std::string>{"pe.png"});  // no temporary left behind

  // Writing again replaces the file.
  REQUIRE(tapegrad({"pe", "--dim", "8", "--len", "12", "--out", out}).code == 0);
  CHECK(read_png(out).width > 0);
  CHECK(names_in(dir.path) == std::vector<std::string>{"pe.png"});
}

TEST_CASE("plot loss draws the training loss and, where present, the validation loss", "[plot]") {
  TempDir dir;
  SECTION("with val_loss cells") {
    write_bytes(dir.file("log.csv"), kLog);
    const Run run = tapegrad({"loss", "--log", dir.file("log.csv"), "--out", dir.file("loss.png")});
    INFO("stderr: " << run.err);
    REQUIRE(run.code == 0);
    const Png png = read_png(dir.file("loss.png"));
    CHECK(png.width >= 400);
    CHECK(png.height >= 300);
    CHECK(png.has_pixel_near(kBlue[0], kBlue[1], kBlue[2], 2));
    CHECK(png.has_pixel_near(kOrange[0], kOrange[1], kOrange[2], 2));
  }
  SECTION("the minimal header, CRLF line ends, no validation") {
    write_bytes(dir.file("log.csv"), "step,epoch,loss,lr,ms\r\n1,0,3.0,0.1,5\r\n2,0,2.5,0.1,5\r\n\r\n");
    const Run run = tapegrad({"loss", "--log", dir.file("log.csv"), "--out", dir.file("loss.png")});
    INFO("stderr: " << run.err);
    REQUIRE(run.code == 0);
    const Png png = read_png(dir.file("loss.png"));
    CHECK(png.has_pixel_near(kBlue[0], kBlue[1], kBlue[2], 2));
    CHECK_FALSE(png.has_pixel_near(kOrange[0], kOrange[1], kOrange[2], 2));
  }
  SECTION("a val_loss column that is never filled") {
    write_bytes(dir.file("log.csv"), "step,epoch,loss,lr,ms,val_loss\n1,0,3.0,0.1,5,\n");
    const Run run = tapegrad({"loss", "--log", dir.file("log.csv"), "--out", dir.file("loss.png")});
    INFO("stderr: " << run.err);
    REQUIRE(run.code == 0);
    CHECK(read_png(dir.file("loss.png")).has_pixel_near(kBlue[0], kBlue[1], kBlue[2], 2));
  }
}

TEST_CASE("plot --help and each kind's --help explain themselves with an example", "[plot]") {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--help"}, {"pe", "--help"}, {"loss", "--help"}}) {
    const Run run = tapegrad(args);
    CHECK(run.code == 0);
    CHECK(run.err.empty());
    CHECK(run.out.find("example") != std::string::npos);
    CHECK(run.out.find("tapegrad plot") != std::string::npos);
  }
}

TEST_CASE("plot rejects bad input with one line on stderr and exit code 2", "[plot]") {
  TempDir dir;
  const std::string out = dir.file("out.png");
  write_bytes(dir.file("good.csv"), kLog);
  auto loss_from = [&](const std::string& csv) {
    write_bytes(dir.file("bad.csv"), csv);
    return tapegrad({"loss", "--log", dir.file("bad.csv"), "--out", out});
  };

  SECTION("no kind of plot") { require_one_line_error(tapegrad({}), "pe"); }
  SECTION("an unknown kind of plot") { require_one_line_error(tapegrad({"pie"}), "unknown plot 'pie'"); }
  SECTION("--dim 0") {
    require_one_line_error(tapegrad({"pe", "--dim", "0", "--len", "10", "--out", out}), "--dim");
  }
  SECTION("a negative --dim") {
    require_one_line_error(tapegrad({"pe", "--dim=-4", "--len", "10", "--out", out}), "--dim");
  }
  SECTION("a --dim that is not a number") {
    require_one_line_error(tapegrad({"pe", "--dim", "wide", "--len", "10", "--out", out}), "dim");
  }
  SECTION("a --dim past the limit") {
    require_one_line_error(tapegrad({"pe", "--dim", "100000", "--len", "10", "--out", out}), "--dim");
  }
  SECTION("--len 0") {
    require_one_line_error(tapegrad({"pe", "--dim", "8", "--len", "0", "--out", out}), "--len");
  }
  SECTION("no --out") { require_one_line_error(tapegrad({"pe", "--dim", "8", "--len", "8"}), "out"); }
  SECTION("a log that does not exist") {
    require_one_line_error(tapegrad({"loss", "--log", dir.file("missing.csv"), "--out", out}),
                           "missing.csv");
  }
  SECTION("a log that is a directory") {
    require_one_line_error(tapegrad({"loss", "--log", dir.path.string(), "--out", out}), "directory");
  }
  SECTION("an empty log") { require_one_line_error(loss_from(""), "empty"); }
  SECTION("a header without step and loss") {
    require_one_line_error(loss_from("time,value\n1,2\n"), "step and loss");
  }
  SECTION("a header and no rows") { require_one_line_error(loss_from("step,epoch,loss,lr,ms\n"), "no rows"); }
  SECTION("a row with too few fields") {
    require_one_line_error(loss_from("step,epoch,loss,lr,ms\n1,0,2.0,0.1,5\n2,0,1.9\n"), "line 3");
  }
  SECTION("a loss that is not a number") {
    require_one_line_error(loss_from("step,epoch,loss,lr,ms\n1,0,low,0.1,5\n"), "'low'");
  }
  SECTION("an empty loss cell") {
    require_one_line_error(loss_from("step,epoch,loss,lr,ms\n1,0,,0.1,5\n"), "line 2");
  }
  SECTION("a val_loss that is not a number") {
    require_one_line_error(loss_from("step,epoch,loss,lr,ms,val_loss\n1,0,2.0,0.1,5,n/a\n"), "val_loss");
  }
  SECTION("--out in a directory that does not exist") {
    require_one_line_error(
        tapegrad({"loss", "--log", dir.file("good.csv"), "--out", dir.file("no/such/dir/loss.png")}),
        "no/such/dir/loss.png");
  }
  SECTION("a font that is not there") {
    Launch launch;
    launch.env["TAPEGRAD_FONT"] = dir.file("no-such-font.ttf");
    const Run run = tapegrad({"pe", "--dim", "8", "--len", "8", "--out", out}, launch);
    require_one_line_error(run, "no-such-font.ttf");
    CHECK(run.err.find("fonts-dejavu-core") != std::string::npos);
  }
  CHECK_FALSE(fs::exists(out));
}

TEST_CASE("a failed plot leaves an existing --out untouched and no temporary behind", "[plot]") {
  TempDir dir;
  const std::string out = dir.file("keep.png");
  REQUIRE(tapegrad({"pe", "--dim", "16", "--len", "16", "--out", out}).code == 0);
  const std::string before = read_bytes(out);
  write_bytes(dir.file("log.csv"), kLog);

  SECTION("every write to a file fails (file size limit 0)") {
    Launch launch;
    launch.no_file_writes = true;
    const Run run = tapegrad({"pe", "--dim", "32", "--len", "50", "--out", out}, launch);
    require_one_line_error(run, "keep.png");
  }
  SECTION("the directory is read-only") {
    if (::geteuid() == 0) {
      WARN("running as root: permissions do not stop writes, the file size limit case covers this");
    } else {
      fs::permissions(dir.path, fs::perms::owner_write, fs::perm_options::remove);
      const Run run = tapegrad({"pe", "--dim", "32", "--len", "50", "--out", out});
      fs::permissions(dir.path, fs::perms::owner_write, fs::perm_options::add);
      require_one_line_error(run, "keep.png");
    }
  }
  SECTION("the log is malformed") {
    write_bytes(dir.file("bad.csv"), "step,epoch,loss,lr,ms\n1,0,x,0.1,5\n");
    require_one_line_error(tapegrad({"loss", "--log", dir.file("bad.csv"), "--out", out}), "'x'");
    fs::remove(dir.file("bad.csv"));
  }
  CHECK(read_bytes(out) == before);
  CHECK(names_in(dir.path) == std::vector<std::string>{"keep.png", "log.csv"});
}

TEST_CASE("a plot onto a directory is refused and leaves no temporary", "[plot]") {
  TempDir dir;
  fs::create_directory(dir.file("occupied.png"));
  write_bytes(dir.file("occupied.png/keep"), "untouched");
  require_one_line_error(tapegrad({"pe", "--dim", "8", "--len", "8", "--out", dir.file("occupied.png")}),
                         "--out: '" + dir.file("occupied.png") + "' is a directory");
  CHECK(names_in(dir.path) == std::vector<std::string>{"occupied.png"});
  CHECK(read_bytes(dir.file("occupied.png/keep")) == "untouched");
}

TEST_CASE("plot refuses a FIFO as --out and as --log, without waiting on it", "[plot]") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  write_bytes(dir.file("log.csv"), kLog);
  Launch launch;
  launch.alarm_seconds = 30;  // a child blocked in open() dies instead of hanging the test
  SECTION("--out") {
    // rename() would silently put the PNG in the FIFO's place (exit code 0).
    require_one_line_error(tapegrad({"loss", "--log", dir.file("log.csv"), "--out", fifo}, launch),
                           "--out: '" + fifo + "' is a FIFO, not a regular file");
  }
  SECTION("--log") {
    require_one_line_error(tapegrad({"loss", "--log", fifo, "--out", dir.file("loss.png")}, launch),
                           "--log: '" + fifo + "' is a FIFO, not a regular file");
  }
  CHECK(fs::is_fifo(fifo));
  CHECK(names_in(dir.path) == std::vector<std::string>{"log.csv", "pipe"});
}

TEST_CASE("plot loss refuses an --out that is the --log itself", "[plot]") {
  TempDir dir;
  write_bytes(dir.file("log.csv"), kLog);
  fs::create_symlink("log.csv", dir.file("same.png"));
  require_one_line_error(tapegrad({"loss", "--log", dir.file("log.csv"), "--out", dir.file("same.png")}),
                         "is the --log file");
  CHECK(read_bytes(dir.file("log.csv")) == kLog);
}

namespace {

// How many pixels are within `tolerance` of a colour: a drawn series has hundreds, its legend
// swatch alone a few dozen.
size_t pixels_near(const Png& png, const int (&rgb)[3], int tolerance = 2) {
  size_t count = 0;
  for (size_t i = 0; i + 2 < png.rgb.size(); i += 3) {
    count += std::abs(png.rgb[i] - rgb[0]) <= tolerance && std::abs(png.rgb[i + 1] - rgb[1]) <= tolerance &&
             std::abs(png.rgb[i + 2] - rgb[2]) <= tolerance;
  }
  return count;
}

}  // namespace

TEST_CASE("plot loss draws losses of +-1e308: the axis span passes DBL_MAX", "[plot]") {
  TempDir dir;
  // Before: max - min = inf, every pixel coordinate NaN, a chart with only its legend, exit 0.
  for (const std::string& losses : {std::string("1,1e308\n2,-1e308\n3,0\n"),
                                    std::string("1,1.7976931348623157e308\n2,-1.7976931348623157e308\n"),
                                    std::string("1,1.7e308\n2,1.7e308\n"),         // one huge value
                                    std::string("1,0\n2,4.9e-324\n3,1e-320\n")}) {  // subnormals
    INFO(losses);
    write_bytes(dir.file("log.csv"), "step,loss\n" + losses);
    const Run run = tapegrad({"loss", "--log", dir.file("log.csv"), "--out", dir.file("loss.png")});
    INFO("stderr: " << run.err);
    REQUIRE(run.code == 0);
    // The line itself is drawn, not only the legend's 24-pixel swatch.
    CHECK(pixels_near(read_png(dir.file("loss.png")), kBlue) > 300);
  }
  // Steps past DBL_MAX apart on the x axis too.
  write_bytes(dir.file("wide.csv"), "step,loss\n-1e308,1\n1e308,2\n");
  REQUIRE(tapegrad({"loss", "--log", dir.file("wide.csv"), "--out", dir.file("wide.png")}).code == 0);
  CHECK(pixels_near(read_png(dir.file("wide.png")), kBlue) > 300);
}

TEST_CASE("plot loss reads decimal numbers only and refuses a header naming a field twice",
          "[plot]") {
  TempDir dir;
  const std::string out = dir.file("out.png");
  auto loss_from = [&](const std::string& csv) {
    write_bytes(dir.file("log.csv"), csv);
    return tapegrad({"loss", "--log", dir.file("log.csv"), "--out", out});
  };
  // strtod read 0x10 as 16 and "infinity" as a number; neither is a decimal number.
  require_one_line_error(loss_from("step,loss\n1,0x10\n"), "line 2: loss '0x10' is not a decimal number");
  require_one_line_error(loss_from("step,loss\n0x1,2\n"), "step '0x1' is not a decimal number");
  require_one_line_error(loss_from("step,loss\n1,2\n2,+3\n"), "line 3: loss '+3' is not");
  require_one_line_error(loss_from("step,loss,val_loss\n1,2,infinity\n"), "val_loss 'infinity'");
  require_one_line_error(loss_from(std::string("step,loss\n1,2\0" "9\n", 16)), "loss '2\\x009'");
  require_one_line_error(loss_from("step,loss,lr,loss\n1,2,0.1,3\n"),
                         "line 1: fields 2 and 4 are both named 'loss'");
  CHECK_FALSE(fs::exists(out));
  // A subnormal loss is a finite number.
  REQUIRE(loss_from("step,loss\n1,1e-320\n2,0.5\n").code == 0);
}

TEST_CASE("plot grads draws a model of 1024 layers: the legend stops, the lines do not", "[plot]") {
  TempDir dir;
  // The tensors of a 1024-layer charlm, as train --grad-stats names them, on three steps.
  std::vector<std::string> names = {"embedding.weight"};
  const char* per_layer[] = {"norm1.weight", "norm1.bias", "attn.q_proj.weight", "attn.q_proj.bias",
                             "attn.k_proj.weight", "attn.k_proj.bias", "attn.v_proj.weight",
                             "attn.v_proj.bias", "attn.o_proj.weight", "attn.o_proj.bias",
                             "norm2.weight", "norm2.bias", "mlp.linear1.weight", "mlp.linear1.bias",
                             "mlp.linear2.weight", "mlp.linear2.bias"};
  for (int layer = 0; layer < 1024; ++layer) {
    for (const char* name : per_layer) names.push_back("layers." + std::to_string(layer) + "." + name);
  }
  for (const char* name : {"norm.weight", "norm.bias", "head.weight", "head.bias"}) names.push_back(name);
  std::string csv = "step,name,mean_abs_grad,grad_norm,update_ratio\n";
  for (const int step : {1, 11, 21}) {
    for (size_t i = 0; i < names.size(); ++i) {
      csv += std::to_string(step) + "," + names[i] + "," + std::to_string((i % 97 + 1) * 1e-4 * step) +
             ",0.1,0.001\n";
    }
  }
  write_bytes(dir.file("grads.csv"), csv);
  Launch launch;
  launch.alarm_seconds = 300;  // a chart that hangs fails here, not the suite
  // Before: a legend row a series made the canvas over 300000 pixels tall: "canvas: size ...".
  const Run run = tapegrad({"grads", "--log", dir.file("grads.csv"), "--out", dir.file("g.png")}, launch);
  INFO("stderr: " << run.err);
  REQUIRE(run.code == 0);
  const Png png = read_png(dir.file("g.png"));
  CHECK(png.height <= 1200);  // 40 legend rows, not 16389
  CHECK(png.width <= 1600);
  CHECK(pixels_near(png, kBlue) > 300);
  CHECK(pixels_near(png, kOrange) > 300);
}

namespace {

// The small multiples' colours: series k of a panel in colour k (tab10, its grey left out).
constexpr int kPanelColours[8][3] = {{31, 119, 180}, {255, 127, 14}, {44, 160, 44},
                                     {214, 39, 40},  {148, 103, 189}, {140, 86, 75},
                                     {227, 119, 194}, {188, 189, 34}};

// How many pixels of `box` are within 2 of a colour.
size_t pixels_near_in(const Png& png, const tg::plot::PanelBox& box, const int (&rgb)[3]) {
  size_t count = 0;
  for (int y = std::max(0, box.y); y < box.y + box.height && y < static_cast<int>(png.height); ++y) {
    for (int x = std::max(0, box.x); x < box.x + box.width && x < static_cast<int>(png.width); ++x) {
      const unsigned char* p = &png.rgb[(static_cast<size_t>(y) * png.width + x) * 3];
      count += std::abs(p[0] - rgb[0]) <= 2 && std::abs(p[1] - rgb[1]) <= 2 && std::abs(p[2] - rgb[2]) <= 2;
    }
  }
  return count;
}

}  // namespace

TEST_CASE("small multiples: each panel's lines in distinct colours, each with its own legend", "[plot]") {
  TempDir dir;
  // Panels of 2, 8 and 1 series; series k a flat line at 10^k (apart on the shared log axis).
  std::vector<tg::plot::LinePanel> panels;
  for (const size_t count : {2, 8, 1}) {
    tg::plot::LinePanel panel{.title = "panel of " + std::to_string(count), .series = {}};
    for (size_t k = 0; k < count; ++k) {
      panel.series.push_back({"series " + std::to_string(k), {1, 2, 3, 4, 5, 6, 7, 8},
                              std::vector<double>(8, std::pow(10.0, static_cast<double>(k)))});
    }
    panels.push_back(panel);
  }
  const tg::plot::PanelsPlaced placed =
      tg::plot::small_multiples_png(dir.file("panels.png"), panels, "title", "step", tg::plot::YScale::log);
  REQUIRE(placed.columns == 3);
  REQUIRE(placed.plot_areas.size() == 3);
  REQUIRE(placed.legends.size() == 3);
  const Png png = read_png(dir.file("panels.png"));
  for (size_t p = 0; p < panels.size(); ++p) {
    const size_t count = panels[p].series.size();
    for (size_t k = 0; k < 8; ++k) {
      CAPTURE(p, k);
      // Series k's line across its plot area, and its swatch in the panel's legend; no other
      // colour in either (no colour stands for two series of a panel).
      const size_t in_area = pixels_near_in(png, placed.plot_areas[p], kPanelColours[k]);
      const size_t in_legend = pixels_near_in(png, placed.legends[p], kPanelColours[k]);
      CHECK((k < count ? in_area > 250 : in_area == 0));
      CHECK((k < count ? in_legend > 20 : in_legend == 0));
    }
  }
  // Panels side by side, legends right of their plot areas, all inside the image.
  CHECK(placed.plot_areas[0].x + placed.plot_areas[0].width < placed.legends[0].x);
  CHECK(placed.legends[0].x + placed.legends[0].width < placed.plot_areas[1].x);
  CHECK(placed.plot_areas[1].y == placed.plot_areas[0].y);
  CHECK(placed.legends[2].x + placed.legends[2].width <= static_cast<int>(png.width));
}

TEST_CASE("plot grads draws a panel a module: 19 parameters of textcls in 5 panels", "[plot]") {
  TempDir dir;
  std::string csv = "step,name,mean_abs_grad,grad_norm,update_ratio\n";
  const char* names[] = {"embedding.weight", "layers.0.norm1.weight", "layers.0.norm1.bias",
                         "layers.0.attn.q_proj.weight", "layers.0.attn.q_proj.bias",
                         "layers.0.attn.k_proj.weight", "layers.0.attn.k_proj.bias",
                         "layers.0.attn.v_proj.weight", "layers.0.attn.v_proj.bias",
                         "layers.0.attn.o_proj.weight", "layers.0.attn.o_proj.bias",
                         "layers.0.norm2.weight", "layers.0.norm2.bias", "layers.0.mlp.linear1.weight",
                         "layers.0.mlp.linear1.bias", "layers.0.mlp.linear2.weight",
                         "layers.0.mlp.linear2.bias", "fc.weight", "fc.bias"};
  for (const int step : {1, 10, 20}) {
    for (size_t i = 0; i < std::size(names); ++i) {
      csv += std::to_string(step) + "," + names[i] + "," + std::to_string((i + 1) * 1e-4) + ",0.1,0.001\n";
    }
  }
  write_bytes(dir.file("grads.csv"), csv);
  const Run run = tapegrad({"grads", "--log", dir.file("grads.csv"), "--out", dir.file("g.png")});
  INFO("stderr: " << run.err);
  REQUIRE(run.code == 0);
  CHECK(run.out == "wrote " + dir.file("g.png") + ": 19 parameters in 5 panels\n");
  const Png png = read_png(dir.file("g.png"));
  CHECK(png.width > png.height);  // three panels a row, two rows
  // The attention panel's eight parameters: eight colours, none of them the grey of tab10.
  for (const auto& colour : kPanelColours) CHECK(pixels_near(png, colour) > 100);
}
