#pragma once
// Tensor: a cheap handle to (storage, shape, strides, offset, dtype). Copies of a Tensor share
// everything; views share the storage with different shape/strides/offset.
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <ostream>
#include <vector>

#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/shape.h"
#include "tapegrad/autograd/storage.h"

namespace tg {

struct Node;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Shape strides;           // in elements
  int64_t offset = 0;      // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the tape node that produced this tensor (null for leaves)
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A default-constructed Tensor() is undefined: it has no shape, dtype or storage, and every
  // accessor and op below throws tg::Error "<accessor>: undefined tensor" on it (a null check,
  // never a null dereference). defined(), same(), impl() and impl_ptr() answer for it.
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return live("Tensor::shape").shape; }
  const Shape& strides() const { return live("Tensor::strides").strides; }
  int64_t offset() const { return live("Tensor::offset").offset; }
  DType dtype() const { return live("Tensor::dtype").dtype; }
  Device device() const { return live("Tensor::device").storage->device(); }
  int64_t dim() const { return static_cast<int64_t>(live("Tensor::dim").shape.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const;
  bool is_contiguous() const;
  void* data() const;  // address of the first element
  template <typename T>
  T* data_as() const { return static_cast<T*>(data()); }
  const std::shared_ptr<Storage>& storage() const { return live("Tensor::storage").storage; }
  // The storage's version counter (PyTorch's tensor._version; autograd/storage.h): shared by
  // every view of the storage, raised by one by each in-place write.
  uint64_t version() const { return live("Tensor::version").storage->version(); }
  void bump_version() const { live("Tensor::bump_version").storage->bump_version(); }
  TensorImpl* impl() const { return impl_.get(); }  // null for an undefined tensor
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool same(const Tensor& other) const { return impl_ == other.impl_; }

  // Autograd.
  bool requires_grad() const { return live("Tensor::requires_grad").requires_grad; }
  Tensor& requires_grad_(bool value = true);  // leaves only
  bool is_leaf() const { return live("Tensor::is_leaf").grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return live("Tensor::grad_fn").grad_fn; }
  // The accumulated gradient (undefined until a backward reaches this leaf). grad(), set_grad()
  // and zero_grad() take the lock backward() takes to accumulate into it (grad_lock below).
  Tensor grad() const;
  // Replaces the gradient: `grad` must have this tensor's shape, dtype and device (tg::Error
  // naming set_grad and both otherwise), or be undefined, which clears it.
  void set_grad(const Tensor& grad) const;
  void zero_grad() const;  // like PyTorch's set_to_none
  Tensor detach() const;  // same storage, no history
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // Host copies, for tests and printing: the elements (of any dtype, any device) copied to the
  // host and converted to f64 / i64, in row-major order. Not views, and not sparse values/indices.
  double item() const;
  std::vector<double> to_host_f64() const;
  std::vector<int64_t> to_host_i64() const;

  // Views and conversions (defined in ops/, recorded on the tape).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor permute(const Shape& order) const;
  // start may be negative: -1 is the last position (as Python's x.narrow and x[..., -1:]).
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  // Python's x[..., start:end:step] on one dim, a view (writable with copy_ and fill_): start and
  // end count from the end when negative and are clamped to the dim as Python clamps them; step
  // is positive.
  Tensor slice(int64_t dim, int64_t start = 0, int64_t end = std::numeric_limits<int64_t>::max(),
               int64_t step = 1) const;
  // Python's x[..., index, ...]: the dim removed, a view; index may be negative.
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // recorded; ops/views.h: expand_untaped is not
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor contiguous() const;
  Tensor to(DType dtype) const;
  // A copy on another device (this tensor itself when already there); gradients flow back to the
  // source device, as with PyTorch's .to(device).
  Tensor to(Device device) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor clone() const;

  // In-place writes (defined in ops/views.cpp, recorded on no tape: PyTorch's copy_ and fill_
  // under no_grad): src's values (broadcast to this shape, converted to this dtype, from any
  // device), or `value`, into every element of this tensor. Each raises the storage's version by
  // one, so that a backward that saved this storage before the write refuses to run (tape.h).
  // A tensor that requires grad is written only with grad mode off (NoGrad); copy_ refuses a
  // destination whose elements share memory (an expanded view).
  const Tensor& copy_(const Tensor& src) const;
  const Tensor& fill_(double value) const;

 private:
  // The impl, checked: tg::Error "<accessor>: undefined tensor" for a Tensor().
  TensorImpl& live(const char* accessor) const {
    if (impl_ == nullptr) [[unlikely]] undefined_tensor(accessor);
    return *impl_;
  }
  [[noreturn]] static void undefined_tensor(const char* accessor);

  std::shared_ptr<TensorImpl> impl_;
};

// The mutex that guards impl.grad: backward() holds it while it adds a gradient into a leaf, and
// grad(), set_grad() and zero_grad() while they read or replace it, so that several threads may
// back-propagate into one shared leaf at once (tape.h: the threading contract). One of a few
// mutexes, picked by the impl's address.
std::mutex& grad_lock(const TensorImpl& impl);

// Shapes and strides.
int64_t numel(const Shape& shape);
// tg::Error naming `op` unless the shape has no negative dim and an element count that fits in an
// int64 (that it has at most kMaxRank dims, Shape itself makes sure).
void check_shape(const Shape& shape, const char* op);
Shape contiguous_strides(const Shape& shape);
int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op);  // -1 -> ndim-1, checked

// An op's inputs must share one device: tg::Error "op 'add': inputs on cpu and cuda:0" otherwise.
// Undefined tensors are skipped.
void check_same_device(const char* op, std::initializer_list<Tensor> inputs);

// Factories. Storage is fresh and contiguous, on default_device() unless a device is given.
Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = default_device());
Tensor zeros(const Shape& shape, DType dtype = DType::f32, Device device = default_device());
Tensor ones(const Shape& shape, DType dtype = DType::f32, Device device = default_device());
Tensor full(const Shape& shape, double value, DType dtype = DType::f32, Device device = default_device());
Tensor scalar(double value, DType dtype = DType::f32, Device device = default_device());
// Built on the host from the values, then moved to `device`.
Tensor from_values(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32,
                   Device device = default_device());
Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape, Device device = default_device());
Tensor from_bools(const std::vector<bool>& values, const Shape& shape, Device device = default_device());
Tensor arange(int64_t n, DType dtype = DType::f32, Device device = default_device());
// PyTorch's arange(start, end, step): start, start + step, ... up to end (excluded), computed as
// start + i * step in f64 and then converted; step may be negative, never 0.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::f32,
              Device device = default_device());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);

// A contiguous copy of t on `device`, not recorded on the tape (Tensor::to(device) is the op).
Tensor copy_to_device(const Tensor& t, Device device);

std::ostream& operator<<(std::ostream& os, const Tensor& t);

}  // namespace tg
