// Every nn case of the gradcheck registry, one test each.
#include "tapegrad/nn/gradcheck_cases.h"
#include "tests/gradcheck_registration.h"

namespace {
const bool registered = tg::testing::register_gradcheck_tests(tg::nn_gradcheck_cases());
}
