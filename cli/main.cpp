// tapegrad: the command line. `tapegrad <command> --help` explains each command.
#include <boost/program_options/errors.hpp>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <new>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/openblas_core.h"
#include "tapegrad/cpu/features.h"
#include "tapegrad/dist/communicator.h"
#include "tapegrad/dist/job.h"

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
         "`tapegrad --version` prints the version.\n";
}

}  // namespace

int main(int argc, char** argv) {
  // OpenBLAS's generic kernels on a CPU it does not know: run again with the right ones.
  tg::cli::rerun_with_better_openblas_core(argv);
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
  // A pipe whose reader has gone (`tapegrad sample ... | head`) makes writes fail with EPIPE,
  // which is reported, instead of killing the process without a word.
  std::signal(SIGPIPE, SIG_IGN);
  // In a data-parallel job (dist/job.h) an error names its rank; one seen by a single rank after
  // setup ends the whole job (MPI_Abort), since the other ranks would wait for it forever.
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
