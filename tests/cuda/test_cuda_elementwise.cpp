// The CUDA elementwise kernels (cuda/elementwise.cu) against their CPU twins on the same
// inputs: every unary and binary op, where, the comparisons and the predicates, in every dtype
// they support, on contiguous,
// transposed, narrowed, permuted and broadcast (expanded) operands.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

const std::vector<DType> kDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

// How close the CUDA result must be to the CPU one. The emulated device runs the same formulas
// through the same C math library as the CPU, so f16/bf16 (rounded from identical f32 values) must
// match exactly. A real GPU's expf/erff/powf differ by an ulp or two (and it fuses multiply-adds),
// which shows as an absolute error where gelu's 1 + erf(x) cancels, and can move a half result by
// one of its own ulps.
struct Tolerance {
  double rtol, atol;
};
Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-12, 1e-14};
#if defined(TAPEGRAD_CUDA_REAL_DEVICE)
    case DType::f32: return {2e-6, 1e-6};
    case DType::f16: return {0x1.0p-10, 1e-7};
    case DType::bf16: return {0x1.0p-7, 1e-7};
#else
    case DType::f32: return {1e-6, 1e-7};
#endif
    default: return {0, 0};
  }
}

// An input as a CPU tensor and the same values on the CUDA device, both seen through one view.
struct Operand {
  Tensor cpu, cuda;
};

// The same strided view of an allocation of shape `base`, on either device.
struct Layout {
  const char* name;
  Shape base;
  std::function<Tensor(const Tensor&)> view;
};

// Random values in [-3, 3): every other one a multiple of 0.25 (so that eq finds equal pairs and
// half types hold them exactly); `specials` adds zeros, infinities and NaN.
Operand make_operand(const Layout& layout, DType dtype, uint32_t seed, bool specials = true) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<double> uniform(-3.0, 3.0);
  std::vector<double> values(numel(layout.base));
  for (size_t i = 0; i < values.size(); ++i) {
    const double u = uniform(random);
    values[i] = i % 2 == 0 ? std::round(u * 4) / 4 : u;
  }
  if (specials && values.size() >= 8) {
    values[1] = 0.0;
    values[3] = -0.0;
    values[5] = std::numeric_limits<double>::infinity();
    values[7] = -std::numeric_limits<double>::infinity();
    values[values.size() - 2] = std::numeric_limits<double>::quiet_NaN();
  }
  const Tensor base = from_values(values, layout.base, dtype);
  return {layout.view(base), layout.view(on_cuda(base))};
}

Tensor same(const Tensor& t) { return t; }

// Layouts of shape [23, 41] (943 elements).
const std::vector<Layout>& layouts_23x41() {
  static const std::vector<Layout> layouts = {
      {"contiguous", {23, 41}, same},
      {"transposed", {41, 23}, [](const Tensor& t) { return t.transpose(0, 1); }},
      {"narrowed", {25, 50}, [](const Tensor& t) { return t.narrow(0, 1, 23).narrow(1, 4, 41); }},
      {"broadcast row", {1, 41}, [](const Tensor& t) { return t.expand({23, 41}); }},
      {"broadcast column", {23, 1}, [](const Tensor& t) { return t.expand({23, 41}); }},
      {"broadcast scalar", {}, [](const Tensor& t) { return t.expand({23, 41}); }},
  };
  return layouts;
}

// Odd shapes: empty, rank 0, one element, a permuted 3-d tensor, a middle-dim broadcast.
const std::vector<Layout>& odd_layouts() {
  static const std::vector<Layout> layouts = {
      {"empty", {0, 5}, same},
      {"scalar", {}, same},
      {"one element", {1}, same},
      {"permuted 3-d", {5, 6, 7}, [](const Tensor& t) { return t.permute({2, 0, 1}); }},
      {"broadcast middle", {7, 1, 6}, [](const Tensor& t) { return t.expand({7, 5, 6}); }},
  };
  return layouts;
}

struct NamedUnary {
  UnaryOp op;
  const char* name;
  double scalar;
};
const std::vector<NamedUnary> kUnaryOps = {
    {UnaryOp::neg, "neg", 0},           {UnaryOp::exp, "exp", 0},
    {UnaryOp::log, "log", 0},           {UnaryOp::sqrt, "sqrt", 0},
    {UnaryOp::tanh, "tanh", 0},         {UnaryOp::sigmoid, "sigmoid", 0},
    {UnaryOp::relu, "relu", 0},         {UnaryOp::gelu, "gelu", 0},
    {UnaryOp::relu_grad, "relu_grad", 0}, {UnaryOp::gelu_grad, "gelu_grad", 0},
    {UnaryOp::pow, "pow", 2.5},         {UnaryOp::pow, "pow", -1.0},
    {UnaryOp::pow, "pow", 2.0},         {UnaryOp::add_scalar, "add_scalar", 0.3},
    {UnaryOp::mul_scalar, "mul_scalar", -1.7}, {UnaryOp::ge_scalar, "ge_scalar", 0.25},
    {UnaryOp::sin, "sin", 0},           {UnaryOp::cos, "cos", 0},
    {UnaryOp::abs, "abs", 0},           {UnaryOp::sign, "sign", 0},
    {UnaryOp::clamp_min, "clamp_min", 0.5}, {UnaryOp::clamp_max, "clamp_max", -0.25},
};

struct NamedBinary {
  BinaryOp op;
  const char* name;
};
const std::vector<NamedBinary> kBinaryOps = {{BinaryOp::add, "add"}, {BinaryOp::sub, "sub"},
                                             {BinaryOp::mul, "mul"}, {BinaryOp::div, "div"},
                                             {BinaryOp::eq, "eq"}};

// Runs unary op on both devices and compares.
void check_unary(const NamedUnary& op, const Operand& x, DType dtype) {
  Tensor expected = empty(x.cpu.shape(), dtype);
  Tensor got = empty(x.cuda.shape(), dtype, kCuda);
  kernels(kCPU).unary(op.op, x.cpu, op.scalar, expected);
  kernels(kCuda).unary(op.op, x.cuda, op.scalar, got);
  require_close(got, expected, tolerance(dtype).rtol, tolerance(dtype).atol);
}

void check_binary(const NamedBinary& op, const Operand& a, const Operand& b, DType dtype) {
  Tensor expected = empty(a.cpu.shape(), dtype);
  Tensor got = empty(a.cuda.shape(), dtype, kCuda);
  kernels(kCPU).binary(op.op, a.cpu, b.cpu, expected);
  kernels(kCuda).binary(op.op, a.cuda, b.cuda, got);
  // +, -, *, / are correctly rounded on every device: exact in every dtype
  require_close(got, expected);
}

// A bool condition of `layout`, on both devices.
Operand make_condition(const Layout& layout, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<bool> values(numel(layout.base));
  for (size_t i = 0; i < values.size(); ++i) values[i] = random() % 2 == 0;
  const Tensor base = from_bools(values, layout.base);
  return {layout.view(base), layout.view(on_cuda(base))};
}

void check_where(const Operand& condition, const Operand& a, const Operand& b, DType dtype) {
  Tensor expected = empty(a.cpu.shape(), dtype);
  Tensor got = empty(a.cuda.shape(), dtype, kCuda);
  kernels(kCPU).where(condition.cpu, a.cpu, b.cpu, expected);
  kernels(kCuda).where(condition.cuda, a.cuda, b.cuda, got);
  require_close(got, expected);
}

}  // namespace

TEST_CASE("cuda unary matches the cpu for every op dtype and layout", "[cuda]") {
  for (DType dtype : kDtypes) {
    for (const NamedUnary& op : kUnaryOps) {
      for (const Layout& layout : layouts_23x41()) {
        INFO(op.name << " " << op.scalar << ", " << dtype_name(dtype) << ", " << layout.name);
        check_unary(op, make_operand(layout, dtype, 1), dtype);
      }
    }
  }
}

TEST_CASE("cuda unary handles empty scalar and permuted tensors", "[cuda]") {
  for (DType dtype : kDtypes) {
    for (const NamedUnary& op : {kUnaryOps[1], kUnaryOps[7], kUnaryOps[10]}) {  // exp, gelu, pow
      for (const Layout& layout : odd_layouts()) {
        INFO(op.name << ", " << dtype_name(dtype) << ", " << layout.name);
        check_unary(op, make_operand(layout, dtype, 2), dtype);
      }
    }
  }
}

TEST_CASE("cuda binary matches the cpu on broadcast and strided operands", "[cuda]") {
  const std::vector<Layout>& layouts = layouts_23x41();
  for (DType dtype : kDtypes) {
    for (const NamedBinary& op : kBinaryOps) {
      for (size_t i = 0; i < layouts.size(); ++i) {
        // a in each layout against b in the next one: every layout on both sides, every pairing
        // of contiguous / strided / broadcast
        for (const Layout* b_layout : {&layouts[i], &layouts[(i + 1) % layouts.size()],
                                       &layouts[(i + 3) % layouts.size()]}) {
          INFO(op.name << ", " << dtype_name(dtype) << ", a " << layouts[i].name << ", b "
                       << b_layout->name);
          check_binary(op, make_operand(layouts[i], dtype, 3), make_operand(*b_layout, dtype, 4),
                       dtype);
        }
      }
      for (const Layout& layout : odd_layouts()) {
        INFO(op.name << ", " << dtype_name(dtype) << ", " << layout.name);
        check_binary(op, make_operand(layout, dtype, 5), make_operand(layout, dtype, 6), dtype);
      }
    }
  }
}

TEST_CASE("cuda binary eq gives one where the values are equal", "[cuda]") {
  for (DType dtype : kDtypes) {
    INFO(dtype_name(dtype));
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const Tensor a = on_cuda(from_values({1.0, 2.0, -0.0, nan, 0.25}, {5}, dtype));
    const Tensor b = on_cuda(from_values({1.0, 2.5, 0.0, nan, 0.25}, {5}, dtype));
    Tensor out = empty({5}, dtype, kCuda);
    kernels(kCuda).binary(BinaryOp::eq, a, b, out);
    REQUIRE(out.to_host_f64() == std::vector<double>{1, 0, 1, 0, 1});
  }
}

TEST_CASE("cuda where picks like the cpu on broadcast and strided operands", "[cuda]") {
  const std::vector<Layout>& layouts = layouts_23x41();
  for (DType dtype : kDtypes) {
    for (size_t i = 0; i < layouts.size(); ++i) {
      const Layout& c_layout = layouts[i];
      const Layout& a_layout = layouts[(i + 1) % layouts.size()];
      const Layout& b_layout = layouts[(i + 2) % layouts.size()];
      INFO(dtype_name(dtype) << ", condition " << c_layout.name << ", a " << a_layout.name
                             << ", b " << b_layout.name);
      check_where(make_condition(c_layout, 7), make_operand(a_layout, dtype, 8),
                  make_operand(b_layout, dtype, 9), dtype);
    }
    for (const Layout& layout : odd_layouts()) {
      INFO(dtype_name(dtype) << ", " << layout.name);
      check_where(make_condition(layout, 10), make_operand(layout, dtype, 11),
                  make_operand(layout, dtype, 12), dtype);
    }
  }
}

TEST_CASE("cuda elementwise kernels reject unsupported dtypes", "[cuda]") {
  const Tensor index = on_cuda(from_indices({1, 2, 3}, {3}));
  Tensor out = empty({3}, DType::i64, kCuda);
  REQUIRE_THROWS_AS(kernels(kCuda).unary(UnaryOp::exp, index, 0, out), tg::Error);
  REQUIRE_THROWS_AS(kernels(kCuda).binary(BinaryOp::add, index, index, out), tg::Error);
  const Tensor values = on_cuda(from_values({1, 2, 3}, {3}));
  const Tensor not_bool = on_cuda(from_values({1, 0, 1}, {3}));
  Tensor float_out = empty({3}, DType::f32, kCuda);
  REQUIRE_THROWS_AS(kernels(kCuda).where(not_bool, values, values, float_out), tg::Error);
}

namespace {

// Every dtype the comparisons, predicates and where take.
const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16,
                                       DType::i64, DType::b8,  DType::i8,  DType::i32};

// make_operand's values (zeros, infinities and NaN among them) in any dtype: integer types get
// them converted (convert's rules: truncated, saturated, NaN 0), bool is value != 0.
Operand make_any_operand(const Layout& layout, DType dtype, uint32_t seed) {
  const Operand f64 = make_operand(layout, DType::f64, seed);
  return {f64.cpu.to(dtype), f64.cuda.to(dtype)};
}

}  // namespace

TEST_CASE("cuda compare matches the cpu for every op dtype and layout", "[cuda]") {
  const std::vector<Layout>& layouts = layouts_23x41();
  const CompareOp ops[] = {CompareOp::eq, CompareOp::ne, CompareOp::lt, CompareOp::le,
                           CompareOp::gt, CompareOp::ge, CompareOp::logical_and,
                           CompareOp::logical_or};
  for (DType dtype : kAllDtypes) {
    for (CompareOp op : ops) {
      for (size_t i = 0; i < layouts.size(); ++i) {
        const Layout& b_layout = layouts[(i + 1) % layouts.size()];
        INFO(static_cast<int>(op) << ", " << dtype_name(dtype) << ", a " << layouts[i].name
                                  << ", b " << b_layout.name);
        const Operand a = make_any_operand(layouts[i], dtype, 13);
        const Operand b = make_any_operand(b_layout, dtype, 14);
        Tensor expected = empty(a.cpu.shape(), DType::b8);
        Tensor got = empty(a.cuda.shape(), DType::b8, kCuda);
        kernels(kCPU).compare(op, a.cpu, b.cpu, expected);
        kernels(kCuda).compare(op, a.cuda, b.cuda, got);
        REQUIRE(got.to_host_i64() == expected.to_host_i64());
      }
    }
  }
}

TEST_CASE("cuda predicates and where on every dtype match the cpu", "[cuda]") {
  const PredicateOp ops[] = {PredicateOp::isnan, PredicateOp::isinf, PredicateOp::logical_not};
  for (DType dtype : kAllDtypes) {
    for (const Layout& layout : layouts_23x41()) {
      INFO(dtype_name(dtype) << ", " << layout.name);
      const Operand x = make_any_operand(layout, dtype, 15);
      for (PredicateOp op : ops) {
        Tensor expected = empty(x.cpu.shape(), DType::b8);
        Tensor got = empty(x.cuda.shape(), DType::b8, kCuda);
        kernels(kCPU).predicate(op, x.cpu, expected);
        kernels(kCuda).predicate(op, x.cuda, got);
        REQUIRE(got.to_host_i64() == expected.to_host_i64());
      }
      const Operand condition = make_condition(layout, 16);
      const Operand other = make_any_operand(layout, dtype, 17);
      Tensor expected = empty(x.cpu.shape(), dtype);
      Tensor got = empty(x.cuda.shape(), dtype, kCuda);
      kernels(kCPU).where(condition.cpu, x.cpu, other.cpu, expected);
      kernels(kCuda).where(condition.cuda, x.cuda, other.cuda, got);
      const std::vector<double> got_values = got.to_host_f64(), expected_values = expected.to_host_f64();
      REQUIRE(got_values.size() == expected_values.size());
      for (size_t i = 0; i < got_values.size(); ++i) {
        const bool both_nan = std::isnan(got_values[i]) && std::isnan(expected_values[i]);
        REQUIRE((both_nan || got_values[i] == expected_values[i]));
      }
    }
  }
}
