#pragma once
// Module: named parameters, buffers and children, as torch.nn.Module. state_dict() names are
// the dotted paths PyTorch would give ("mha.q_proj.weight"), so checkpoints load into PyTorch.
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// What load_state_dict(state, strict = false) left out, as torch's _IncompatibleKeys: the model's
// names the state lacks (those tensors keep their values) and the state's names the model lacks.
// Both are empty after a strict load, which raises instead.
struct IncompatibleKeys {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

class Module {
 public:
  virtual ~Module() = default;
  Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  NamedTensors named_parameters() const;  // in registration order, children after own
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;     // persistent buffers only
  NamedTensors state_dict() const;        // parameters, then persistent buffers
  // Copies values into the existing tensors, as torch's load_state_dict. strict: missing or
  // unexpected entries are a tg::Error listing them. Not strict: every entry whose name the
  // model has is loaded, the others are reported (missing ones keep their values). Either way a
  // mis-shaped entry, a name given twice and a dtype that does not convert are a tg::Error:
  // floating values convert to any floating dtype (as torch's copy_), integer and bool tensors (a
  // quantized Linear's int8 weight) load only their own dtype. Nothing changes when it raises.
  IncompatibleKeys load_state_dict(const NamedTensors& state, bool strict = true);

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Converts every floating parameter and buffer in place (handles held elsewhere see the
  // change); `dtype` must be floating, as in torch.nn.Module.to (parameters require gradients).
  void to(DType dtype);
  // Moves every parameter and buffer to `device` in place, as torch.nn.Module.to(device).
  void to(Device device);
  int64_t parameter_count() const;
  // This module ("") and every descendant, depth first, with their dotted paths ("mha.q_proj"), as
  // torch.nn.Module.named_modules().
  std::vector<std::pair<std::string, Module*>> named_modules();

  // Swaps in replacement(t)'s storage, layout and dtype for every parameter and buffer t, here and
  // in the children, where it is defined; handles held elsewhere see the change (what to(), and
  // MultiHeadAttention's int8 stacking, are made of). A replacement must have t's shape, and a
  // floating dtype where t requires grad (a tg::Error before anything is swapped); one that is not
  // contiguous (a transpose) is stored as a contiguous copy, the layout optimizers update.
  void replace_in_place(const std::function<Tensor(const Tensor&)>& replacement);

 protected:
  // The tensor becomes a leaf that requires grad; the returned handle shares it.
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value, bool persistent = true);
  // Drops a parameter from parameters() and state_dict() (the name may then be registered again,
  // e.g. as a buffer); a tg::Error if there is none of that name. Handles held elsewhere (an
  // optimizer's) keep the tensor alive but the module no longer lists it.
  void unregister_parameter(const std::string& name);
  void unregister_buffer(const std::string& name);  // the same for a buffer
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void collect(const std::string& prefix, NamedTensors& out, bool parameters) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<bool> buffer_persistent_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

// A Module that can be called as in Python: model(x) is model.forward(x), whatever forward's
// arguments and result (mha(q, k, v, mask), auto [out, weights] = mha(x, x, x, mask, true)).
// A module names itself once, `struct Block : nn::ModuleOf<Block> { ... forward(...) ... }`, and
// every library module is written so. Why a template base: forward's signature differs from module
// to module, so it cannot be a virtual of Module, and C++20 has no `this` parameter (C++23's
// deducing this) through which Module alone could find the caller's class; the base names that
// class instead (CRTP) and passes the arguments on unchanged. Module keeps its API, and a module
// derived from Module alone still works, through forward(). operator() calls the forward of the
// class named here: a subclass (LinformerAttention of MultiHeadAttention) calls its base's.
// Through a pointer, as register_module returns children, write layer->forward(x); (*layer)(x)
// is the same call. A braced argument (model(tokens, {3, 4})) cannot be passed on: name its type.
template <typename Derived>
class ModuleOf : public Module {
 public:
  // (The requires clauses make "can this module be called with these arguments" a question that
  // has an answer, std::invocable, instead of an error inside the call.)
  template <typename... Args>
    requires requires(const Derived& self, Args&&... args) {
      self.forward(std::forward<Args>(args)...);
    }
  decltype(auto) operator()(Args&&... args) const {
    return static_cast<const Derived&>(*this).forward(std::forward<Args>(args)...);
  }
  // A forward that is not const (a module that counts its calls) is reached too.
  template <typename... Args>
    requires requires(Derived& self, Args&&... args) {
      self.forward(std::forward<Args>(args)...);
    }
  decltype(auto) operator()(Args&&... args) {
    return static_cast<Derived&>(*this).forward(std::forward<Args>(args)...);
  }
};

}  // namespace tg::nn
