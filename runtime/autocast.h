#pragma once
// Autocast: mixed precision as a thread-local policy (PyTorch's torch.autocast), applied by the
// ops themselves at their entry.
//
// Inside `Autocast scope(DType::bf16)` (or f16):
//   - GEMM-class ops (matmul, linear, scaled_dot_product_attention) cast their floating inputs
//     to the half type and return half outputs; the kernels accumulate in f32.
//   - softmax, log_softmax, layer_norm, sum/mean/max, exp, log, pow and the losses cast half
//     inputs up to f32 and return f32: they need f32's precision (sums of many terms, exp).
//   - Binary elementwise ops (add, sub, mul, div, where) on a half and an f32 tensor cast both to
//     f32 (PyTorch's type promotion). Everything else runs in its input's dtype.
// Every cast is a recorded, differentiable .to(), so gradients flow back in the input's dtype:
// f32 parameters (the master weights) get f32 gradients. f64 tensors are never cast.
//
// Parameters (leaves that require grad) are cast once per scope: the cast is cached, keyed by the
// tensor, and the cache is emptied when the outermost scope ends. Open one scope per training step
// (around forward and loss, not backward): the optimizer changes the weights in place between
// steps (a cast of values written over since is made again: the storage's version has moved on,
// but a scope per step keeps the cache small). backward() runs with autocast off.
//
// Outside any scope (and inside `Autocast(DType::f32)`, which turns it off) ops apply no policy:
// inputs of mismatched dtypes are an error.
#include <optional>

#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

namespace autocast_detail {
struct State;  // the policy and the cast cache (autocast.cpp)
}

// The half type of the innermost enabled scope on this thread; nullopt when autocast is off.
std::optional<DType> autocast_dtype();

// RAII: f16 or bf16 turns autocast on for the scope, f32 turns it off; scopes nest.
class Autocast {
 public:
  explicit Autocast(DType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<DType> previous_;
};

// RAII: a fresh autocast state for the scope (this dtype, or off for nullopt; an empty cast
// cache), the outer state back after. backward() turns autocast off with it; checkpoint's
// recomputation replays the forward's policy with it.
class AutocastStateScope {
 public:
  explicit AutocastStateScope(std::optional<DType> dtype);
  ~AutocastStateScope();
  AutocastStateScope(const AutocastStateScope&) = delete;
  AutocastStateScope& operator=(const AutocastStateScope&) = delete;

 private:
  autocast_detail::State* outer_;
};

// The policy, for ops to apply to their inputs; each returns `t` itself when autocast is off or
// there is nothing to cast (undefined, not floating, f64, or already that dtype).
Tensor autocast_to_half(const Tensor& t);  // GEMM-class inputs -> the autocast dtype
Tensor autocast_to_f32(const Tensor& t);   // f32-class inputs: f16 / bf16 -> f32
// Binary ops: two floating inputs of different dtypes (neither f64) both become f32.
void autocast_promote(Tensor& a, Tensor& b);

// Parameters casts cached in this thread's current state (for tests).
size_t autocast_cache_size();

}  // namespace tg
