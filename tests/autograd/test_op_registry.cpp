// The op registry: record() takes only registered, differentiable names; a name registered again
// must keep its gradient kind; the library's own ops are all there with the kinds they declare.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/op_registry.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

// The registered gradient kind of `name`, or nothing.
std::optional<OpGradient> registered_gradient_of(const std::string& name) {
  for (const RegisteredOp& op : registered_ops()) {
    if (op.name == name) return op.gradient;
  }
  return std::nullopt;
}

// record() as an op calls it: `name` recorded for y = 2x, with the derivative's backward.
Tensor record_doubling_as(const char* name, const Tensor& x) {
  Tensor out;
  {
    const NoGrad untaped;  // the forward's own ops are not the node
    out = x * 2.0;
  }
  // d(2x)/dx = 2
  record(name, {x}, out, {}, [](const Tensor& g, const Node&) { return Grads{g * 2.0}; });
  return out;
}

}  // namespace

TEST_CASE("op registry: record() refuses a name nobody registered, before building a node",
          "[op_registry]") {
  const Tensor x = from_values({1, 2}, {2}, DType::f64).requires_grad_();
  REQUIRE_THROWS_WITH(record_doubling_as("no_such_op", x),
                      "op 'no_such_op' records onto the tape but its name is not registered "
                      "(tg::OpRegistration, autograd/op_registry.h)");
  // Without an input that requires grad nothing is recorded, so nothing is asked.
  const Tensor constant = from_values({1, 2}, {2}, DType::f64);
  REQUIRE_FALSE(record_doubling_as("no_such_op", constant).requires_grad());
}

TEST_CASE("op registry: a registered name records, and its backward runs", "[op_registry]") {
  const Tensor x = from_values({1, -3}, {2}, DType::f64).requires_grad_();
  const Tensor y = record_doubling_as("mul_scalar", x);  // the library's name for x * c
  REQUIRE(y.grad_fn() != nullptr);
  REQUIRE(y.grad_fn()->op == "mul_scalar");
  sum(y).backward();
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{2, 2});
}

TEST_CASE("op registry: record() refuses every name registered as not differentiable",
          "[op_registry]") {
  const Tensor x = from_values({1, 2}, {2}, DType::f64).requires_grad_();
  std::vector<std::string> refused;
  for (const RegisteredOp& op : registered_ops()) {
    if (op.gradient != OpGradient::none) continue;
    INFO("op " << op.name);
    REQUIRE_THROWS_WITH(record_doubling_as(op.name.c_str(), x),
                        "op '" + op.name +
                            "' is registered as not differentiable, yet records a backward onto "
                            "the tape");
    refused.push_back(op.name);
  }
  // The library's own: argsort and equal (ops/), the int8 ops (ops/quantize.cpp).
  for (const char* name : {"argsort", "equal", "quantized_linear"}) {
    INFO("op " << name);
    REQUIRE(std::find(refused.begin(), refused.end(), name) != refused.end());
  }
  // And the ops themselves give outputs that carry no gradient.
  const Tensor values = from_values({3, 1, 2}, {3}, DType::f64).requires_grad_();
  REQUIRE_FALSE(argsort(values).requires_grad());
  REQUIRE_FALSE(equal(values, values).requires_grad());
}

TEST_CASE("op registry: the library registers its ops with the kinds they declare",
          "[op_registry]") {
  REQUIRE(registered_gradient_of("add") == OpGradient::checked);
  REQUIRE(registered_gradient_of("scaled_dot_product_attention") == OpGradient::checked);
  REQUIRE(registered_gradient_of("checkpoint") == OpGradient::checked);  // autograd/'s one op
  REQUIRE(registered_gradient_of("to_device") == OpGradient::between_devices);
  REQUIRE(registered_gradient_of("argsort") == OpGradient::none);
  REQUIRE_FALSE(registered_gradient_of("no_such_op").has_value());
  const std::vector<RegisteredOp> ops = registered_ops();
  const auto by_name = [](const RegisteredOp& a, const RegisteredOp& b) { return a.name < b.name; };
  REQUIRE(std::is_sorted(ops.begin(), ops.end(), by_name));
}

TEST_CASE("op registry: a name registered again keeps its kind, or is a tg::Error",
          "[op_registry]") {
  REQUIRE_NOTHROW(OpRegistration({"add"}));  // the same kind: nothing changes
  REQUIRE_THROWS_WITH(OpRegistration({"add"}, OpGradient::none),
                      "op registry: op 'add' registered twice, with gradient 'checked' and 'none'");
  REQUIRE(registered_gradient_of("add") == OpGradient::checked);
  REQUIRE(op_gradient_name(OpGradient::between_devices) == std::string("between_devices"));
}
