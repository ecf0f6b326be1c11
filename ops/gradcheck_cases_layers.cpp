// Gradcheck cases for the layer ops: softmax, masks, dropout, embedding, layer_norm and losses.
// Each case builds f64 leaves and a function of them; the registry runs them in tests and in
// `tapegrad gradcheck`.
#include <limits>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/ops/gradcheck_cases.h"
#include "tapegrad/ops/ops.h"

namespace tg {
namespace {

using Inputs = std::vector<Tensor>;

// A case on random f64 leaves of the given shapes, uniform in [-1, 1).
GradcheckCase on_leaves(std::string name, std::vector<Shape> shapes, GradcheckFn fn) {
  std::string text;
  for (const Shape& shape : shapes) text += (text.empty() ? "" : ", ") + shape_str(shape);
  return make_case(std::move(name), text, [=] {
    Inputs inputs;
    for (const Shape& shape : shapes) inputs.push_back(random_leaf(shape));
    return inputs;
  }, std::move(fn));
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

std::vector<GradcheckCase> layer_ops_gradcheck_cases() {
  std::vector<GradcheckCase> cases;
  auto add_case = [&](GradcheckCase c) { cases.push_back(std::move(c)); };

  // Softmax family.
  add_case(on_leaves("softmax/dim-last", {{3, 4}}, [](const Inputs& x) { return softmax(x[0], -1); }));
  add_case(on_leaves("softmax/dim0", {{3, 4}}, [](const Inputs& x) { return softmax(x[0], 0); }));
  add_case(on_leaves("softmax/middle-dim", {{2, 3, 4}}, [](const Inputs& x) { return softmax(x[0], 1); }));
  // Row 1 is all -inf: its output is 0 and so is its gradient (never NaN).
  add_case(on_leaves("softmax/fully-masked-row", {{3, 4}}, [](const Inputs& x) {
    const Tensor mask = from_bools({false, true, false}, {3, 1});
    return softmax(masked_fill(x[0], mask, -kInf), -1);
  }));
  add_case(on_leaves("log_softmax/dim-last", {{3, 4}}, [](const Inputs& x) { return log_softmax(x[0], -1); }));
  add_case(on_leaves("log_softmax/dim0", {{2, 3, 4}}, [](const Inputs& x) { return log_softmax(x[0], 0); }));

  // Masks, broadcasting.
  add_case(on_leaves("where/broadcast-mask", {{3, 4}, {4}}, [](const Inputs& x) {
    const Tensor condition = from_bools({true, false, true}, {3, 1});
    return where(condition, x[0], x[1]);
  }));
  add_case(on_leaves("masked_fill/broadcast-mask", {{2, 3, 4}}, [](const Inputs& x) {
    const Tensor mask = from_bools({true, false, false, true}, {4});
    return masked_fill(x[0], mask, 0.5) * x[0];
  }));
  // triu and tril record where's node: the gradient passes where they keep x.
  add_case(on_leaves("triu/batched-diagonal-1", {{2, 3, 4}}, [](const Inputs& x) { return triu(x[0], 1) * x[0]; }));
  add_case(on_leaves("tril/diagonal-minus-1", {{4, 3}}, [](const Inputs& x) { return tril(x[0], -1) * x[0]; }));

  // Dropout: every evaluation resets the generator, so the mask is the same each time.
  add_case(on_leaves("dropout/training-p0.3", {{4, 5}}, [](const Inputs& x) {
    set_rng_state({.seed = 7, .offset = 3});
    return dropout(x[0], 0.3, /*training=*/true);
  }));

  // Embedding: indices 0 and 2 repeat, so their weight rows get summed gradients.
  add_case(on_leaves("embedding/repeated-indices", {{5, 3}}, [](const Inputs& x) {
    const Tensor indices = from_indices({0, 2, 0, 4, 2, 2}, {2, 3});
    return embedding(indices, x[0]) * embedding(indices, x[0]);
  }));

  // Layer norm over the last dim and over the last two, with and without weight and bias.
  add_case(on_leaves("layer_norm/last-dim-affine", {{3, 4}, {4}, {4}},
                     [](const Inputs& x) { return layer_norm(x[0], {4}, x[1], x[2]); }));
  add_case(on_leaves("layer_norm/last-dim-plain", {{3, 4}},
                     [](const Inputs& x) { return layer_norm(x[0], {4}); }));
  add_case(on_leaves("layer_norm/last-two-dims-affine", {{2, 3, 4}, {3, 4}, {3, 4}},
                     [](const Inputs& x) { return layer_norm(x[0], {3, 4}, x[1], x[2]); }));
  add_case(on_leaves("layer_norm/last-two-dims-plain", {{2, 3, 4}},
                     [](const Inputs& x) { return layer_norm(x[0], {3, 4}); }));
  add_case(on_leaves("layer_norm/weight-only", {{3, 4}, {4}},
                     [](const Inputs& x) { return layer_norm(x[0], {4}, x[1], Tensor()); }));

  // Losses.
  add_case(on_leaves("cross_entropy/plain", {{4, 5}}, [](const Inputs& x) {
    return cross_entropy(x[0], from_indices({1, 0, 4, 1}, {4}));
  }));
  add_case(on_leaves("cross_entropy/sequence-ignore-index", {{2, 3, 5}}, [](const Inputs& x) {
    return cross_entropy(x[0], from_indices({1, -100, 4, 0, 2, -100}, {2, 3}), -100);
  }));
  add_case(on_leaves("nll_loss/ignore-index", {{4, 3}}, [](const Inputs& x) {
    return nll_loss(x[0], from_indices({2, 1, 1, 0}, {4}), /*ignore_index=*/1);
  }));
  add_case(on_leaves("mse_loss", {{3, 4}, {3, 4}}, [](const Inputs& x) { return mse_loss(x[0], x[1]); }));
  return cases;
}

}  // namespace tg
