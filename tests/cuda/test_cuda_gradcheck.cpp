// The whole f64 gradcheck registry, run with every tensor on the CUDA device: each case is its
// own test ("gradcheck on cuda: <case>"), as the CPU suite registers them.
#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "cuda_test_support.h"
#include "nn/gradcheck_cases.h"
#include "ops/gradcheck_cases.h"

namespace tg::testing {
namespace {

class CudaGradcheckInvoker : public Catch::ITestInvoker {
 public:
  explicit CudaGradcheckInvoker(GradcheckCase check) : check_(std::move(check)) {}
  void invoke() const override {
    const GradcheckResult result = check_.run(kCuda);
    INFO(check_.name << " " << check_.shapes << " on cuda: " << result.message << " (max abs err "
                     << result.max_abs_err << ", max rel err " << result.max_rel_err << ")");
    CHECK(result.compared > 0);
    REQUIRE(result.passed);
  }

 private:
  GradcheckCase check_;
};

bool register_cuda_gradchecks() {
  std::vector<GradcheckCase> cases = ops_gradcheck_cases();
  for (GradcheckCase& check : nn_gradcheck_cases()) cases.push_back(std::move(check));
  for (GradcheckCase& check : cases) {
    const std::string name = "gradcheck on cuda: " + check.name;
    Catch::AutoReg(new CudaGradcheckInvoker(std::move(check)), CATCH_INTERNAL_LINEINFO,
                   Catch::StringRef(), Catch::NameAndTags{name, "[cuda][gradcheck]"});
  }
  return true;
}

const bool registered = register_cuda_gradchecks();

}  // namespace
}  // namespace tg::testing
