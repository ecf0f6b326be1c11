#include "tapegrad/runtime/autocast.h"

#include <map>
#include <memory>
#include <tuple>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"

namespace tg {

namespace autocast_detail {

struct State {
  std::optional<DType> dtype;  // nullopt: off
  int depth = 0;               // Autocast scopes alive; the cache empties when it drops to 0
  struct Cached {
    std::shared_ptr<TensorImpl> source;  // keeps the key's address from being reused
    uint64_t version = 0;                // the source's storage version when it was cast
    Tensor cast;
  };
  // (parameter, target dtype, recorded on the tape?) -> its cast
  std::map<std::tuple<const TensorImpl*, DType, bool>, Cached> cache;
};

}  // namespace autocast_detail

namespace {

using autocast_detail::State;
thread_local State current;

bool castable(const Tensor& t) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != DType::f64;
}

// t.to(dtype), once per scope for a parameter.
Tensor cast(const Tensor& t, DType dtype) {
  if (!(t.is_leaf() && t.requires_grad())) return t.to(dtype);
  const auto key = std::make_tuple(static_cast<const TensorImpl*>(t.impl()), dtype, grad_enabled());
  auto found = current.cache.find(key);
  // A cast already back-propagated (and released) cannot carry a second backward, and one of
  // values written over since (an optimizer step inside the scope) is stale: cast again.
  if (found != current.cache.end() && found->second.version == t.version() &&
      !(found->second.cast.grad_fn() && found->second.cast.grad_fn()->released)) {
    return found->second.cast;
  }
  Tensor converted = t.to(dtype);
  current.cache[key] = {t.impl_ptr(), t.version(), converted};
  return converted;
}

}  // namespace

std::optional<DType> autocast_dtype() { return current.dtype; }

Autocast::Autocast(DType dtype) : previous_(current.dtype) {
  TG_CHECK(dtype == DType::f16 || dtype == DType::bf16 || dtype == DType::f32,
           "Autocast: dtype must be f16 or bf16 (or f32 to turn it off), got ", dtype_name(dtype));
  current.dtype = dtype == DType::f32 ? std::nullopt : std::optional<DType>(dtype);
  ++current.depth;
}

Autocast::~Autocast() {
  current.dtype = previous_;
  if (--current.depth == 0) current.cache.clear();
}

AutocastStateScope::AutocastStateScope(std::optional<DType> dtype)
    : outer_(new State(std::move(current))) {
  current = State{};
  current.dtype = dtype;
}

AutocastStateScope::~AutocastStateScope() {
  current = std::move(*outer_);
  delete outer_;
}

Tensor autocast_to_half(const Tensor& t) {
  if (!current.dtype || !castable(t) || t.dtype() == *current.dtype) return t;
  return cast(t, *current.dtype);
}

Tensor autocast_to_f32(const Tensor& t) {
  if (!current.dtype || !castable(t) || t.dtype() == DType::f32) return t;
  return cast(t, DType::f32);
}

void autocast_promote(Tensor& a, Tensor& b) {
  if (!current.dtype || !castable(a) || !castable(b) || a.dtype() == b.dtype()) return;
  a = autocast_to_f32(a);
  b = autocast_to_f32(b);
}

size_t autocast_cache_size() { return current.cache.size(); }

}  // namespace tg
