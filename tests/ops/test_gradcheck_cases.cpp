// Every op case of the gradcheck registry, one test each.
#include "tapegrad/ops/gradcheck_cases.h"
#include "tests/gradcheck_registration.h"

namespace {
const bool registered = tg::testing::register_gradcheck_tests(tg::ops_gradcheck_cases());
}
