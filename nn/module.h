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
  // Copies values into the existing tensors. Missing, unexpected or mis-shaped entries are a
  // tg::Error listing them (unexpected ones are ignored when strict is false), and so are a name
  // given twice and a dtype that does not convert: floating values convert to any floating dtype
  // (as torch's copy_), integer and bool tensors (a quantized Linear's int8 weight) load only
  // their own dtype. Nothing changes unless everything fits.
  void load_state_dict(const NamedTensors& state, bool strict = true);

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

}  // namespace tg::nn
