#include "tapegrad/cli/options.h"

#include <typeinfo>

#include "tapegrad/autograd/error.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cli {
namespace {

namespace po = boost::program_options;

// A positional argument (one that is no --option and no option's value): a tg::Error.
void refuse_positional_arguments(const po::parsed_options& parsed) {
  for (const po::option& option : parsed.options) {
    if (!option.string_key.empty()) continue;
    const std::string text = option.value.empty() ? "" : option.value.front();
    fail("unexpected argument '", text, "': every argument is an option, --name value ",
         "(try --help)");
  }
}

// An option typed with an empty string value (--save ''): a tg::Error, not "not given". A switch
// (--json, which takes no value) is stored as an empty string too, and is not one.
void refuse_empty_values(const po::variables_map& vm, const po::options_description& options) {
  for (const auto& [name, value] : vm) {
    if (value.defaulted() || value.value().type() != typeid(std::string)) continue;
    const po::option_description* option = options.find_nothrow(name, false);
    if (option == nullptr || option->semantic()->max_tokens() == 0) continue;
    TG_CHECK(!value.as<std::string>().empty(), "--", name,
             ": empty value (leave the option out for its default)");
  }
}

}  // namespace

po::variables_map parse_command_line(const Args& args, const po::options_description& options) {
  const po::parsed_options parsed = po::command_line_parser(args).options(options).run();
  refuse_positional_arguments(parsed);
  po::variables_map vm;
  po::store(parsed, vm);
  if (vm.count("help")) return vm;
  refuse_empty_values(vm, options);
  po::notify(vm);
  return vm;
}

const char* const kThreadsHelp =
    "threads (0: the cores this process may use, its CPU affinity capped by its cgroup's CPU "
    "quota; tapegrad info prints the count)";

void add_threads_option(po::options_description& options, int& threads) {
  options.add_options()("threads", po::value(&threads)->default_value(threads), kThreadsHelp);
}

void use_threads_option(int threads) {
  TG_CHECK(threads >= 0 && threads <= kMaxThreads, "--threads must be in [0, ", kMaxThreads,
           "] (0: the cores available), got ", threads);
  set_num_threads(threads);
}

const char* const kTextbookHelp =
    "run the code the reading path shows: the plain CPU kernels (the reference GEMM and attention "
    "loops, no SIMD), attention written with ops (three projections, matmul, softmax, dropout, "
    "matmul), one thread; slow on purpose, for reading, profiling and stepping through";

void add_textbook_option(po::options_description& options, bool& textbook) {
  options.add_options()("textbook", po::bool_switch(&textbook), kTextbookHelp);
}

std::unique_ptr<Textbook> open_textbook(bool textbook, const std::string& device) {
  if (!textbook) return nullptr;
  TG_CHECK(device.rfind("cuda", 0) != 0, "--textbook runs the plain CPU kernels; it does not "
           "combine with --device ", device, " (leave out one of the two)");
  return std::make_unique<Textbook>();
}

std::set<std::string> given_options(const po::variables_map& vm) {
  std::set<std::string> given;
  for (const auto& [name, value] : vm) {
    if (!value.defaulted()) given.insert(name);
  }
  return given;
}

}  // namespace tg::cli
