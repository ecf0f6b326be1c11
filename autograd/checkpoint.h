#pragma once
// Gradient checkpointing (PyTorch's reentrant torch.utils.checkpoint): trade compute for memory.
//
// checkpoint(fn, inputs) runs fn without recording anything, so none of fn's activations are
// kept; it records ONE tape node "checkpoint" on the inputs, which saves only the inputs and the
// RNG state from before the call. Its backward re-runs fn on a fresh, nested tape (TapeScope),
// with the RNG state replayed so dropout draws the same masks, and back-propagates through that.
//
// Rules, as in PyTorch's reentrant variant:
//  - At least one input must require grad for checkpointing to happen. When grad mode is off or
//    no input requires grad, checkpoint just returns fn(inputs): recorded as usual if fn uses
//    parameters that require grad (correct gradients, but no memory saved).
//  - Parameters fn captures (module weights, leaves) get their gradients accumulated into .grad
//    directly by the nested backward.
//  - A captured tensor that requires grad but is NOT a leaf (it has a grad_fn on the outer tape)
//    must be passed in `inputs` instead: the nested backward cannot reach the outer tape.
//  - fn must be deterministic apart from the global RNG (which is replayed), and must give the
//    same result on the re-run.
//  - Inputs that are not floating (masks, indices) are passed to the re-run as they are.
//  - In-place writes between the forward and the backward are refused as the plain graph refuses
//    them (tape.h): to an input, or to any tensor fn's ops read that outlives fn (a captured
//    weight stepped by an optimizer, a buffer filled), the backward throws tg::Error "... has
//    been modified by an in-place operation: 'checkpoint' read a tensor of shape [..] at version
//    N, now version M" instead of re-running fn on the new values. Writes fn makes itself during
//    the forward count as before it (autograd/read_log.h).
//
// checkpoint(fn, args...) is torch.utils.checkpoint.checkpoint(fn, *args): fn(args...) for any
// callable fn (a module, a lambda, a shared_ptr to either) and Tensor args, checkpointed as
// checkpoint(fn, {args...}) above; an undefined argument (an absent mask) is passed through.
#include <concepts>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

namespace detail {

// fn(args...), as the forward of checkpoint(fn, args...) calls it: fn itself when it can be
// called, a module's forward when it has no operator() (one derived from Module alone), and
// either through a pointer (*fn), which is how register_module hands out children.
template <typename Fn, typename... Args>
Tensor call_checkpointed(const Fn& fn, const Args&... args) {
  if constexpr (std::invocable<const Fn&, const Args&...>) {
    return fn(args...);
  } else if constexpr (requires { fn.forward(args...); }) {
    return fn.forward(args...);
  } else {
    return call_checkpointed(*fn, args...);
  }
}

}  // namespace detail

// fn is kept until the backward, which calls it again: a copy where it can be copied (a lambda,
// a shared_ptr), else a pointer to it (a module, which must outlive the backward anyway: its
// weights are read again there). fn must return a Tensor; wrap a module that returns more in a
// lambda (checkpoint([&](const Tensor& x) { return mha(x).output; }, x)).
template <typename Fn, typename... Args>
  requires(sizeof...(Args) > 0 && (std::same_as<Args, Tensor> && ...))
Tensor checkpoint(Fn&& fn, const Args&... args) {
  using Callable = std::remove_cvref_t<Fn>;
  static_assert(std::copy_constructible<Callable> || std::is_lvalue_reference_v<Fn>,
                "checkpoint: a module that cannot be copied must be passed as a named object "
                "(the backward calls it again)");
  const auto held = [&] {
    if constexpr (std::copy_constructible<Callable>) {
      return Callable(fn);
    } else {
      return &std::as_const(fn);
    }
  }();
  const auto call = [held](const std::vector<Tensor>& inputs) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return detail::call_checkpointed(held, inputs[I]...);
    }(std::index_sequence_for<Args...>{});
  };
  return checkpoint(CheckpointFn(call), std::vector<Tensor>{args...});
}

}  // namespace tg
