// A first program: a small multi-layer perceptron, 1 -> 16 -> 16 -> 1 with tanh between the
// layers, learns y = sin(x) on [-3, 3] with Adam. It prints the loss as it falls and exits 1
// unless the mean squared error ends below 0.001 (it starts near 0.5).
#include <tapegrad/tapegrad.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

// The model as a Module: its layers are registered children, so parameters() finds their weights;
// naming itself in ModuleOf<MLP> makes model(x) call forward(x), as in Python.
struct MLP : tg::nn::ModuleOf<MLP> {
  using Linear = tg::nn::Linear;
  std::shared_ptr<Linear> hidden1 = register_module("hidden1", std::make_shared<Linear>(1, 16));
  std::shared_ptr<Linear> hidden2 = register_module("hidden2", std::make_shared<Linear>(16, 16));
  std::shared_ptr<Linear> output = register_module("output", std::make_shared<Linear>(16, 1));

  tg::Tensor forward(const tg::Tensor& x) const {
    return output->forward(tg::tanh(hidden2->forward(tg::tanh(hidden1->forward(x)))));
  }
};

int main() {
  tg::manual_seed(0);  // the same weights and points, hence the same losses, on every run
  // The data: 64 points x uniform in [-3, 3), as a column [64, 1], and their targets sin(x).
  const tg::Tensor x = tg::uniform({64, 1}, -3.0, 3.0);
  std::vector<double> sines;
  for (double value : x.to_host_f64()) sines.push_back(std::sin(value));
  const tg::Tensor y = tg::from_values(sines, {64, 1});

  MLP model;
  tg::Adam optimizer(model.parameters(), /*lr=*/0.01);
  double loss = 0;
  for (int step = 1; step <= 1000; ++step) {
    optimizer.zero_grad();
    tg::Tensor mse = tg::mse_loss(model(x), y);  // recorded on the tape
    mse.backward();                                     // d mse / d every weight, into .grad
    optimizer.step();                                   // each weight moves against its gradient
    loss = mse.item();
    if (step == 1 || step % 200 == 0) std::printf("step %4d  loss %.6f\n", step, loss);
  }
  const double wanted = 0.001;
  std::printf("%s: final loss %.6f %s %g\n", loss < wanted ? "ok" : "FAILED", loss,
              loss < wanted ? "<" : ">=", wanted);
  return loss < wanted ? 0 : 1;
}
