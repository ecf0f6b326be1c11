// `tapegrad info`: what this build runs on.
#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <string>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/openblas_core.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/cpu/fast/attention_tiles.h"
#include "tapegrad/cpu/fast/quantize.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"

extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);
extern "C" int openblas_get_num_threads(void);

namespace tg::cli {

const char* version() { return TAPEGRAD_VERSION; }

namespace {
// " (VARIABLE=value)" where the variable chose, else " (the best this CPU has; VARIABLE=choices
// chooses)".
std::string chosen_by(const char* variable, const char* choices) {
  const char* set = std::getenv(variable);
  return set && *set ? std::string(" (") + variable + "=" + set + ")"
                     : std::string(" (the best this CPU has; ") + variable + "=" + choices + " chooses)";
}
// Which int8 kernels run (cpu/fast/quantize.h): TAPEGRAD_INT8_KERNEL or the best this CPU has.
std::string int8_line() {
  const cpu::int8::Path path = cpu::int8::selected_path();  // a bad variable: the error, exit 2
  return cpu::int8::path_description(path) + chosen_by(cpu::int8::kPathVariable, "avx2|vnni|plain");
}
// Which products the attention kernel's tiles run (cpu/fast/attention_tiles.h).
std::string attention_line() {
  if (!cpu::cpu_has_avx2_fma()) return "BLAS products, SSE2 rows (no AVX2 + FMA)";
  const bool wide = cpu::tiles::avx512_tiles();  // a bad variable: the error, exit 2
  return (wide ? "attention on AVX-512 tile products" : "attention on AVX2 tile products") +
         chosen_by(cpu::tiles::kTilesVariable, "avx2|avx512");
}
// The CPU fast paths' instruction sets (runtime/features.h), and whether TAPEGRAD_MAX_CPU_ISA hid
// AVX-512.
std::string fast_paths_line() {
  if (!cpu::cpu_has_avx2_fma()) return "off (no AVX2 + FMA: plain loops)";
  return std::string("AVX2 + FMA") + (cpu::cpu_has_avx512f() ? ", AVX-512 F (GELU)" : "") +
         (cpu::avx512_hidden() ? std::string(" (AVX-512 hidden: ") + cpu::kMaxIsaVariable + "=avx2)"
                               : "");
}
}  // namespace

int info(const Args& args) {
  namespace po = boost::program_options;
  po::options_description options("tapegrad info: version, BLAS and its kernel set, threads, devices");
  options.add_options()("help,h", "show this help");
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options << "\nexample:\n  tapegrad info\n";
    return 0;
  }
  pin_blas_to_one_thread();  // as the first GEMM would (the thread policy, runtime/threads.h)
  const std::string int8 = int8_line();  // before any output: a bad variable is the one line
  const std::string attention = attention_line();
  const std::string core_note = openblas_core_note().empty() ? "" : "; " + openblas_core_note();
  std::cout << "tapegrad " << version() << "\n"
            << "blas:     " << openblas_get_config() << "\n"
            << "kernels:  " << openblas_get_corename() << " (OpenBLAS" << core_note << "); CPU fast paths "
            << fast_paths_line() << "\n"
            << "tiles:    " << attention << "\n"
            << "int8:     " << int8 << "\n"
            << "threads:  " << num_threads() << " (" << describe_num_threads()
            << "; --threads N on any command), " << openblas_get_num_threads() << " (OpenBLAS)\n"
            << "devices:  cpu\n";
  const Backend* cuda = find_backend(DeviceType::cuda);
  if (cuda == nullptr) {
    std::cout << "cuda:     built without CUDA\n";
  } else if (cuda->device_count() == 0) {
    std::cout << "cuda:     no CUDA device\n";
  } else {
    for (const std::string& line : cuda->describe()) std::cout << "          " << line << "\n";
  }
  return 0;
}

}  // namespace tg::cli
