#pragma once
// Registers each case of the shared gradcheck registry as its own Catch2 test case (and so its
// own CTest test), named "gradcheck: <case>" ("gradcheck on cuda:0: <case>" on another device).
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tapegrad/autograd/gradcheck.h"

namespace tg::testing {

class GradcheckInvoker : public Catch::ITestInvoker {
 public:
  GradcheckInvoker(GradcheckCase check, Device device)
      : check_(std::move(check)), device_(device) {}
  void invoke() const override {
    const GradcheckResult result = check_.run(device_);
    INFO(check_.name << " " << check_.shapes << " on " << device_name(device_) << ": "
                     << result.message << " (max abs err "
                     << result.max_abs_err << ", max rel err " << result.max_rel_err << ")");
    CHECK(result.compared > 0);
    REQUIRE(result.passed);
  }

 private:
  GradcheckCase check_;
  Device device_;
};

inline bool register_gradcheck_tests(std::vector<GradcheckCase> cases, Device device = kCPU,
                                     const std::string& tags = "[gradcheck]") {
  const std::string prefix =
      device == kCPU ? "gradcheck: " : "gradcheck on " + device_name(device) + ": ";
  for (GradcheckCase& check : cases) {
    const std::string name = prefix + check.name;
    Catch::AutoReg(new GradcheckInvoker(std::move(check), device), CATCH_INTERNAL_LINEINFO,
                   Catch::StringRef(), Catch::NameAndTags{name, tags});
  }
  return true;
}

}  // namespace tg::testing
