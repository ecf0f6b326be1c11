// A new differentiable op written outside the library: softplus(x) = log(1 + e^x), a smooth relu.
// Its forward computes with the library's ops, untaped; its backward goes to the tape through
// tg::record(), under a name registered with tg::OpRegistration. tg::gradcheck then holds the
// backward to finite differences in f64. Exits 1 if a value or a gradient is wrong.
// (docs/adding-an-op.md adds an op to the library itself, with its kernels and tests.)
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>
#include <vector>

namespace {

// record() takes only registered names: this registers "softplus" before main() runs.
const tg::OpRegistration softplus_op({"softplus"});

tg::Tensor softplus(const tg::Tensor& x) {
  tg::Tensor out;
  {
    const tg::NoGrad untaped;  // the forward's exp, add and log are not nodes of their own
    out = tg::log(tg::exp(x) + 1.0);
  }
  // d softplus(x)/dx = e^x / (1 + e^x) = sigmoid(x)
  tg::record("softplus", /*inputs=*/{x}, out, /*saved=*/{x},
             [](const tg::Tensor& grad_out, const tg::Node& node) {
               return tg::Grads{grad_out * tg::sigmoid(node.saved[0])};
             });
  return out;
}

}  // namespace

int main() {
  bool ok = true;

  // The values, against the formula computed in double by the C library.
  const std::vector<double> points = {-3, -0.5, 0, 0.5, 3};
  const tg::Tensor x = tg::from_values(points, {5}, tg::DType::f64);
  const std::vector<double> values = softplus(x).to_host_f64();
  for (size_t i = 0; i < points.size(); ++i) {
    const double expected = std::log1p(std::exp(points[i]));
    std::printf("softplus(%+.1f) = %.6f (expected %.6f)\n", points[i], values[i], expected);
    ok = ok && std::fabs(values[i] - expected) < 1e-12;
  }

  // The gradient: softplus(a) * b on two f64 leaves, every element perturbed by +-eps, so the
  // chain rule through the library's mul is checked along with softplus's backward.
  tg::manual_seed(0);
  const std::vector<tg::Tensor> leaves = {tg::random_leaf({3, 4}, -3.0, 3.0),
                                          tg::random_leaf({3, 4})};
  const tg::GradcheckResult result = tg::gradcheck(
      [](const std::vector<tg::Tensor>& in) { return softplus(in[0]) * in[1]; }, leaves);
  std::printf("gradcheck: %lld Jacobian entries compared, max abs err %.2e: %s\n",
              static_cast<long long>(result.compared), result.max_abs_err,
              result.passed ? "passed" : result.message.c_str());
  ok = ok && result.passed && result.compared > 0;

  // One node on the tape, under the registered name.
  const tg::Tensor y = softplus(leaves[0]);
  ok = ok && y.grad_fn() != nullptr && y.grad_fn()->op == "softplus";
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
