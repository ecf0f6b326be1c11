#include "tapegrad/nn/module.h"

#include <algorithm>
#include <map>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"

namespace tg::nn {

Tensor Module::register_parameter(const std::string& name, Tensor value) {
  value = value.detach();
  value.requires_grad_();
  parameters_.emplace_back(name, value);
  return value;
}

Tensor Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  buffers_.emplace_back(name, value);
  buffer_persistent_.push_back(persistent);
  return value;
}

void Module::unregister_parameter(const std::string& name) {
  const auto found = std::find_if(parameters_.begin(), parameters_.end(),
                                  [&](const auto& entry) { return entry.first == name; });
  TG_CHECK(found != parameters_.end(), "unregister_parameter: no parameter named '", name, "'");
  parameters_.erase(found);
}

void Module::unregister_buffer(const std::string& name) {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].first != name) continue;
    buffers_.erase(buffers_.begin() + static_cast<std::ptrdiff_t>(i));
    buffer_persistent_.erase(buffer_persistent_.begin() + static_cast<std::ptrdiff_t>(i));
    return;
  }
  fail("unregister_buffer: no buffer named '", name, "'");
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out = {{"", this}};
  for (const auto& [name, child] : children_) {
    for (const auto& [path, module] : child->named_modules()) {
      out.emplace_back(path.empty() ? name : name + "." + path, module);
    }
  }
  return out;
}

void Module::collect(const std::string& prefix, NamedTensors& out, bool parameters) const {
  if (parameters) {
    for (const auto& [name, t] : parameters_) out.emplace_back(prefix + name, t);
  } else {
    for (size_t i = 0; i < buffers_.size(); ++i) {
      if (buffer_persistent_[i]) out.emplace_back(prefix + buffers_[i].first, buffers_[i].second);
    }
  }
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out, parameters);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  collect("", out, true);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  collect("", out, false);
  return out;
}

NamedTensors Module::state_dict() const {
  NamedTensors out = named_parameters();
  for (auto& entry : named_buffers()) out.push_back(entry);
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> given(state.begin(), state.end());
  std::string missing, mismatched;
  for (const auto& [name, target] : state_dict()) {
    auto found = given.find(name);
    if (found == given.end()) {
      missing += (missing.empty() ? "" : ", ") + name;
      continue;
    }
    if (found->second.shape() != target.shape()) {
      mismatched += (mismatched.empty() ? "" : ", ") + name + " " +
                    shape_str(found->second.shape()) + " vs " + shape_str(target.shape());
    }
    given.erase(found);
  }
  std::string unexpected;
  for (const auto& [name, t] : given) unexpected += (unexpected.empty() ? "" : ", ") + name;
  TG_CHECK(missing.empty() && mismatched.empty() && (unexpected.empty() || !strict),
           "load_state_dict: ", missing.empty() ? "" : "missing: " + missing + "; ",
           mismatched.empty() ? "" : "shape mismatch (file vs model): " + mismatched + "; ",
           unexpected.empty() || !strict ? "" : "unexpected: " + unexpected);
  NoGrad no_grad;
  std::map<std::string, Tensor> by_name(state.begin(), state.end());
  for (const auto& [name, target] : state_dict()) {
    const Tensor& source = by_name.at(name);  // on any device, of any dtype
    target.copy_(source);  // converts the dtype and device; raises the version
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

void Module::replace_in_place(const std::function<Tensor(const Tensor&)>& replacement) {
  auto replace = [&](const Tensor& t) {
    const Tensor with = replacement(t);
    if (!with.defined()) return;  // left as it is
    TensorImpl& impl = *t.impl();
    impl.storage = with.storage();
    impl.strides = with.strides();
    impl.offset = with.offset();
    impl.dtype = with.dtype();
    impl.grad.reset();
  };
  for (auto& [name, t] : parameters_) replace(t);
  for (auto& [name, t] : buffers_) replace(t);
  for (auto& [name, child] : children_) child->replace_in_place(replacement);
}

void Module::to(DType dtype) {
  replace_in_place([dtype](const Tensor& t) {
    return t.dtype() == dtype || !is_floating(t.dtype()) ? Tensor() : t.detach().to(dtype);
  });
}

void Module::to(Device device) {
  replace_in_place([device](const Tensor& t) {
    return t.device() == device ? Tensor() : t.detach().to(device);
  });
}

int64_t Module::parameter_count() const {
  int64_t count = 0;
  for (const Tensor& p : parameters()) count += p.numel();
  return count;
}

}  // namespace tg::nn
