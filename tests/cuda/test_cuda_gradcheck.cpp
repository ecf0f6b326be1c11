// The whole f64 gradcheck registry with every tensor on the CUDA device: each case is its own
// test ("gradcheck on cuda:0: <case>"), registered as the CPU suite registers them.
#include "cuda_test_support.h"
#include "tapegrad/nn/gradcheck_cases.h"
#include "tapegrad/ops/gradcheck_cases.h"
#include "tests/gradcheck_registration.h"

namespace {

std::vector<tg::GradcheckCase> every_case() {
  std::vector<tg::GradcheckCase> cases = tg::ops_gradcheck_cases();
  for (tg::GradcheckCase& check : tg::nn_gradcheck_cases()) cases.push_back(std::move(check));
  return cases;
}

const bool registered =
    tg::testing::register_gradcheck_tests(every_case(), tg::testing::kCuda, "[cuda][gradcheck]");

}  // namespace
