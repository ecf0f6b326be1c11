// Gradcheck cases for the tensor ops: elementwise, reductions, views, indexing, matmul and
// linear.
// Each case builds f64 leaves and a function of them; the registry runs them in tests and in
// `tapegrad gradcheck`.
#include "tapegrad/ops/gradcheck_cases.h"

#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/ops/ops.h"

namespace tg {
namespace {

using Inputs = std::vector<Tensor>;

// A case on random leaves of the given shapes, uniform in [low, high).
GradcheckCase on_leaves(std::string name, std::vector<Shape> shapes, GradcheckFn fn,
                        double low = -1.0, double high = 1.0) {
  std::string text;
  for (const Shape& shape : shapes) text += (text.empty() ? "" : ", ") + shape_str(shape);
  return make_case(std::move(name), text, [=] {
    Inputs inputs;
    for (const Shape& shape : shapes) inputs.push_back(random_leaf(shape, low, high));
    return inputs;
  }, std::move(fn));
}

// A case on one leaf of the given values: for an op with kinks, whose points must stay off them.
GradcheckCase on_values(std::string name, std::vector<double> values, Shape shape,
                        GradcheckFn fn) {
  return make_case(std::move(name), shape_str(shape), [=] {
    return Inputs{from_values(values, shape, DType::f64).requires_grad_()};
  }, std::move(fn));
}

// A leaf that is a non-contiguous view: the transpose of a random [cols, rows] tensor.
Tensor transposed_leaf(int64_t rows, int64_t cols) {
  return uniform({cols, rows}, -1, 1, DType::f64).transpose(0, 1).detach().requires_grad_();
}

// Indexing along a dim (random values never tie, so the sorting order is the same at x +- eps).
std::vector<GradcheckCase> indexing_gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  auto add_case = [&](GradcheckCase c) { cases.push_back(std::move(c)); };
  add_case(on_leaves("sort/dim-last", {{3, 5}},
                     [](const Inputs& x) { return sort(x[0], -1).values; }));
  add_case(on_leaves("sort/dim0-descending", {{4, 3}},
                     [](const Inputs& x) { return sort(x[0], 0, true).values; }));
  add_case(on_leaves("gather/smaller-index-repeats", {{3, 5}}, [](const Inputs& x) {
    return gather(x[0], 1, from_indices({4, 0, 4, 1, 2, 2, 3, 0}, {2, 4}));
  }));
  add_case(on_leaves("gather/expanded-index", {{2, 5, 3}}, [](const Inputs& x) {
    const Tensor rows = from_indices({4, 1, 1, 0, 3, 3}, {2, 3, 1});
    return gather(x[0], 1, expand_untaped(rows, {2, 3, 3}));
  }));
  add_case(on_leaves("scatter_add/dim0-repeats-smaller-index", {{3, 4}, {2, 5}},
                     [](const Inputs& x) {
                       const Tensor index = from_indices({0, 1, 2, 0, 2, 2, 0, 1}, {2, 4});
                       return scatter_add(x[0], 0, index, x[1]);
                     }));
  add_case(on_leaves("scatter_add/dim-last", {{2, 3}, {2, 4}}, [](const Inputs& x) {
    return scatter_add(x[0], -1, from_indices({2, 2, 0, 1, 1, 0, 0, 0}, {2, 4}), x[1]) * x[0];
  }));
  add_case(on_leaves("index_select/dim1-repeats", {{3, 4}}, [](const Inputs& x) {
    return index_select(x[0], 1, from_indices({3, 0, 3}, {3}));
  }));
  add_case(on_leaves("sort-then-unsort/argsort-gather", {{2, 6}, {2, 6}}, [](const Inputs& x) {
    const Tensor order = argsort(x[0], 1);  // x[1] reordered by x[0]'s order, then put back
    const Tensor sorted = gather(x[1] * x[0], 1, order);
    return scatter_add(zeros({2, 6}, DType::f64), 1, order, sorted * 2.0);
  }));
  return cases;
}

}  // namespace

std::vector<GradcheckCase> tensor_ops_gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  auto add_case = [&](GradcheckCase c) { cases.push_back(std::move(c)); };

  // Elementwise binary, with broadcasting.
  add_case(on_leaves("add/broadcast", {{2, 3}, {3}}, [](const Inputs& x) { return x[0] + x[1]; }));
  add_case(on_leaves("add/broadcast-both", {{2, 1}, {1, 3}}, [](const Inputs& x) { return x[0] + x[1]; }));
  add_case(on_leaves("sub/broadcast", {{4}, {2, 3, 4}}, [](const Inputs& x) { return x[0] - x[1]; }));
  add_case(on_leaves("mul/same-shape", {{2, 3}, {2, 3}}, [](const Inputs& x) { return x[0] * x[1]; }));
  add_case(on_leaves("mul/scalar-tensor", {{2, 3}, {}}, [](const Inputs& x) { return x[0] * x[1]; }));
  add_case(on_leaves("div/broadcast", {{2, 3}, {2, 1}},
                     [](const Inputs& x) { return x[0] / x[1]; }, 0.5, 2.0));
  add_case(on_leaves("scalar-ops", {{3, 2}}, [](const Inputs& x) { return (x[0] * 3.0 + 1.0) / 2.0 - 4.0; }));
  // Elementwise unary.
  add_case(on_leaves("neg", {{5}}, [](const Inputs& x) { return -x[0]; }));
  add_case(on_leaves("pow/square", {{2, 3}}, [](const Inputs& x) { return pow(x[0], 2.0); }));
  add_case(on_leaves("pow/fractional", {{2, 3}}, [](const Inputs& x) { return pow(x[0], 1.5); }, 0.5, 2.0));
  add_case(on_leaves("exp", {{2, 3}}, [](const Inputs& x) { return exp(x[0]); }));
  add_case(on_leaves("log", {{2, 3}}, [](const Inputs& x) { return log(x[0]); }, 0.5, 2.0));
  add_case(on_leaves("sqrt", {{2, 3}}, [](const Inputs& x) { return sqrt(x[0]); }, 0.5, 2.0));
  add_case(on_leaves("tanh", {{2, 3}}, [](const Inputs& x) { return tanh(x[0]); }, -2.0, 2.0));
  add_case(on_leaves("sigmoid", {{2, 3}}, [](const Inputs& x) { return sigmoid(x[0]); }, -3.0, 3.0));
  add_case(on_leaves("relu", {{3, 4}}, [](const Inputs& x) { return relu(x[0]); }));
  add_case(on_leaves("gelu", {{3, 4}}, [](const Inputs& x) { return gelu(x[0]); }, -3.0, 3.0));
  add_case(on_leaves("sin", {{2, 3}}, [](const Inputs& x) { return sin(x[0]); }, -3.0, 3.0));
  add_case(on_leaves("cos", {{2, 3}}, [](const Inputs& x) { return cos(x[0]); }, -3.0, 3.0));
  // abs and clamp have kinks (at 0, at the bounds) where a central difference straddling one
  // is not the gradient: these points stay at least 0.1 off them (tests/ops/test_elementwise.cpp
  // checks the gradient at the kinks by hand).
  add_case(on_values("abs/both-signs", {-1.5, -0.4, -0.1, 0.1, 0.7, 2.0}, {2, 3},
                     [](const Inputs& x) { return abs(x[0]); }));
  add_case(on_values("clamp/both-bounds", {-1.3, -0.6, -0.2, 0.3, 0.6, 1.7}, {2, 3},
                     [](const Inputs& x) { return clamp(x[0], -0.5, 0.5); }));
  add_case(on_values("clamp_min", {-1.3, -0.6, -0.2, 0.3, 0.6, 1.7}, {2, 3},
                     [](const Inputs& x) { return clamp_min(x[0], 0.1); }));
  add_case(on_values("clamp_max", {-1.3, -0.6, -0.2, 0.3, 0.6, 1.7}, {2, 3},
                     [](const Inputs& x) { return clamp_max(x[0], 0.1); }));
  add_case(on_leaves("input-used-twice", {{2, 3}},
                     [](const Inputs& x) { return x[0] * x[0] + tanh(x[0]); }));
  add_case(make_case("non-contiguous/transposed-input", "[3, 4]^T",
                     [] { return Inputs{transposed_leaf(3, 4)}; },
                     [](const Inputs& x) { return exp(x[0]) * x[0]; }));

  // Reductions.
  add_case(on_leaves("sum/all", {{2, 3, 4}}, [](const Inputs& x) { return sum(x[0]); }));
  add_case(on_leaves("sum/dims-keepdim", {{2, 3, 4}}, [](const Inputs& x) { return sum(x[0], {0, 2}, true); }));
  add_case(on_leaves("sum/negative-dim", {{2, 3, 4}}, [](const Inputs& x) { return sum(x[0], {-1}); }));
  add_case(on_leaves("mean/all", {{3, 4}}, [](const Inputs& x) { return mean(x[0]); }));
  add_case(on_leaves("mean/dim", {{3, 4}}, [](const Inputs& x) { return mean(x[0], {1}, true); }));
  add_case(on_leaves("max/dim", {{3, 5}}, [](const Inputs& x) { return max(x[0], 1).values; }));
  add_case(on_leaves("max/dim0-keepdim", {{4, 3}}, [](const Inputs& x) { return max(x[0], 0, true).values; }));
  add_case(on_leaves("max/all", {{3, 4}}, [](const Inputs& x) { return max(x[0]); }));

  // Views and copies.
  add_case(on_leaves("view-reshape", {{2, 6}}, [](const Inputs& x) { return x[0].view({3, 4}).transpose(0, 1).reshape({12}) * 2.0; }));
  add_case(on_leaves("permute", {{2, 3, 4}}, [](const Inputs& x) { return x[0].permute({2, 0, 1}) * 1.5; }));
  add_case(on_leaves("narrow", {{4, 5}}, [](const Inputs& x) { return exp(x[0].narrow(1, 1, 3)); }));
  // x[:, -6::2] of 7 columns: columns 1, 3, 5; then rows 2::2 of that.
  add_case(on_leaves("slice/step2-negative-start", {{4, 7}}, [](const Inputs& x) {
    return exp(x[0].slice(1, -6, INT64_MAX, 2).slice(0, 2, 4, 2));
  }));
  add_case(on_leaves("select/negative-index", {{3, 4}}, [](const Inputs& x) {
    return x[0].select(1, -1) * x[0].select(0, 2).narrow(0, 0, 3);
  }));
  add_case(on_leaves("expand", {{3, 1}}, [](const Inputs& x) { return x[0].expand({2, 3, 4}) * 1.0; }));
  add_case(on_leaves("squeeze-unsqueeze", {{3, 1, 2}}, [](const Inputs& x) { return x[0].squeeze(1).unsqueeze(0) * 2.0; }));
  add_case(make_case("non-contiguous/sliced-input", "[6, 4][1:5]",
                     [] { return Inputs{random_leaf({6, 4}).detach().narrow(0, 1, 4).requires_grad_()}; },
                     [](const Inputs& x) { return x[0] * x[0]; }));
  add_case(on_leaves("cat", {{2, 3}, {2, 2}}, [](const Inputs& x) { return cat({x[0], x[1]}, 1) * 2.0; }));
  add_case(on_leaves("stack", {{2, 3}, {2, 3}}, [](const Inputs& x) { return stack({x[0], x[1]}, 1) * 2.0; }));
  add_case(on_leaves("clone", {{2, 3}}, [](const Inputs& x) { return x[0].clone() * x[0]; }));
  // On a GPU the round trip through the CPU records to_device twice; on the CPU it is no node.
  add_case(on_leaves("to_device/through-the-cpu", {{2, 3}}, [](const Inputs& x) {
    return (x[0].to(kCPU) * 2.0).to(x[0].device()) * x[0];
  }));
  // Through f32 the function is a staircase at the 1e-7 scale: a wider eps sees the slope.
  add_case(make_case("to-f32-and-back", "[2, 2]", [] { return Inputs{random_leaf({2, 2})}; },
                     [](const Inputs& x) { return x[0].to(DType::f32).to(DType::f64) * 3.0; },
                     GradcheckOptions{.eps = 1e-3, .atol = 1e-3, .rtol = 1e-2}));

  // Recomputed in backward: the gradient of the re-run, not of a recording.
  add_case(on_leaves("checkpoint/two-ops", {{2, 3}, {3}}, [](const Inputs& x) {
    return checkpoint([](const Inputs& in) { return tanh(in[0] * in[1]) * in[0]; }, x);
  }));

  for (GradcheckCase& c : indexing_gradcheck_cases()) add_case(std::move(c));

  // Matrix products.
  add_case(on_leaves("matmul/2d", {{3, 4}, {4, 2}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  add_case(on_leaves("matmul/batched", {{2, 3, 4}, {2, 4, 2}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  add_case(on_leaves("matmul/broadcast-batched", {{2, 1, 3, 4}, {3, 4, 2}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  add_case(on_leaves("matmul/vector", {{4}, {4, 3}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  add_case(on_leaves("matmul/matrix-vector", {{3, 4}, {4}}, [](const Inputs& x) { return matmul(x[0], x[1]); }));
  add_case(make_case("matmul/transposed-operands", "[3, 4]^T @ [2, 3]^T",
                     [] { return Inputs{transposed_leaf(4, 3), transposed_leaf(3, 2)}; },
                     [](const Inputs& x) { return matmul(x[0], x[1]); }));
  add_case(on_leaves("linear/bias", {{5, 4}, {3, 4}, {3}}, [](const Inputs& x) { return linear(x[0], x[1], x[2]); }));
  add_case(on_leaves("linear/3d-input-no-bias", {{2, 3, 4}, {2, 4}}, [](const Inputs& x) { return linear(x[0], x[1]); }));
  add_case(on_leaves("stacked_linear/bias", {{5, 4}, {3, 4}, {2, 4}, {3}, {2}},
                     [](const Inputs& x) { return stacked_linear(x[0], {x[1], x[2]}, {x[3], x[4]}); }));
  add_case(on_leaves("stacked_linear/3d-input-no-bias", {{2, 3, 4}, {2, 4}, {1, 4}, {3, 4}},
                     [](const Inputs& x) { return stacked_linear(x[0], {x[1], x[2], x[3]}); }));
  return cases;
}

std::vector<GradcheckCase> ops_gradcheck_cases() {
  std::vector<GradcheckCase> cases = tensor_ops_gradcheck_cases();
  for (GradcheckCase& c : layer_ops_gradcheck_cases()) cases.push_back(std::move(c));
  return cases;
}

}  // namespace tg
