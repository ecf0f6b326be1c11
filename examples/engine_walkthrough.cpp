// One training step of one neuron, y = tanh(x·w + b), with everything the engine does printed:
// the tape the forward recorded (as text, then as a Graphviz graph), the gradients backward() left
// in the leaves, one SGD step.
// docs/engine.md follows this program through the code and quotes its output, which
// tests/docs/test_engine_doc.cpp checks.
#include <cstdio>
#include <iostream>

#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/ops/ops.h"

using namespace tg;

namespace {

void print(const char* name, const Tensor& t) {
  std::printf("%-8s", name);
  for (double v : t.to_host_f64()) std::printf(" %8.4f", v);
  std::printf("\n");
}

}  // namespace

int main() {
  const Tensor x = from_values({1.0, -2.0, 0.5, 0.0, 1.0, -1.0}, {2, 3});  // two inputs: data
  const Tensor target = from_values({1.0, -1.0}, {2, 1});
  const Tensor w = from_values({0.5, -0.25, 1.0}, {3, 1}).requires_grad_();  // the parameters
  const Tensor b = from_values({0.1}, {1}).requires_grad_();

  const Tensor y = tanh(matmul(x, w) + b);  // b, shape [1], is broadcast to [2, 1]
  const Tensor loss = mse_loss(y, target);
  std::cout << format_tape();
  print("loss", loss);
  // The same graph for Graphviz (`dot -Tpng`): ops, the parameters by name, the data, the loss.
  write_tape_dot(std::cout, loss, {{w.impl(), "w"}, {b.impl(), "b"}});

  loss.backward();  // dloss/dw and dloss/db into w.grad and b.grad
  std::cout << format_tape();
  print("w.grad", w.grad());
  print("b.grad", b.grad());

  SGD sgd({w, b}, /*lr=*/0.5);
  sgd.step();  // p -= lr * p.grad, in place
  print("w", w);
  print("b", b);
  print("loss", mse_loss(tanh(matmul(x, w) + b), target));
}
