#include "tapegrad/autograd/tensor.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"

namespace tg {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t sum = 0;
  TG_CHECK(!__builtin_add_overflow(a, b, &sum), what, ": ", a, " + ", b, " overflows int64");
  return sum;
}

int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t product = 0;
  TG_CHECK(!__builtin_mul_overflow(a, b, &product), what, ": ", a, " x ", b, " overflows int64");
  return product;
}

// Checked, because a shape built from a user's sizes may reach it before any factory does (a
// negative count would become a huge allocation, a wrapped one a short buffer): tg::Error naming
// the shape. A zero dim makes the count 0 however large the others are. One pass, as it runs on
// every Tensor::numel().
int64_t numel(const Shape& shape) {
  int64_t count = 1;
  bool wrapped = false, has_zero = false;
  for (const int64_t extent : shape) {
    if (extent <= 0) [[unlikely]] {
      TG_CHECK(extent == 0, "numel: negative size in shape ", shape_str(shape));
      has_zero = true;
    }
    wrapped = __builtin_mul_overflow(count, extent, &count) || wrapped;
  }
  if (has_zero) return 0;
  TG_CHECK(!wrapped, "numel: shape ", shape_str(shape), " has more elements than an int64 counts");
  return count;
}

void throw_rank_error(size_t rank) {
  throw Error("a shape of " + std::to_string(rank) + " dims: a tensor has at most " + std::to_string(kMaxRank));
}

// The product of the sizes, with a 0 counted as 1, bounds the element count and every
// contiguous stride (and every stride a view derives from them), so that checking it here keeps
// all later stride arithmetic inside int64, also for a shape with no elements such as [0, 2^62, 4].
void check_shape(const Shape& shape, const char* op) {
  int64_t span = 1;
  for (int64_t extent : shape) {
    TG_CHECK(extent >= 0, "op '", op, "': negative size in shape ", shape_str(shape));
    TG_CHECK(!__builtin_mul_overflow(span, std::max<int64_t>(extent, 1), &span), "op '", op,
             "': shape ", shape_str(shape), " has more elements than an int64 counts");
  }
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

int64_t normalize_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t wrapped = dim < 0 ? dim + ndim : dim;
  TG_CHECK(wrapped >= 0 && wrapped < ndim, "op '", op, "': dim ", dim, " is out of range for a ",
           ndim, "-d tensor");
  return wrapped;
}

void check_same_device(const char* op, std::initializer_list<Tensor> inputs) {
  const Tensor* first = nullptr;
  for (const Tensor& t : inputs) {
    if (!t.defined()) continue;
    if (first == nullptr) {
      first = &t;
    } else if (t.device() != first->device()) {
      fail("op '", op, "': inputs on ", device_name(first->device()), " and ",
           device_name(t.device()));
    }
  }
}

void Tensor::undefined_tensor(const char* accessor) {
  fail(accessor, ": undefined tensor (a default-constructed Tensor() has no shape, dtype or "
       "storage)");
}

int64_t Tensor::size(int64_t d) const {
  const Shape& extents = live("Tensor::size").shape;
  return extents[normalize_dim(d, static_cast<int64_t>(extents.size()), "size")];
}

int64_t Tensor::numel() const { return tg::numel(live("Tensor::numel").shape); }

bool Tensor::is_contiguous() const {
  const TensorImpl& impl = live("Tensor::is_contiguous");
  int64_t expected = 1;
  for (size_t i = impl.shape.size(); i-- > 0;) {
    if (impl.shape[i] != 1 && impl.strides[i] != expected) return false;
    expected *= impl.shape[i];
  }
  return true;
}

void* Tensor::data() const {
  const TensorImpl& impl = live("Tensor::data");
  return static_cast<char*>(impl.storage->data()) + impl.offset * dtype_size(impl.dtype);
}

std::mutex& grad_lock(const TensorImpl& impl) {
  static std::mutex stripes[16];
  // The address divided by an impl's size, so that neighbouring impls take different mutexes.
  const auto address = reinterpret_cast<std::uintptr_t>(&impl);
  return stripes[(address / sizeof(TensorImpl)) % 16];
}

Tensor Tensor::grad() const {
  const TensorImpl& impl = live("Tensor::grad");
  const std::lock_guard<std::mutex> guard(grad_lock(impl));
  return Tensor(impl.grad);
}

void Tensor::set_grad(const Tensor& grad) const {
  TensorImpl& impl = live("Tensor::set_grad");
  if (grad.defined()) {
    TG_CHECK(grad.shape() == impl.shape && grad.dtype() == impl.dtype &&
                 grad.device() == impl.storage->device(),
             "set_grad: a gradient of shape ", shape_str(grad.shape()), " (",
             dtype_name(grad.dtype()), ", ", device_name(grad.device()), ") for a tensor of shape ",
             shape_str(impl.shape), " (", dtype_name(impl.dtype), ", ",
             device_name(impl.storage->device()), "): they must match");
  }
  const std::lock_guard<std::mutex> guard(grad_lock(impl));
  impl.grad = grad.impl_;
}

void Tensor::zero_grad() const {
  TensorImpl& impl = live("Tensor::zero_grad");
  const std::lock_guard<std::mutex> guard(grad_lock(impl));
  impl.grad.reset();
}

Tensor& Tensor::requires_grad_(bool value) {
  live("Tensor::requires_grad_");
  TG_CHECK(is_leaf(), "requires_grad_: only leaf tensors can change requires_grad (use detach())");
  TG_CHECK(!value || is_floating(dtype()), "requires_grad_: a ", dtype_name(dtype()),
           " tensor cannot require gradients (floating dtypes only)");
  impl_->requires_grad = value;
  return *this;
}

Tensor Tensor::detach() const {
  live("Tensor::detach");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = impl_->storage;
  impl->shape = impl_->shape;
  impl->strides = impl_->strides;
  impl->offset = impl_->offset;
  impl->dtype = impl_->dtype;
  return Tensor(impl);
}

void Tensor::backward(const Tensor& grad, bool retain_graph) const {
  live("Tensor::backward");
  tg::backward(*this, grad, retain_graph);
}

Tensor copy_to_device(const Tensor& t, Device device) {
  Tensor packed = t;  // contiguous on the source device first
  if (!t.is_contiguous()) {
    packed = empty(t.shape(), t.dtype(), t.device());
    kernels(t.device()).copy(t, packed);
  }
  Tensor out = empty(t.shape(), t.dtype(), device);
  if (t.device() == kCPU) {
    kernels(device).copy_from_host(packed.data(), out);
  } else if (device == kCPU) {
    kernels(t.device()).copy_to_host(packed, out.data());
  } else {  // between two devices: through host memory
    std::vector<unsigned char> bytes(static_cast<size_t>(t.numel()) * dtype_size(t.dtype()));
    kernels(t.device()).copy_to_host(packed, bytes.data());
    kernels(device).copy_from_host(bytes.data(), out);
  }
  return out;
}

std::vector<double> Tensor::to_host_f64() const {
  live("Tensor::to_host_f64");
  const Tensor host = device() == kCPU ? *this : copy_to_device(*this, kCPU);
  Tensor converted = empty(shape(), DType::f64, kCPU);
  kernels(kCPU).copy(host, converted);
  const double* begin = converted.data_as<double>();
  return {begin, begin + converted.numel()};
}

std::vector<int64_t> Tensor::to_host_i64() const {
  live("Tensor::to_host_i64");
  const Tensor host = device() == kCPU ? *this : copy_to_device(*this, kCPU);
  Tensor converted = empty(shape(), DType::i64, kCPU);
  kernels(kCPU).copy(host, converted);
  const int64_t* begin = converted.data_as<int64_t>();
  return {begin, begin + converted.numel()};
}

double Tensor::item() const {
  live("Tensor::item");
  TG_CHECK(numel() == 1, "item: tensor of shape ", shape_str(shape()), " has ", numel(),
           " elements, not 1");
  return to_host_f64()[0];
}

Tensor empty(const Shape& shape, DType dtype, Device device) {
  check_shape(shape, "empty");
  const int64_t nbytes = checked_mul(tg::numel(shape), static_cast<int64_t>(dtype_size(dtype)),
                                     "op 'empty': bytes of the tensor");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(nbytes), device);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  kernels(device).fill(t, value);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor scalar(double value, DType dtype, Device device) { return full({}, value, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }

namespace {

// A tensor built on the host, on `device` (factories fill it there, then transfer once).
Tensor moved_to(const Tensor& host, Device device) {
  return device == kCPU ? host : copy_to_device(host, device);
}

}  // namespace

Tensor from_values(const std::vector<double>& values, const Shape& shape, DType dtype,
                   Device device) {
  check_shape(shape, "from_values");
  TG_CHECK(static_cast<int64_t>(values.size()) == numel(shape), "from_values: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor source = empty(shape, DType::f64, kCPU);
  if (!values.empty()) std::memcpy(source.data(), values.data(), values.size() * sizeof(double));
  if (dtype == DType::f64) return moved_to(source, device);
  Tensor result = empty(shape, dtype, kCPU);
  kernels(kCPU).copy(source, result);
  return moved_to(result, device);
}

Tensor from_indices(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  check_shape(shape, "from_indices");
  TG_CHECK(static_cast<int64_t>(values.size()) == numel(shape), "from_indices: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor result = empty(shape, DType::i64, kCPU);
  if (!values.empty()) std::memcpy(result.data(), values.data(), values.size() * sizeof(int64_t));
  return moved_to(result, device);
}

Tensor from_bools(const std::vector<bool>& values, const Shape& shape, Device device) {
  check_shape(shape, "from_bools");
  TG_CHECK(static_cast<int64_t>(values.size()) == numel(shape), "from_bools: ", values.size(),
           " values do not fill shape ", shape_str(shape));
  Tensor result = empty(shape, DType::b8, kCPU);
  auto* out = result.data_as<uint8_t>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i] ? 1 : 0;
  return moved_to(result, device);
}

namespace {

// start, start + step, ... (`length` values, each start + i * step in f64), converted to dtype as
// the copy kernel converts (an integer dtype saturates at its ends), on `device`.
Tensor evenly_spaced(int64_t length, double start, double step, DType dtype, Device device) {
  check_shape({length}, "arange");
  // Written into a tensor, not a std::vector first: a size too large to allocate is then the
  // allocator's tg::Error, not a std::length_error.
  Tensor values = empty({length}, DType::f64, kCPU);
  double* value = values.data_as<double>();
  for (int64_t i = 0; i < length; ++i) value[i] = start + static_cast<double>(i) * step;
  if (dtype == DType::f64) return moved_to(values, device);
  Tensor result = empty({length}, dtype, kCPU);
  kernels(kCPU).copy(values, result);
  return moved_to(result, device);
}

}  // namespace

Tensor arange(int64_t n, DType dtype, Device device) {
  TG_CHECK(n >= 0, "arange: size ", n, " must be >= 0");
  return evenly_spaced(n, 0, 1, dtype, device);
}

Tensor arange(double start, double end, double step, DType dtype, Device device) {
  TG_CHECK(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "arange: start ",
           start, ", end ", end, " and step ", step, " must be finite");
  TG_CHECK(step != 0, "arange: step must be nonzero (start ", start, ", end ", end, ")");
  // As PyTorch, a step that walks away from end is an error, not an empty range.
  TG_CHECK(step > 0 ? end >= start : end <= start, "arange: step ", step, " cannot reach end ",
           end, " from start ", start,
           " (upper bound and larger bound inconsistent with step sign)");
  // PyTorch's length, ceil((end - start) / step) in f64: arange(0, 1, 0.1) has 10 values.
  // end - start of two finite doubles may still be inf (1e308 - -1e308), so the count is checked
  // before it becomes an int64.
  const double count = std::ceil((end - start) / step);
  TG_CHECK(std::isfinite(count) && count < 0x1p63, "arange: start ", start, ", end ", end,
           " and step ", step, " make ", count, " values, more than an int64 counts");
  // i8 and i32 saturate at their ends, as every conversion into them does; an i64 range (indices,
  // counts) that leaves i64 is refused rather than saturated, whose values would repeat unseen.
  const double last = start + (count - 1) * step;
  const auto in_i64 = [](double value) { return value >= -0x1p63 && value < 0x1p63; };
  TG_CHECK(dtype != DType::i64 || count == 0 || (in_i64(start) && in_i64(last)), "arange: values ",
           start, " to ", last, " do not fit in i64");
  return evenly_spaced(static_cast<int64_t>(count), start, step, dtype, device);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  os << "Tensor(shape=" << shape_str(t.shape()) << ", dtype=" << dtype_name(t.dtype());
  if (t.numel() <= 64) {
    os << ", values=[";
    const auto values = t.to_host_f64();
    for (size_t i = 0; i < values.size(); ++i) os << (i ? ", " : "") << values[i];
    os << "]";
  }
  return os << ")";
}

}  // namespace tg
