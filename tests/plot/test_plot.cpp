// `tapegrad plot`: runs the real binary into a temporary directory and reads back what it wrote:
// the PNG signature and IHDR, the decoded pixels (stb_image, from the same libstb), one line on
// stderr and exit code 2 for every kind of bad input, and atomic writes. Then plot/plot.h, the
// plots a program draws of its own tensors, read back the same way: a cell's centre pixel in the
// colour of its value, NaN cells grey, one panel a head, the curves of a training log, and the
// tg::Error of each kind of bad input.
#include <catch2/catch.hpp>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/plot/plot.h"
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
#include <limits>
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

// ---- plot/plot.h: a program's own tensors -------------------------------------------------------

namespace {

using Catch::Matchers::Contains;

tg::plot::Rgb pixel_at(const Png& png, int x, int y) {
  const size_t at = (static_cast<size_t>(y) * png.width + x) * 3;
  return {png.rgb[at], png.rgb[at + 1], png.rgb[at + 2]};
}

// Where the cells of a one-panel heatmap are: cell (0, 0)'s top-left pixel, found as the first
// pixel (rows top-down, each left to right) of its exact colour, and a cell's size in pixels, the
// runs of that colour from there (every cell is the same whole number of pixels).
struct CellGrid {
  int x0 = 0, y0 = 0, width = 0, height = 0;
  tg::plot::Rgb centre(const Png& png, int row, int col) const {
    return pixel_at(png, x0 + col * width + width / 2, y0 + row * height + height / 2);
  }
};

CellGrid find_cells(const Png& png, tg::plot::Rgb first_cell) {
  for (int y = 0; y < static_cast<int>(png.height); ++y) {
    for (int x = 0; x < static_cast<int>(png.width); ++x) {
      if (!(pixel_at(png, x, y) == first_cell)) continue;
      CellGrid grid{x, y, 0, 0};
      while (x + grid.width < static_cast<int>(png.width) && pixel_at(png, x + grid.width, y + 2) == first_cell)
        ++grid.width;
      while (y + grid.height < static_cast<int>(png.height) && pixel_at(png, x + 2, y + grid.height) == first_cell)
        ++grid.height;
      return grid;
    }
  }
  FAIL("no pixel of the first cell's colour");
  return {};
}

// Blocks of `color` at least 9 x 9 pixels: pixels of that colour whose left and upper neighbours
// are not, with the colour 8 pixels right, down and diagonally. A heatmap panel of one value is one
// block; the colour bar, whose colour changes every row or two, is none.
int blocks_of(const Png& png, tg::plot::Rgb color) {
  const int w = static_cast<int>(png.width), h = static_cast<int>(png.height);
  int blocks = 0;
  for (int y = 0; y + 8 < h; ++y) {
    for (int x = 0; x + 8 < w; ++x) {
      if (!(pixel_at(png, x, y) == color)) continue;
      if (x > 0 && pixel_at(png, x - 1, y) == color) continue;
      if (y > 0 && pixel_at(png, x, y - 1) == color) continue;
      blocks += pixel_at(png, x + 8, y) == color && pixel_at(png, x, y + 8) == color &&
                pixel_at(png, x + 8, y + 8) == color;
    }
  }
  return blocks;
}

// [3, 4] holding 0, 1, ..., 11 row by row, as `dtype` (every value exact in f16 and bf16 too).
tg::Tensor counting_matrix(tg::DType dtype = tg::DType::f32) {
  std::vector<double> values;
  for (int v = 0; v < 12; ++v) values.push_back(v);
  return tg::from_values(values, {3, 4}, dtype);
}

}  // namespace

TEST_CASE("plot::heatmap: each cell's centre pixel is the colour map's colour of its value",
          "[plot][plot_api]") {
  TempDir dir;
  const std::string out = dir.file("matrix.png");
  tg::plot::heatmap(out, counting_matrix(), {.title = "counting", .row_labels = {"a", "b", "c"}});
  const Png png = read_png(out);
  // The colour scale spans the values 0 to 11: value v is colormap(v / 11).
  CHECK(tg::plot::colormap(0) == tg::plot::Rgb{68, 1, 84});  // viridis' first colour
  const CellGrid cells = find_cells(png, tg::plot::colormap(0));
  CHECK(cells.width >= 30);   // 480 pixels a side at most, 48 a cell: 4 columns of 48
  CHECK(cells.height >= 40);  // at least 120 pixels for 3 rows
  for (int row = 0; row < 3; ++row) {
    for (int col = 0; col < 4; ++col) {
      CAPTURE(row, col);
      CHECK(cells.centre(png, row, col) == tg::plot::colormap((row * 4 + col) / 11.0));
    }
  }
}

TEST_CASE("plot::heatmap: f64, f16 and bf16 tensors draw the same PNG as f32", "[plot][plot_api]") {
  TempDir dir;
  tg::plot::heatmap(dir.file("f32.png"), counting_matrix());
  const std::string f32 = read_bytes(dir.file("f32.png"));
  for (const tg::DType dtype : {tg::DType::f64, tg::DType::f16, tg::DType::bf16}) {
    CAPTURE(tg::dtype_name(dtype));
    const std::string out = dir.file(std::string(tg::dtype_name(dtype)) + ".png");
    tg::plot::heatmap(out, counting_matrix(dtype));
    CHECK(read_bytes(out) == f32);
  }
  // A transposed view is drawn as the matrix it shows, and a tensor that requires grad is drawn
  // without recording anything.
  tg::Tensor weight = counting_matrix().transpose(0, 1).contiguous().transpose(0, 1);
  weight.requires_grad_();
  tg::plot::heatmap(dir.file("view.png"), weight);
  CHECK(read_bytes(dir.file("view.png")) == f32);
}

TEST_CASE("plot::heatmap: NaN and infinite cells are grey and out of the colour scale",
          "[plot][plot_api]") {
  TempDir dir;
  std::vector<double> values;
  for (int v = 0; v < 12; ++v) values.push_back(v);
  values[6] = std::nan("");                              // row 1, column 2
  values[11] = std::numeric_limits<double>::infinity();  // row 2, column 3
  values[3] = -std::numeric_limits<double>::infinity();  // row 0, column 3
  tg::plot::heatmap(dir.file("nan.png"), tg::from_values(values, {3, 4}));
  const Png png = read_png(dir.file("nan.png"));
  const CellGrid cells = find_cells(png, tg::plot::colormap(0));
  CHECK(cells.centre(png, 1, 2) == tg::plot::kNonFiniteCell);
  CHECK(cells.centre(png, 2, 3) == tg::plot::kNonFiniteCell);
  CHECK(cells.centre(png, 0, 3) == tg::plot::kNonFiniteCell);
  // The finite values span 0 to 10.
  CHECK(cells.centre(png, 2, 2) == tg::plot::colormap(1.0));
  CHECK(cells.centre(png, 1, 1) == tg::plot::colormap(5 / 10.0));
  // Nothing finite at all: every cell grey, nothing thrown.
  tg::plot::heatmap(dir.file("all-nan.png"), tg::full({2, 2}, std::nan("")));
  CHECK(blocks_of(read_png(dir.file("all-nan.png")), tg::plot::kNonFiniteCell) == 1);
}

TEST_CASE("plot::heatmap: vmin and vmax set the colour range, values beyond it clamped",
          "[plot][plot_api]") {
  TempDir dir;
  tg::plot::heatmap(dir.file("range.png"), counting_matrix(), {.vmin = 0.0, .vmax = 22.0});
  Png png = read_png(dir.file("range.png"));
  const CellGrid cells = find_cells(png, tg::plot::colormap(0));
  CHECK(cells.centre(png, 2, 3) == tg::plot::colormap(11 / 22.0));
  CHECK(cells.centre(png, 1, 0) == tg::plot::colormap(4 / 22.0));
  // vmin alone: vmax is the largest value; values below vmin take its colour. (The cells sit
  // where they did: the layout depends on the shape and the labels, not on the values.)
  tg::plot::heatmap(dir.file("vmin.png"), counting_matrix(), {.vmin = 4.0});
  png = read_png(dir.file("vmin.png"));
  CHECK(cells.centre(png, 0, 3) == tg::plot::colormap(0));  // 3 < vmin
  CHECK(cells.centre(png, 1, 2) == tg::plot::colormap((6 - 4) / 7.0));
  CHECK(cells.centre(png, 2, 3) == tg::plot::colormap(1.0));
}

TEST_CASE("plot::heatmap refuses bad input with a tg::Error naming heatmap and the shape",
          "[plot][plot_api]") {
  TempDir dir;
  const std::string out = dir.file("bad.png");
  CHECK_THROWS_WITH(tg::plot::heatmap(out, tg::zeros({5})),
                    Contains("heatmap: expected a 2-D tensor") && Contains("[5]"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, tg::zeros({2, 3, 4})), Contains("heatmap") && Contains("[2, 3, 4]"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, counting_matrix(), {.row_labels = {"a", "b"}}),
                    Contains("heatmap: 2 row labels") && Contains("[3, 4] (3 rows)"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, counting_matrix(), {.col_labels = {"a", "b", "c", "d", "e"}}),
                    Contains("heatmap: 5 column labels") && Contains("[3, 4] (4 columns)"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, tg::zeros({0, 4})), Contains("heatmap") && Contains("[0, 4] is empty"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, tg::Tensor()), Contains("heatmap") && Contains("undefined"));
  // Past the cap, refused before anything is copied (a view of one value, nothing allocated).
  const tg::Tensor huge = tg::zeros({1, 1}).expand({4097, 4096});
  CHECK_THROWS_WITH(tg::plot::heatmap(out, huge), Contains("heatmap") && Contains("[4097, 4096] holds 16781312 values") &&
                                                      Contains("more than the 16777216"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, counting_matrix(), {.vmin = 5.0, .vmax = 5.0}),
                    Contains("heatmap: the colour range runs from 5 to 5"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, counting_matrix(), {.vmin = 12.0}),
                    Contains("heatmap: the colour range runs from 12 to 11"));
  CHECK_THROWS_WITH(tg::plot::heatmap(out, counting_matrix(), {.vmax = std::nan("")}),
                    Contains("heatmap: vmin and vmax must be finite"));
  CHECK(!fs::exists(out));
}

TEST_CASE("plot::attention_grid draws one panel a head of the chosen batch item",
          "[plot][plot_api]") {
  TempDir dir;
  // [B = 2, heads = 4, 3, 3]: item 1's head h holds h everywhere, item 0 holds 9.
  std::vector<double> values(2 * 4 * 9, 9.0);
  for (int h = 0; h < 4; ++h) std::fill_n(values.begin() + 36 + h * 9, 9, h);
  const tg::Tensor weights = tg::from_values(values, {2, 4, 3, 3});
  const std::vector<std::string> tokens = {"the", "cat", "sat"};
  tg::plot::attention_grid(dir.file("grid.png"), weights, {.title = "layer 0", .tokens = tokens, .batch = 1});
  const Png png = read_png(dir.file("grid.png"));
  for (int h = 0; h < 4; ++h) {
    CAPTURE(h);
    CHECK(blocks_of(png, tg::plot::colormap(h / 3.0)) == 1);  // one panel a head
  }
  // [heads, Sq, Sk] of item 1 alone: the same picture.
  tg::plot::attention_grid(dir.file("heads.png"), weights.narrow(0, 1, 1).reshape({4, 3, 3}),
                           {.title = "layer 0", .tokens = tokens});
  CHECK(read_bytes(dir.file("heads.png")) == read_bytes(dir.file("grid.png")));
  // [Sq, Sk]: one panel; cross-attention labels its keys apart.
  tg::plot::attention_grid(dir.file("one.png"), tg::from_values({0, 1, 2, 3, 4, 5}, {2, 3}),
                           {.tokens = {"q0", "q1"}, .key_tokens = {"k0", "k1", "k2"}});
  const Png one = read_png(dir.file("one.png"));
  const CellGrid cells = find_cells(one, tg::plot::colormap(0));
  CHECK(cells.centre(one, 1, 2) == tg::plot::colormap(1.0));
}

TEST_CASE("plot::attention_grid: the forward's weights of a MultiHeadAttention", "[plot][plot_api]") {
  TempDir dir;
  tg::manual_seed(3);
  tg::nn::MultiHeadAttention attention(8, 2);
  attention.eval();
  const tg::Tensor x = tg::uniform({1, 4, 8}, -1.0, 1.0);
  const tg::nn::AttentionOutput out = attention.forward(x, x, x, tg::Tensor(), /*need_weights=*/true,
                                                       /*is_causal=*/false, /*average_attn_weights=*/false);
  REQUIRE(out.weights.shape() == tg::Shape{1, 2, 4, 4});
  tg::plot::attention_grid(dir.file("mha.png"), out.weights, {.tokens = {"a", "b", "c", "d"}});
  const Png png = read_png(dir.file("mha.png"));
  CHECK(png.width > 2 * 120);  // two panels side by side
}

TEST_CASE("plot::attention_grid refuses bad input with a tg::Error naming it and the shape",
          "[plot][plot_api]") {
  TempDir dir;
  const std::string out = dir.file("bad.png");
  const tg::Tensor weights = tg::zeros({2, 4, 3, 3});
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, tg::zeros({3})),
                    Contains("attention_grid: expected weights") && Contains("got [3]"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, tg::zeros({1, 1, 1, 2, 2})), Contains("[1, 1, 1, 2, 2]"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, weights, {.batch = 2}),
                    Contains("attention_grid: batch 2 is outside the 2 items of weights [2, 4, 3, 3]"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, tg::zeros({4, 3, 3}), {.batch = 1}),
                    Contains("attention_grid: batch 1 given for weights [4, 3, 3]"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, weights, {.tokens = {"a", "b"}}),
                    Contains("attention_grid: 2 tokens for weights [2, 4, 3, 3] (3 queries)"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, tg::zeros({2, 3}), {.tokens = {"a", "b"}, .key_tokens = {"a"}}),
                    Contains("attention_grid: 1 key tokens for weights [2, 3] (3 keys)"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, tg::zeros({1, 1, 1}).expand({65, 2, 2})),
                    Contains("attention_grid: weights [65, 2, 2] have 65 heads, more than the 64"));
  CHECK_THROWS_WITH(tg::plot::attention_grid(out, tg::zeros({2, 0, 3})), Contains("[2, 0, 3] is empty"));
  CHECK(!fs::exists(out));
}

TEST_CASE("plot::loss_curves draws a training log written here, and series of a program's own",
          "[plot][plot_api]") {
  TempDir dir;
  write_bytes(dir.file("log.csv"), kLog);
  const std::vector<tg::plot::Series> series = tg::plot::read_training_log(dir.file("log.csv"));
  REQUIRE(series.size() == 2);
  CHECK(series[0].name == "train loss");
  CHECK(series[0].x == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9});
  CHECK(series[0].y == std::vector<double>{2.30, 2.10, 1.90, 1.60, 1.40, 1.25, 1.10, 1.00, 0.95});
  CHECK(series[1].name == "validation loss");
  CHECK(series[1].x == std::vector<double>{3, 6, 9});
  CHECK(series[1].y == std::vector<double>{1.95, 1.35, 1.05});
  tg::plot::loss_curves(dir.file("loss.png"), series);
  const Png png = read_png(dir.file("loss.png"));
  CHECK(png.has_pixel_near(kBlue[0], kBlue[1], kBlue[2]));
  CHECK(png.has_pixel_near(kOrange[0], kOrange[1], kOrange[2]));

  // A program's own: a NaN and an infinity are gaps; one series, drawn in the first colour only.
  tg::plot::loss_curves(dir.file("own.png"),
                        {{"mine", {0, 1, 2, 3, 4}, {1.0, std::nan(""), 0.5, INFINITY, 0.25}}},
                        {.title = "my loss", .log_y = true});
  const Png own = read_png(dir.file("own.png"));
  CHECK(own.has_pixel_near(kBlue[0], kBlue[1], kBlue[2]));
  CHECK(!own.has_pixel_near(kOrange[0], kOrange[1], kOrange[2]));

  CHECK_THROWS_WITH(tg::plot::loss_curves(dir.file("bad.png"), {}), Contains("loss_curves: no series"));
  CHECK_THROWS_WITH(tg::plot::loss_curves(dir.file("bad.png"), {{"a", {1, 2}, {1}}}),
                    Contains("loss_curves: series 'a' has 2 steps but 1 values"));
  CHECK_THROWS_WITH(tg::plot::loss_curves(dir.file("bad.png"), {{"a", {1, 2}, {-1, 0}}}, {.log_y = true}),
                    Contains("loss_curves: no series has a finite, positive point"));
  CHECK(!fs::exists(dir.file("bad.png")));
}

TEST_CASE("plot::tape_picture draws a loss's graph as a PNG or an HTML page", "[plot][plot_api]") {
  TempDir dir;
  tg::Tensor w = tg::from_values({1, 2, 3, 4, 5, 6}, {2, 3});
  w.requires_grad_();
  const tg::Tensor x = tg::from_values({1, 0, -1, 2, 0, 1}, {2, 3});
  const tg::Tensor loss = tg::sum(tg::mul(w, x));
  const tg::TensorNames names = {{w.impl(), "weight"}};
  tg::plot::tape_picture(dir.file("tape.png"), loss, names);
  const Png png = read_png(dir.file("tape.png"));
  CHECK(png.width > 100);
  tg::plot::tape_picture(dir.file("tape.html"), loss, names, "two ops");
  const std::string html = read_bytes(dir.file("tape.html"));
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  for (const char* word : {"two ops", "mul", "sum", "weight"}) CHECK_THAT(html, Contains(word));
  CHECK_THROWS_WITH(tg::plot::tape_picture(dir.file("tape.svg"), loss),
                    Contains("tape_picture") && Contains("must end in .png or .html"));
  CHECK_THROWS_WITH(tg::plot::tape_picture(dir.file("t.png"), tg::Tensor()), Contains("tape_picture"));
}
