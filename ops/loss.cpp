// Losses: nll_loss is one tape node (gather forward, scatter-add backward); cross_entropy and
// mse_loss are compositions of ops.
#include "tapegrad/ops/loss.h"

#include <algorithm>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/mask.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/ops/softmax.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {

namespace {

// nll_loss: floating log_probs [N, C] and i64 targets [N] on one device.
void check_nll_loss_inputs(const Tensor& log_probs, const Tensor& target) {
  TG_CHECK(log_probs.defined() && target.defined(), "op 'nll_loss': undefined tensor");
  TG_CHECK(log_probs.dim() == 2 && is_floating(log_probs.dtype()), "op 'nll_loss': log_probs must ",
           "be a floating [N, C] tensor, got ", dtype_name(log_probs.dtype()), " of shape ",
           shape_str(log_probs.shape()));
  TG_CHECK(target.dtype() == DType::i64, "op 'nll_loss': target must be i64 class indices, got ",
           dtype_name(target.dtype()), " of shape ", shape_str(target.shape()));
  check_same_device("nll_loss", {log_probs, target});
  const int64_t rows = log_probs.size(0);
  TG_CHECK(target.shape() == Shape{rows}, "op 'nll_loss': target of shape ", shape_str(target.shape()),
           " does not match log_probs of shape ", shape_str(log_probs.shape()), " (expected [", rows,
           "])");
}

// cross_entropy: logits [..., C] with at least one class, i64 targets of the leading dims [...].
void check_cross_entropy_inputs(const Tensor& logits, const Tensor& target) {
  TG_CHECK(logits.defined() && target.defined(), "op 'cross_entropy': undefined tensor");
  TG_CHECK(logits.dim() >= 1, "op 'cross_entropy': logits need a class dim, got shape ",
           shape_str(logits.shape()));
  TG_CHECK(target.dtype() == DType::i64, "op 'cross_entropy': target must be i64 class indices, got ",
           dtype_name(target.dtype()), " of shape ", shape_str(target.shape()));
  const Shape leading(logits.shape().begin(), logits.shape().end() - 1);
  TG_CHECK(target.shape() == leading, "op 'cross_entropy': target of shape ",
           shape_str(target.shape()), " does not match logits of shape ", shape_str(logits.shape()),
           " (classes are the last dim, so target should be ", shape_str(leading), ")");
  TG_CHECK(logits.size(-1) > 0, "op 'cross_entropy': logits of shape ", shape_str(logits.shape()),
           " have no classes (the last dim is 0)");
}

// mse_loss: input and target of one shape (no broadcasting).
void check_mse_loss_inputs(const Tensor& input, const Tensor& target) {
  TG_CHECK(input.defined() && target.defined(), "op 'mse_loss': undefined tensor");
  TG_CHECK(input.shape() == target.shape(), "op 'mse_loss': input of shape ", shape_str(input.shape()),
           " and target of shape ", shape_str(target.shape()), " differ (no broadcasting)");
}

}  // namespace

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target, int64_t ignore_index) {
  const Tensor log_probs = autocast_to_f32(log_probs_in);  // losses are f32 under autocast
  check_nll_loss_inputs(log_probs, target);
  const int64_t rows = log_probs.size(0), classes = log_probs.size(1);

  // Ignored rows gather class 0 (always in range) and are then left out by `keep`. The targets'
  // range and count come back to the host (screen_indices: the op's one synchronisation).
  const Device device = log_probs.device();
  const Tensor index = empty({rows}, DType::i64, device);
  const Tensor keep = empty({rows}, DType::b8, device);
  const IndexSummary screened =
      kernels(device).screen_indices(target.contiguous(), ignore_index, index, keep);
  if (screened.kept > 0 && (screened.min < 0 || screened.max >= classes)) {
    const int64_t bad = screened.min < 0 ? screened.min : screened.max;
    fail("op 'nll_loss': target ", bad, " is out of range for ", classes, " classes (valid: [0, ",
         classes, ") or ignore_index ", ignore_index, "; target of shape ",
         shape_str(target.shape()), ")");
  }
  const int64_t count = screened.kept;
  const DimSplit split{rows, classes, 1};

  Tensor picked = empty({rows}, log_probs.dtype(), log_probs.device());
  kernels(log_probs.device()).gather_dim(log_probs.detach().contiguous(), split, index, picked);
  const double scale = -1.0 / static_cast<double>(std::max<int64_t>(count, 1));
  Tensor loss;
  {
    NoGrad no_grad;  // where(), not a product with 0: an ignored -inf must not become NaN
    loss = mul(sum(where(keep, picked, scalar(0, picked.dtype(), picked.device()))), scale);
  }
  // d loss/d log_probs[i, target[i]] = -1 / count for counted rows i, 0 everywhere else
  record("nll_loss", {log_probs, target}, loss, {index, keep},
         [split, scale](const Tensor& g, const Node& n) {
           const Tensor& index = n.saved[0];
           const Tensor zero = scalar(0, g.dtype(), g.device());
           const Tensor row_grads = where(n.saved[1], mul(g, scale), zero);  // [N]
           Tensor grad = zeros({split.outer, split.n}, g.dtype(), g.device());
           kernels(g.device()).scatter_add_dim(row_grads.contiguous(), split, index, grad);
           return Grads{grad, Tensor()};
         });
  return loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index) {
  check_cross_entropy_inputs(logits, target);
  const Tensor log_probs = as_rows(log_softmax(logits, -1));
  return nll_loss(log_probs, target.reshape({-1}), ignore_index);
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in) {
  // f32 under autocast: the squares and their mean
  const Tensor input = autocast_to_f32(input_in), target = autocast_to_f32(target_in);
  check_mse_loss_inputs(input, target);
  const Tensor diff = sub(input, target);
  return mean(mul(diff, diff));
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration loss_ops({"nll_loss"});

}  // namespace tg
