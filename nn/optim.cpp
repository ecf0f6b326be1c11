#include "tapegrad/nn/optim.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"

namespace tg {
namespace {

// "3.exp_avg" -> (3, "exp_avg"); nullopt when the name does not start with digits and a dot.
std::optional<std::pair<size_t, std::string>> split_state_name(const std::string& name) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos || dot == 0 || dot > 18) return std::nullopt;
  for (size_t i = 0; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
  }
  const size_t index = static_cast<size_t>(std::stoull(name.substr(0, dot)));
  return std::make_pair(index, name.substr(dot + 1));
}

// A step count stored as a scalar: i64 (what state() writes) or a float holding a whole number
// (what PyTorch writes).
int64_t read_step(const char* optimizer, const std::string& name, const Tensor& tensor) {
  TG_CHECK(tensor.dim() == 0, optimizer, " load_state: '", name, "' must be a scalar, got shape ",
           shape_str(tensor.shape()));
  if (tensor.dtype() == DType::i64) {
    const int64_t step = tensor.to_host_i64()[0];
    TG_CHECK(step >= 0, optimizer, " load_state: '", name, "' is negative (", step, ")");
    return step;
  }
  TG_CHECK(is_floating(tensor.dtype()), optimizer, " load_state: '", name, "' has dtype ",
           dtype_name(tensor.dtype()), "; a step count is i64 or floating");
  const double step = tensor.item();
  TG_CHECK(step >= 0 && step < 9e15 && step == std::floor(step), optimizer, " load_state: '", name,
           "' = ", step, " is not a non-negative whole number");
  return static_cast<int64_t>(step);
}

// A parameter may change after its state is made: Module::to(f64) and to(device) convert it in
// place, and load_state() may be given buffers saved for another dtype or device. The update
// kernels read a parameter, its grad and its buffers side by side as one dtype, shape and layout,
// so step() reconciles them first. The choice is torch.optim's: as its load_state_dict casts
// state to its parameter's dtype and device, a buffer of the parameter's shape is converted (and
// made contiguous on the parameter's device); a buffer of another shape cannot belong to this
// parameter and is a tg::Error naming both. The i64 "step" count is a host scalar and stays as
// it is.
void check_state_shapes(const char* optimizer, size_t index, const Tensor& param,
                        const std::map<std::string, Tensor>& state) {
  for (const auto& [buffer, tensor] : state) {
    TG_CHECK(buffer == "step" || tensor.shape() == param.shape(), optimizer, ".step: parameter ",
             index, " has shape ", shape_str(param.shape()), " (", dtype_name(param.dtype()),
             ") but its state '", buffer, "' has shape ", shape_str(tensor.shape()), " (",
             dtype_name(tensor.dtype()), "); build a new optimizer for a replaced parameter");
  }
}

void convert_state_to_parameter(const Tensor& param, std::map<std::string, Tensor>& state) {
  for (auto& [buffer, tensor] : state) {
    if (buffer == "step") continue;
    if (tensor.dtype() != param.dtype() || tensor.device() != param.device() ||
        !tensor.is_contiguous()) {
      tensor = tensor.to(param.dtype()).to(param.device()).contiguous();
    }
  }
}

std::string join(const std::vector<std::string>& names) {
  std::string text;
  for (const std::string& name : names) text += (text.empty() ? "" : ", ") + name;
  return text.empty() ? "(none)" : text;
}

}  // namespace

// ---- Optimizer --------------------------------------------------------------------------------

Optimizer::Optimizer(const char* name, std::vector<Tensor> params, double lr)
    : name_(name), params_(std::move(params)), param_states_(params_.size()), lr_(lr) {
  TG_CHECK(lr >= 0, name_, ": invalid learning rate ", lr, " (must be >= 0)");
  TG_CHECK(!params_.empty(), name_, ": got an empty parameter list");
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    TG_CHECK(param.defined(), name_, ": parameter ", i, " is an undefined tensor");
    TG_CHECK(param.is_leaf() && param.requires_grad(), name_, ": parameter ", i,
             " must be a leaf that requires grad");
    TG_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, name_, ": parameter ", i,
             " has dtype ", dtype_name(param.dtype()), "; optimizers update f32 or f64 parameters");
    TG_CHECK(param.is_contiguous(), name_, ": parameter ", i, " of shape ", shape_str(param.shape()),
             " is not contiguous");
    for (size_t j = 0; j < i; ++j) {
      TG_CHECK(!param.same(params_[j]), name_, ": parameters ", j, " and ", i,
               " are the same tensor; pass each parameter once");
    }
  }
}

void Optimizer::step() {
  NoGrad no_grad;
  // Check every parameter and gradient first, so that a bad one leaves all parameters untouched:
  // the constructor's checks again, since a parameter may have been converted in place since.
  std::vector<Tensor> grads(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& param = params_[i];
    Tensor grad = param.grad();
    if (!grad.defined()) continue;  // no gradient this step: skipped, as in PyTorch
    TG_CHECK(param.dtype() == DType::f32 || param.dtype() == DType::f64, name_, ".step: parameter ",
             i, " is now ", dtype_name(param.dtype()), "; optimizers update f32 or f64 parameters");
    TG_CHECK(param.is_contiguous(), name_, ".step: parameter ", i, " of shape ",
             shape_str(param.shape()), " is not contiguous");
    TG_CHECK(grad.shape() == param.shape(), name_, ".step: parameter ", i, " has shape ",
             shape_str(param.shape()), " but its grad has shape ", shape_str(grad.shape()));
    TG_CHECK(grad.dtype() == param.dtype(), name_, ".step: parameter ", i, " is ",
             dtype_name(param.dtype()), " but its grad is ", dtype_name(grad.dtype()));
    TG_CHECK(grad.device() == param.device(), name_, ".step: parameter ", i, " and its grad are on ",
             "different devices");
    check_state_shapes(name_, i, param, param_states_[i]);
    grads[i] = grad.contiguous();  // a copy when the grad is a view (e.g. an expand)
  }
  // The update kernels see only buffers of their parameter's dtype, shape, device and layout.
  for (size_t i = 0; i < params_.size(); ++i) {
    if (grads[i].defined()) convert_state_to_parameter(params_[i], param_states_[i]);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    update(i, params_[i], grads[i]);
    // In-place writes: a graph that saved the old values must not back-propagate now (tape.h).
    params_[i].bump_version();
    for (const auto& [buffer, tensor] : param_states_[i]) tensor.bump_version();
  }
  ++step_count_;
}

void Optimizer::zero_grad() {
  for (const Tensor& param : params_) param.zero_grad();
}

void Optimizer::set_lr(double lr) {
  TG_CHECK(lr >= 0, name_, ".set_lr: invalid learning rate ", lr, " (must be >= 0)");
  lr_ = lr;
}

std::vector<std::pair<std::string, Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, Tensor>> named;
  named.emplace_back("step", from_indices({step_count_}, {}, kCPU));
  for (size_t i = 0; i < param_states_.size(); ++i) {
    for (const auto& [buffer, tensor] : param_states_[i]) {
      named.emplace_back(std::to_string(i) + "." + buffer, tensor);
    }
  }
  return named;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, Tensor>>& state) {
  NoGrad no_grad;
  const std::vector<std::string> expected = state_names();
  std::vector<std::map<std::string, Tensor>> loaded(params_.size());
  std::optional<int64_t> step_count;

  for (const auto& [name, tensor] : state) {
    TG_CHECK(tensor.defined(), name_, " load_state: '", name, "' is an undefined tensor");
    if (name == "step") {
      TG_CHECK(!step_count, name_, " load_state: 'step' appears twice");
      step_count = read_step(name_, name, tensor);
      continue;
    }
    const auto split = split_state_name(name);
    TG_CHECK(split.has_value(), name_, " load_state: unexpected name '", name,
             "' (expected 'step' or '<parameter index>.<buffer>')");
    const auto& [index, buffer] = *split;
    TG_CHECK(index < params_.size(), name_, " load_state: '", name, "' names parameter ", index,
             " but there are only ", params_.size());
    TG_CHECK(std::find(expected.begin(), expected.end(), buffer) != expected.end(), name_,
             " load_state: '", name, "': ", name_, " keeps no buffer '", buffer, "' (it keeps ",
             join(expected), ")");
    TG_CHECK(!loaded[index].count(buffer), name_, " load_state: '", name, "' appears twice");

    if (buffer == "step") {
      loaded[index][buffer] = from_indices({read_step(name_, name, tensor)}, {}, kCPU);
      continue;
    }
    const Tensor& param = params_[index];
    TG_CHECK(tensor.shape() == param.shape(), name_, " load_state: '", name, "' has shape ",
             shape_str(tensor.shape()), " but parameter ", index, " has shape ",
             shape_str(param.shape()));
    TG_CHECK(tensor.dtype() == param.dtype(), name_, " load_state: '", name, "' is ",
             dtype_name(tensor.dtype()), " but parameter ", index, " is ", dtype_name(param.dtype()));
    // Our own copy on the parameter's device (a checkpoint loads on the CPU): step() writes into it.
    loaded[index][buffer] = tensor.device() == param.device() ? tensor.clone()
                                                              : tensor.to(param.device());
  }

  TG_CHECK(step_count.has_value(), name_, " load_state: 'step' is missing");
  for (size_t i = 0; i < loaded.size(); ++i) {
    TG_CHECK(loaded[i].empty() || loaded[i].size() == expected.size(), name_,
             " load_state: parameter ", i, " has only part of its state (needs all of ",
             join(expected), ")");
  }
  param_states_ = std::move(loaded);
  step_count_ = *step_count;
}

// ---- SGD --------------------------------------------------------------------------------------

SGD::SGD(std::vector<Tensor> params, double lr, double momentum, double weight_decay,
         double dampening, bool nesterov)
    : Optimizer("SGD", std::move(params), lr),
      momentum_(momentum),
      weight_decay_(weight_decay),
      dampening_(dampening),
      nesterov_(nesterov) {
  TG_CHECK(momentum >= 0, "SGD: invalid momentum ", momentum, " (must be >= 0)");
  TG_CHECK(weight_decay >= 0, "SGD: invalid weight_decay ", weight_decay, " (must be >= 0)");
  TG_CHECK(!nesterov || (momentum > 0 && dampening == 0),
           "SGD: Nesterov momentum requires a momentum > 0 and zero dampening");
}

std::vector<std::string> SGD::state_names() const {
  if (momentum_ == 0) return {};
  return {"momentum_buffer"};
}

void SGD::update(size_t index, const Tensor& param, const Tensor& grad) {
  const bool first_step = !has_state(index);
  if (momentum_ != 0 && first_step) state_at(index, "momentum_buffer") = empty_like(param);

  SgdStep step;
  step.lr = lr();
  step.momentum = momentum_;
  step.dampening = dampening_;
  step.weight_decay = weight_decay_;
  step.nesterov = nesterov_;
  step.first_step = first_step;
  const Tensor buffer = momentum_ != 0 ? state_at(index, "momentum_buffer") : Tensor();
  kernels(param.device()).sgd_step(step, param, grad, buffer);
}

// ---- Adam and AdamW ---------------------------------------------------------------------------

Adam::Adam(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
           double weight_decay)
    : Adam("Adam", std::move(params), lr, betas, eps, weight_decay, false) {}

Adam::Adam(const char* name, std::vector<Tensor> params, double lr,
           std::pair<double, double> betas, double eps, double weight_decay,
           bool decoupled_weight_decay)
    : Optimizer(name, std::move(params), lr),
      beta1_(betas.first),
      beta2_(betas.second),
      eps_(eps),
      weight_decay_(weight_decay),
      decoupled_weight_decay_(decoupled_weight_decay) {
  TG_CHECK(eps >= 0, name, ": invalid eps ", eps, " (must be >= 0)");
  TG_CHECK(beta1_ >= 0 && beta1_ < 1, name, ": invalid beta1 ", beta1_, " (must be in [0, 1))");
  TG_CHECK(beta2_ >= 0 && beta2_ < 1, name, ": invalid beta2 ", beta2_, " (must be in [0, 1))");
  TG_CHECK(weight_decay >= 0, name, ": invalid weight_decay ", weight_decay, " (must be >= 0)");
}

AdamW::AdamW(std::vector<Tensor> params, double lr, std::pair<double, double> betas, double eps,
             double weight_decay)
    : Adam("AdamW", std::move(params), lr, betas, eps, weight_decay, true) {}

std::vector<std::string> Adam::state_names() const { return {"exp_avg", "exp_avg_sq", "step"}; }

void Adam::update(size_t index, const Tensor& param, const Tensor& grad) {
  if (!has_state(index)) {
    state_at(index, "step") = from_indices({0}, {}, kCPU);  // on the host, as in PyTorch
    state_at(index, "exp_avg") = zeros_like(param);
    state_at(index, "exp_avg_sq") = zeros_like(param);
  }
  int64_t& step = state_at(index, "step").data_as<int64_t>()[0];
  step += 1;
  const double bias_correction1 = 1 - std::pow(beta1_, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2_, static_cast<double>(step));
  AdamStep update;
  update.lr = lr();
  update.bias_correction1 = bias_correction1;
  update.bias_correction2 = bias_correction2;
  update.beta1 = beta1_;
  update.beta2 = beta2_;
  update.eps = eps_;
  update.decay_factor = decoupled_weight_decay_ ? 1 - lr() * weight_decay_ : 1.0;
  update.l2 = decoupled_weight_decay_ ? 0.0 : weight_decay_;
  kernels(param.device()).adam_step(update, param, grad, state_at(index, "exp_avg"),
                                    state_at(index, "exp_avg_sq"));
}

// ---- Gradient clipping ------------------------------------------------------------------------

Tensor& accumulator_on(std::vector<Tensor>& per_device, Device device, DType dtype) {
  for (Tensor& t : per_device) {
    if (t.device() == device) return t;
  }
  return per_device.emplace_back(zeros({}, dtype, device));
}

double grad_norm(const std::vector<Tensor>& params) {
  NoGrad no_grad;
  // One f64 accumulator per device, summed on that device; read back once.
  std::vector<Tensor> totals;
  for (const Tensor& param : params) {
    const Tensor grad = param.defined() ? param.grad() : Tensor();
    if (!grad.defined()) continue;
    const Tensor values = is_half(grad.dtype()) ? grad.to(DType::f32) : grad.contiguous();
    kernels(grad.device())
        .accumulate_sum_of_squares(values, accumulator_on(totals, grad.device(), DType::f64));
  }
  double sum_of_squares = 0;
  for (const Tensor& total : totals) sum_of_squares += total.item();
  return std::sqrt(sum_of_squares);
}

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm,
                      std::optional<double> known_norm) {
  TG_CHECK(max_norm >= 0, "clip_grad_norm: max_norm ", max_norm, " must be >= 0");
  NoGrad no_grad;
  const double total_norm = known_norm ? *known_norm : grad_norm(params);
  // PyTorch multiplies by min(clip_coef, 1); a NaN coefficient (NaN norm) is not clamped.
  const double clip_coef = max_norm / (total_norm + 1e-6);
  if (clip_coef >= 1.0) return total_norm;
  for (const Tensor& param : params) {
    const Tensor grad = param.defined() ? param.grad() : Tensor();
    if (grad.defined()) param.set_grad(mul(grad, clip_coef));  // a new tensor: grads may be shared
  }
  return total_norm;
}

}  // namespace tg
