// Uses an installed tapegrad: checks a gradient, fits y = 3x - 1 with a Linear layer and Adam, and
// asks for the CUDA device. Prints what it finds; exits 1 when anything is not as expected.
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>
#include <string>

int main() {
  tg::Tensor x = tg::from_values({1.0, -2.0, 0.5}, {3});
  x.requires_grad_();
  tg::sum(tg::mul(x, x)).backward();  // d/dx sum(x * x) = 2x
  const std::vector<double> grad = x.grad().to_host_f64();
  bool ok = grad == std::vector<double>{2.0, -4.0, 1.0};
  std::printf("gradient of sum(x*x) at (1, -2, 0.5): (%g, %g, %g)\n", grad[0], grad[1], grad[2]);

  tg::nn::Linear layer(1, 1);
  tg::Adam optimizer(layer.parameters(), 0.1);
  const tg::Tensor inputs = tg::from_values({-1, 0, 1, 2}, {4, 1});
  const tg::Tensor targets = tg::from_values({-4, -1, 2, 5}, {4, 1});
  double loss = 0;
  for (int step = 0; step < 500; ++step) {
    optimizer.zero_grad();
    tg::Tensor batch_loss = tg::mse_loss(layer.forward(inputs), targets);
    batch_loss.backward();
    optimizer.step();
    loss = batch_loss.item();
  }
  const double weight = layer.weight.item(), bias = layer.bias.item();
  std::printf("fitted y = %.4f x %+.4f (loss %.2e)\n", weight, bias, loss);
  ok = ok && std::fabs(weight - 3) < 1e-2 && std::fabs(bias + 1) < 1e-2;

  // With CUDA built in, the backend is there: a GPU runs this, a machine without one says
  // "no CUDA device"; without CUDA the error says "built without CUDA".
  try {
    const tg::Tensor ones = tg::ones({4}, tg::DType::f32, tg::parse_device("cuda"));
    std::printf("cuda: sum of 4 ones = %g\n", tg::sum(ones).item());
    ok = ok && TAPEGRAD_WITH_CUDA;
  } catch (const tg::Error& error) {
    std::printf("cuda: %s\n", error.what());
    const char* expected = TAPEGRAD_WITH_CUDA ? "no CUDA device" : "built without CUDA";
    ok = ok && std::string(error.what()).find(expected) != std::string::npos;
  }
  std::printf("%s\n", ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}
