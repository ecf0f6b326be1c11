#include <catch2/catch.hpp>
#include "ops/gradcheck_cases.h"
TEST_CASE("TMP layer gradcheck", "[tmp_layer_gc]") {
  for (const auto& c : tg::layer_ops_gradcheck_cases()) {
    const auto r = c.run();
    INFO(c.name << " " << c.shapes << ": " << r.message << " compared " << r.compared << " maxabs " << r.max_abs_err);
    CHECK(r.passed);
    CHECK(r.compared > 0);
  }
}
