#pragma once
// Optimizers: SGD (momentum, Nesterov), Adam and AdamW with torch.optim's formulas and defaults,
// and clip_grad_norm (torch.nn.utils.clip_grad_norm_).
//
// An optimizer holds handles to its parameters (contiguous f32/f64 leaves that require grad)
// and updates their values in place under NoGrad. It never writes into a gradient: gradients may
// be shared with other tensors. Parameters whose grad is undefined are skipped, as in PyTorch.
// A parameter converted in place after its state was made (Module::to(f64), to(device)) keeps its
// state: step() converts each buffer to the parameter's dtype and device first, as torch.optim
// casts state to its parameter's (a buffer of another shape is a tg::Error).
//
// State for checkpoints: state() lists the step count and every per-parameter buffer as named
// tensors, "step", "0.momentum_buffer", "1.exp_avg", "1.exp_avg_sq", "1.step", ... (the number is
// the parameter's index in the list the optimizer was built with); load_state() takes the same.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient; counts the step.
  void step();
  // Sets every parameter's grad to undefined (PyTorch's zero_grad(set_to_none=True)).
  void zero_grad();

  const char* name() const { return name_; }  // "SGD", "Adam", "AdamW"
  double lr() const { return lr_; }
  void set_lr(double lr);
  int64_t step_count() const { return step_count_; }  // step() calls so far
  const std::vector<Tensor>& params() const { return params_; }

  // The live state (not copies: the next step() changes the buffers), "step" first, then each
  // parameter's buffers in parameter order.
  std::vector<std::pair<std::string, Tensor>> state() const;
  // Replaces the whole state with one from state(). Everything is checked before anything changes:
  // names, shapes and dtypes must fit these parameters; buffers are copied in.
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state);

 protected:
  Optimizer(const char* name, std::vector<Tensor> params, double lr);

  // Updates `param` in place from `grad` (contiguous, same shape and dtype); runs under NoGrad.
  virtual void update(size_t index, const Tensor& param, const Tensor& grad) = 0;
  // The names of the buffers one parameter's state holds once it has any (all or none of them).
  // "step" is an i64 scalar; every other buffer has the parameter's shape and dtype.
  virtual std::vector<std::string> state_names() const = 0;

  bool has_state(size_t index) const { return !param_states_[index].empty(); }
  Tensor& state_at(size_t index, const std::string& name) { return param_states_[index][name]; }

  const char* name_;  // "SGD", "Adam", "AdamW": for error messages

 private:
  std::vector<Tensor> params_;
  std::vector<std::map<std::string, Tensor>> param_states_;  // one map per parameter
  double lr_;
  int64_t step_count_ = 0;
};

// torch.optim.SGD:
//   g = grad + weight_decay * p
//   buf = g on the first step, then momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf          (when momentum != 0)
//   p -= lr * g
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, double momentum = 0.0, double weight_decay = 0.0,
      double dampening = 0.0, bool nesterov = false);

 protected:
  void update(size_t index, const Tensor& param, const Tensor& grad) override;
  std::vector<std::string> state_names() const override;

 private:
  double momentum_, weight_decay_, dampening_;
  bool nesterov_;
};

// torch.optim.Adam (weight decay as L2: added to the gradient), per parameter with its own step t:
//   g = grad + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g            v = beta2 * v + (1 - beta2) * g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr = 1e-3, std::pair<double, double> betas = {0.9, 0.999},
       double eps = 1e-8, double weight_decay = 0.0);

 protected:
  Adam(const char* name, std::vector<Tensor> params, double lr, std::pair<double, double> betas,
       double eps, double weight_decay, bool decoupled_weight_decay);
  void update(size_t index, const Tensor& param, const Tensor& grad) override;
  std::vector<std::string> state_names() const override;

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool decoupled_weight_decay_;  // AdamW: p -= lr * weight_decay * p before the Adam update
};

// torch.optim.AdamW: Adam with decoupled weight decay, p *= 1 - lr * weight_decay, then the Adam
// update without any L2 term in the gradient.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr = 1e-3,
        std::pair<double, double> betas = {0.9, 0.999}, double eps = 1e-8,
        double weight_decay = 1e-2);
};

// The scalar of `dtype` on `device` among `per_device`, a zero one added when missing: one
// accumulator a device for a sum over parameters that may live on several devices.
Tensor& accumulator_on(std::vector<Tensor>& per_device, Device device, DType dtype);

// The L2 norm of all gradients together, computed in f64 (one accumulator a device, read back
// once); parameters without a grad are skipped. Inf or NaN in a gradient gives an inf or NaN norm.
double grad_norm(const std::vector<Tensor>& params);

// torch.nn.utils.clip_grad_norm_ (L2): the norm of all gradients together (grad_norm).
// When max_norm / (norm + 1e-6) < 1, each gradient is replaced (set_grad, never written in place)
// by a new tensor scaled by that factor. Parameters without a grad are skipped. Returns the norm
// before clipping. A non-finite norm is no error (PyTorch's default): the gradients are multiplied
// by the factor it gives (0 for inf, NaN for NaN). `known_norm`: grad_norm(params), when the caller
// has it already (it is not computed again).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm,
                      std::optional<double> known_norm = std::nullopt);

}  // namespace tg
