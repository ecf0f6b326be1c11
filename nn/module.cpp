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

namespace {

// Which values a loaded tensor may convert into: any floating dtype into any other (as
// torch's copy_), but nothing across floating and integer or bool, nor between two integer
// dtypes. Those would truncate (an f32 weight into a quantized Linear's int8 weight is all zeros)
// or read integers as values (an int8 weight into an f32 model): quantize the f32 model, or load
// a checkpoint of the same quantization, instead.
bool loads_into(DType source, DType target) {
  return source == target || (is_floating(source) && is_floating(target));
}

void append(std::string& list, const std::string& entry) {
  list += (list.empty() ? "" : ", ") + entry;
}

}  // namespace

IncompatibleKeys Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, Tensor> given;
  std::string duplicated;
  for (const auto& [name, tensor] : state) {
    if (!given.emplace(name, tensor).second) append(duplicated, name);
  }
  TG_CHECK(duplicated.empty(), "load_state_dict: the state names ", duplicated,
           " more than once (each tensor must appear once)");
  // Every check runs before the first copy, so that a load that raises changes nothing.
  IncompatibleKeys keys;
  std::vector<std::pair<Tensor, Tensor>> copies;  // (target, source) of every entry that loads
  std::string mismatched, wrong_dtype;
  for (const auto& [name, target] : state_dict()) {
    auto found = given.find(name);
    if (found == given.end()) {
      keys.missing_keys.push_back(name);
      continue;
    }
    const Tensor& source = found->second;
    TG_CHECK(source.defined(), "load_state_dict: '", name, "' is an undefined tensor");
    if (source.shape() != target.shape()) {
      append(mismatched,
             name + " " + shape_str(source.shape()) + " vs " + shape_str(target.shape()));
    } else if (!loads_into(source.dtype(), target.dtype())) {
      append(wrong_dtype,
             name + " " + dtype_name(source.dtype()) + " vs " + dtype_name(target.dtype()));
    }
    copies.emplace_back(target, source);
    given.erase(found);
  }
  for (const auto& [name, t] : given) keys.unexpected_keys.push_back(name);
  std::string missing, unexpected;
  if (strict) {  // non-strict reports these two instead of raising, as PyTorch
    for (const std::string& name : keys.missing_keys) append(missing, name);
    for (const std::string& name : keys.unexpected_keys) append(unexpected, name);
  }
  TG_CHECK(missing.empty() && mismatched.empty() && wrong_dtype.empty() && unexpected.empty(),
           "load_state_dict: ", missing.empty() ? "" : "missing: " + missing + "; ",
           mismatched.empty() ? "" : "shape mismatch (file vs model): " + mismatched + "; ",
           wrong_dtype.empty() ? ""
                               : "dtype mismatch (file vs model; floating dtypes convert, "
                                 "integer and bool ones must match): " + wrong_dtype + "; ",
           unexpected.empty() ? "" : "unexpected: " + unexpected);
  NoGrad no_grad;
  // Sources on any device, of a dtype loads_into allows; copy_ converts the dtype and device and
  // raises the version.
  for (const auto& [target, source] : copies) target.copy_(source);
  return keys;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (const Tensor& p : parameters()) p.zero_grad();
}

void Module::replace_in_place(const std::function<Tensor(const Tensor&)>& replacement) {
  // Every replacement is made and checked before any is swapped in, so that a bad one leaves the
  // module as it was. A tensor shared by two modules (tied weights) is replaced once.
  std::vector<std::pair<TensorImpl*, Tensor>> swaps;
  const auto plan = [&](const std::string& name, const Tensor& t) {
    for (const auto& [impl, with] : swaps) {
      if (impl == t.impl()) return;
    }
    Tensor with = replacement(t);
    if (!with.defined()) return;  // left as it is
    // Everything that holds this tensor (an optimizer, a layer's member) keeps reading it with
    // the shape it had: a replacement of another shape would be read past its end.
    TG_CHECK(with.shape() == t.shape(), "replace_in_place: '", name, "' has shape ",
             shape_str(t.shape()), " but its replacement has shape ", shape_str(with.shape()));
    // PyTorch: only floating point tensors can require gradients.
    TG_CHECK(!t.requires_grad() || is_floating(with.dtype()), "replace_in_place: '", name,
             "' requires grad, so it cannot become ", dtype_name(with.dtype()),
             " (only floating point tensors can require gradients)");
    // Optimizers and kernels read a parameter as one contiguous block: a transposed or expanded
    // replacement is copied into one (a contiguous view, such as int8 stacking's rows of one
    // shared tensor, stays the view it is).
    if (!with.is_contiguous()) {
      NoGrad no_grad;
      with = with.detach().contiguous();
    }
    swaps.emplace_back(t.impl(), with);
  };
  const std::function<void(Module&, const std::string&)> gather = [&](Module& module,
                                                                      const std::string& prefix) {
    for (const auto& [name, t] : module.parameters_) plan(prefix + name, t);
    for (const auto& [name, t] : module.buffers_) plan(prefix + name, t);
    for (const auto& [name, child] : module.children_) gather(*child, prefix + name + ".");
  };
  gather(*this, "");
  for (const auto& [impl, with] : swaps) {
    impl->storage = with.storage();
    impl->strides = with.strides();
    impl->offset = with.offset();
    impl->dtype = with.dtype();
    impl->grad.reset();
  }
}

void Module::to(DType dtype) {
  // As torch.nn.Module.to: parameters may require gradients, which only floating tensors can.
  TG_CHECK(is_floating(dtype), "Module::to: only floating dtypes (f32, f64, f16, bf16) are "
           "allowed, got ", dtype_name(dtype));
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
