#pragma once
// Registers each case of the shared gradcheck registry as its own Catch2 test case (and so its
// own CTest test), named "gradcheck: <case>".
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "autograd/gradcheck.h"

namespace tg::testing {

class GradcheckInvoker : public Catch::ITestInvoker {
 public:
  explicit GradcheckInvoker(GradcheckCase check) : check_(std::move(check)) {}
  void invoke() const override {
    const GradcheckResult result = check_.run(kCPU);
    INFO(check_.name << " " << check_.shapes << ": " << result.message << " (max abs err "
                     << result.max_abs_err << ", max rel err " << result.max_rel_err << ")");
    CHECK(result.compared > 0);
    REQUIRE(result.passed);
  }

 private:
  GradcheckCase check_;
};

inline bool register_gradcheck_tests(std::vector<GradcheckCase> cases) {
  for (GradcheckCase& check : cases) {
    const std::string name = "gradcheck: " + check.name;
    Catch::AutoReg(new GradcheckInvoker(std::move(check)), CATCH_INTERNAL_LINEINFO,
                   Catch::StringRef(), Catch::NameAndTags{name, "[gradcheck]"});
  }
  return true;
}

}  // namespace tg::testing
