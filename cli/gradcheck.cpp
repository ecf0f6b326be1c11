// `tapegrad gradcheck`: runs the shared registry of finite-difference checks and prints a table
// (or one JSON object). Exits 1 when a check fails.
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/nn/gradcheck_cases.h"
#include "tapegrad/ops/gradcheck_cases.h"

namespace tg::cli {

std::vector<GradcheckCase> all_gradcheck_cases() {
  std::vector<GradcheckCase> cases = ops_gradcheck_cases();
  for (GradcheckCase& check : nn_gradcheck_cases()) cases.push_back(std::move(check));
  return cases;
}

int gradcheck(const Args& args) {
  namespace po = boost::program_options;
  std::string filter;
  std::string device_text = "cpu";
  int threads = 0;
  bool textbook = false;
  po::options_description options("tapegrad gradcheck: f64 central differences vs backward()");
  options.add_options()("help,h", "show this help")
      ("filter", po::value(&filter), "run only the checks whose name contains this text")
      ("device", po::value(&device_text), "run every check on this device: cpu, cuda, cuda:N")
      ("json", "print one JSON object instead of the table")
      ("list", "list the check names and exit");
  add_threads_option(options, threads);
  add_textbook_option(options, textbook);
  const po::variables_map vm = parse_command_line(args, options);
  if (vm.count("help")) {
    std::cout << options
              << "\nexamples:\n  tapegrad gradcheck\n  tapegrad gradcheck --filter matmul\n"
                 "  tapegrad gradcheck --json\n  tapegrad gradcheck --device cuda\n";
    return 0;
  }
  use_threads_option(threads);
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(textbook, device_text);
  std::vector<GradcheckCase> selected;
  for (GradcheckCase& check : all_gradcheck_cases()) {
    if (check.name.find(filter) != std::string::npos) selected.push_back(std::move(check));
  }
  if (vm.count("list")) {
    for (const GradcheckCase& check : selected) std::cout << check.name << "\n";
    return 0;
  }
  TG_CHECK(!selected.empty(), "no check matches --filter '", filter, "'");
  const Device device = parse_device(device_text);
  kernels(device);  // a missing device is one clear error before any check runs

  const bool json = vm.count("json") > 0;
  nlohmann::json report = {{"checks", nlohmann::json::array()}};
  int failures = 0;
  if (!json) std::printf("%-40s %-44s %12s %12s  %s\n", "check", "shapes", "max abs err", "max rel err", "pass");
  for (const GradcheckCase& check : selected) {
    const GradcheckResult result = check.run(device);
    failures += result.passed ? 0 : 1;
    report["checks"].push_back({{"name", check.name}, {"shapes", check.shapes},
                                {"passed", result.passed}, {"max_abs_err", result.max_abs_err},
                                {"max_rel_err", result.max_rel_err}});
    if (!json) {
      std::printf("%-40s %-44s %12.2e %12.2e  %s\n", check.name.c_str(), check.shapes.c_str(),
                  result.max_abs_err, result.max_rel_err, result.passed ? "ok" : "FAIL");
      if (!result.passed) std::printf("    %s\n", result.message.c_str());
    }
  }
  report["passed"] = failures == 0;
  report["device"] = device_name(device);
  if (json) {
    std::cout << report.dump() << "\n";
  } else {
    std::printf("\n%zu check%s, %zu passed, %d failed\n", selected.size(), selected.size() == 1 ? "" : "s",
                selected.size() - failures, failures);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace tg::cli
