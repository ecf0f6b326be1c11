// tapegrad: the command line. `tapegrad <command> --help` explains each command.
#include <boost/program_options/errors.hpp>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <new>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/openblas_core.h"
#include "tapegrad/distributed/communicator.h"
#include "tapegrad/distributed/job.h"
#include "tapegrad/runtime/features.h"

namespace {

const std::map<std::string, std::pair<std::function<int(const tg::cli::Args&)>, const char*>> kCommands = {
    {"info", {tg::cli::info, "version, BLAS and its kernels, threads, devices"}},
    {"train", {tg::cli::train, "train a model (textcls, timeseries, charlm) on a data file"}},
    {"eval", {tg::cli::eval, "a checkpoint's loss (and accuracy) on a data file"}},
    {"sample", {tg::cli::sample, "generate text from a charlm checkpoint (or classify a text)"}},
    {"gradcheck", {tg::cli::gradcheck, "run the registry of f64 finite-difference gradient checks"}},
    {"plot", {tg::cli::plot, "PNG charts: plot pe (positional encoding), plot loss (a training log),\n"
                             "              plot grads (train --grad-stats), plot attention (a checkpoint's\n"
                             "              heads on a text; --summary: the head metrics of analyze heads)"}},
    {"analyze", {tg::cli::analyze, "analyze heads: per attention head, entropy, distance, and the weight\n"
                                   "              on the previous, same and first token, over a data file"}},
    {"quantize", {tg::cli::quantize, "int8 quantization of a checkpoint's Linear layers (dynamic, or static\n"
                                     "              with calibration); eval/sample/plot load the result"}},
    {"export", {tg::cli::export_weights,
                "a checkpoint's model alone (state_dict, no optimizer state) for\n"
                "              PyTorch: the tutorial's classes load it with strict=True"}},
    {"bench", {tg::cli::bench, "time training steps of fixed workloads (ms/step, GFLOP/s, peak bytes)"}},
};

void usage(std::ostream& out) {
  out << "usage: tapegrad <command> [options]\n\ncommands:\n";
  for (const auto& [name, command] : kCommands) {
    out << "  " << name << std::string(12 - name.size(), ' ') << command.second << "\n";
  }
  out << "\n`tapegrad <command> --help` shows a command's options and examples;\n"
         "`tapegrad --version` prints the version.\n"
         "--textbook, on every command that computes, runs the code the reading path shows: the\n"
         "plain CPU kernels, attention written with ops, one thread (slow; docs/textbook.md).\n";
}

// A descriptor among 0, 1 and 2 that the caller closed (`2>&-`) would be handed to the next file
// opened: the --log CSV would become "stderr" and fill with progress lines. Each closed one is
// reopened on /dev/null in the mode opposite to its use (stdin write-only, stdout and stderr
// read-only, as gnulib's stdopen does), so that using it still fails, as it would have closed:
// a write to a closed stdout is reported, not silently discarded.
void reopen_closed_standard_descriptors() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    const int opened = open("/dev/null", fd == 0 ? O_WRONLY : O_RDONLY);
    if (opened < 0) std::_Exit(2);  // no /dev/null: nothing safe can be opened or said
    if (opened != fd) {  // the lower descriptors are open, so this does not happen; but be sure
      dup2(opened, fd);
      close(opened);
    }
  }
}

// Two signals whose default action kills the process without a word when a write fails: SIGPIPE
// (a pipe whose reader has gone, `tapegrad sample ... | head`) and SIGXFSZ (a write past the
// file-size limit, `ulimit -f`). Ignored, the write fails with EPIPE or EFBIG instead, which is
// reported as any failed write is (and a temporary file is removed).
void ignore_signals_of_failed_writes() {
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGXFSZ, SIG_IGN);
}

// Standard output is written through both std::cout and stdio (which share stdio's buffer): the
// one check for every command, after it returned. "" when everything written has reached the
// descriptor, else the reason it did not.
std::string standard_output_error() {
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (flushed && !std::ferror(stdout) && !std::cout.fail()) return "";
  if (!flushed && errno != 0) return std::strerror(errno);
  // An earlier write failed (stdio dropped its bytes) and errno has changed since: the reason is
  // asked of the descriptor again, with one more byte (the output is incomplete already). A sink
  // that has recovered takes it: then the earlier failure's reason is unknown.
  return write(STDOUT_FILENO, "\n", 1) < 0 ? std::strerror(errno) : "an earlier write failed";
}

int run(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  reopen_closed_standard_descriptors();  // first: before anything opens a file
  ignore_signals_of_failed_writes();
  // OpenBLAS's generic kernels on a CPU it does not know: run again with the right ones.
  tg::cli::rerun_with_better_openblas_core(argv);
  const int code = run(argc, argv);
  const std::string output_error = standard_output_error();
  if (output_error.empty() || code != 0) return code;  // a failed command has said what failed
  const std::string name = argc >= 2 ? argv[1] : "";
  std::cerr << "tapegrad" << (name.empty() ? "" : " " + name) << ": error: writing standard output: "
            << output_error << "\n";
  if (tg::dist::world_is_distributed()) tg::dist::world().abort(2);
  return 2;
}

namespace {

// The command named by argv[1], run; its exit code (a tg::Error and the like: printed, 2).
int run(int argc, char** argv) {
  if (argc < 2) {
    usage(std::cerr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    usage(std::cout);
    return 0;
  }
  if (name == "--version" || name == "-V" || name == "version") {
    std::cout << "tapegrad " << tg::cli::version() << "\n";
    return 0;
  }
  const auto command = kCommands.find(name);
  if (command == kCommands.end()) {
    std::cerr << "tapegrad: unknown command '" << name << "' (try tapegrad --help)\n";
    return 2;
  }
  // In a data-parallel job (distributed/job.h) an error names its rank; one seen by a single rank
  // after setup ends the whole job (MPI_Abort), since the other ranks would wait for it forever.
  const auto stop = [&](int code) {
    if (tg::dist::world_is_distributed()) tg::dist::world().abort(code);
    return code;
  };
  const auto prefix = [&] {
    std::string text = "tapegrad " + name + ": error: ";
    if (tg::dist::world_is_distributed()) text += "rank " + std::to_string(tg::dist::world().rank()) + ": ";
    return text;
  };
  try {
    tg::cpu::avx512_hidden();  // a bad TAPEGRAD_MAX_CPU_ISA: its error before any work
    return command->second.first(tg::cli::Args(argv + 2, argv + argc));
  } catch (const tg::dist::JobStopped& stopped) {  // every rank stops together, one reports
    if (stopped.what()[0] != '\0') std::cerr << "tapegrad " << name << ": error: " << stopped.what() << "\n";
    return stopped.code();
  } catch (const tg::Error& error) {
    std::cerr << prefix() << error.what() << "\n";
  } catch (const boost::program_options::error& error) {
    std::cerr << prefix() << error.what() << " (try --help)\n";
  } catch (const std::bad_alloc&) {
    std::cerr << prefix() << "out of memory (the sizes asked for need more than "
                 "this machine has)\n";
  } catch (const std::exception& error) {
    std::cerr << prefix() << error.what() << "\n";
  }
  return stop(2);
}

}  // namespace
