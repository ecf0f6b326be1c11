// Views (same storage, new shape/strides/offset) and the copies that sit beside them.
#include "tapegrad/ops/views.h"

#include <algorithm>
#include <numeric>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"

namespace tg {
namespace {

// The safety net under every view: the elements of a view with shape, strides (>= 0) and offset
// must lie inside the storage, elements [0, capacity). The ops below keep this by their own
// checks; this one, O(dims), turns a slip in their arithmetic into a tg::Error, not a wild read.
// A view without elements reads nothing; its offset stays within [0, capacity].
void check_view_in_storage(const Tensor& base, const Shape& shape, const Shape& strides,
                           int64_t offset, const char* op) {
  const int64_t capacity =
      static_cast<int64_t>(base.storage()->nbytes() / dtype_size(base.dtype()));
  const bool no_elements = std::find(shape.begin(), shape.end(), 0) != shape.end();
  int64_t last = offset;  // the furthest element the view reaches
  bool fits = offset >= 0 && offset <= capacity;
  for (size_t d = 0; fits && !no_elements && d < shape.size(); ++d) {
    int64_t reach = 0;
    fits = strides[d] >= 0 && !__builtin_mul_overflow(shape[d] - 1, strides[d], &reach) &&
           !__builtin_add_overflow(last, reach, &last);
  }
  TG_CHECK(fits && (no_elements || last < capacity), "op '", op, "': a view of shape ",
           shape_str(shape), ", strides ", shape_str(strides), " at offset ", offset,
           " reaches outside its storage of ", capacity, " elements");
}

Tensor make_view(const Tensor& base, Shape shape, Shape strides, int64_t offset, const char* op) {
  check_shape(shape, op);
  check_view_in_storage(base, shape, strides, offset, op);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.storage();
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  return Tensor(impl);
}

// Replaces a single -1 by what makes the element count match.
Shape infer_shape(Shape shape, int64_t count, const char* op, const Shape& from) {
  int64_t known = 1, unknown = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TG_CHECK(unknown < 0, "op '", op, "': more than one -1 in ", shape_str(shape));
      unknown = static_cast<int64_t>(i);
    } else {
      TG_CHECK(shape[i] >= 0, "op '", op, "': negative size in ", shape_str(shape));
      TG_CHECK(!__builtin_mul_overflow(known, shape[i], &known), "op '", op, "': cannot view ",
               shape_str(from), " as ", shape_str(shape), ": its sizes multiply past int64");
    }
  }
  if (unknown >= 0) {
    TG_CHECK(known > 0 && count % known == 0, "op '", op, "': cannot view ", shape_str(from), " as ",
             shape_str(shape));
    shape[unknown] = count / known;
  }
  TG_CHECK(numel(shape) == count, "op '", op, "': cannot view ", shape_str(from), " (", count,
           " elements) as ", shape_str(shape));
  return shape;
}

}  // namespace

Tensor copy_of(const Tensor& t, DType dtype) {
  Tensor out = empty(t.shape(), dtype, t.device());
  kernels(t.device()).copy(t, out);
  return out;
}

Tensor Tensor::view(const Shape& requested) const {
  live("Tensor::view");
  const Shape shape = infer_shape(requested, numel(), "view", this->shape());
  TG_CHECK(is_contiguous(), "op 'view': tensor of shape ", shape_str(this->shape()),
           " is not contiguous; use reshape()");
  check_shape(shape, "view");  // before its strides are computed
  Tensor out = make_view(*this, shape, contiguous_strides(shape), offset(), "view");
  // d view(x)/dx: the gradient reshaped back
  record("view", {*this}, out, {}, [from = this->shape()](const Tensor& g, const Node&) {
    return Grads{g.reshape(from)};
  });
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  live("Tensor::reshape");
  return is_contiguous() ? view(shape) : contiguous().view(shape);
}

Tensor Tensor::permute(const Shape& order) const {
  live("Tensor::permute");
  TG_CHECK(static_cast<int64_t>(order.size()) == dim(), "op 'permute': order ", shape_str(order),
           " does not match a tensor of shape ", shape_str(shape()));
  Shape seen(order.size(), 0), shape(order.size()), strides(order.size()), inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t from = normalize_dim(order[i], dim(), "permute");
    TG_CHECK(!seen[from]++, "op 'permute': ", shape_str(order), " repeats dim ", from);
    shape[i] = this->shape()[from];
    strides[i] = this->strides()[from];
    inverse[from] = static_cast<int64_t>(i);
  }
  Tensor out = make_view(*this, shape, strides, offset(), "permute");
  // d permute(x)/dx: the gradient permuted back by the inverse order
  record("permute", {*this}, out, {},
         [inverse](const Tensor& g, const Node&) { return Grads{g.permute(inverse)}; });
  return out;
}

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  live("Tensor::transpose");
  Shape order(dim());
  std::iota(order.begin(), order.end(), 0);
  std::swap(order[normalize_dim(dim0, dim(), "transpose")], order[normalize_dim(dim1, dim(), "transpose")]);
  return permute(order);
}

namespace {

// Python's bound of a slice: a negative one counts from the end, then both are clamped to
// [0, extent], so x[-100:100] of a 3-long dim is all of it and x[5:] none of it.
int64_t clamp_slice_bound(int64_t bound, int64_t extent) {
  if (bound < 0) bound += extent;  // a size >= 0 added to a negative number cannot overflow
  return std::clamp<int64_t>(bound, 0, extent);
}

// Where position `index` of dim d of t starts: t's offset + index * stride, checked. A view
// without elements keeps t's offset instead (index * stride could point past the storage).
int64_t offset_of_position(const Tensor& t, int64_t d, int64_t index, bool has_elements,
                           const char* what) {
  if (!has_elements) return t.offset();
  return checked_add(t.offset(), checked_mul(index, t.strides()[d], what), what);
}

// The gradient of a view op (narrow, slice, select): zeros of the input's shape, with g copied
// into the same view of them.
template <typename View>
Tensor into_zeros(const Shape& input_shape, const Tensor& g, View same_view) {
  Tensor grad = zeros(input_shape, g.dtype(), g.device());
  kernels(g.device()).copy(g, same_view(grad));
  return grad;
}

}  // namespace

Tensor Tensor::narrow(int64_t dim, int64_t given_start, int64_t length) const {
  live("Tensor::narrow");
  const int64_t d = normalize_dim(dim, this->dim(), "narrow");
  const int64_t extent = shape()[d];
  // A negative start counts from the end (-1 is the last position); adding a size >= 0 to a
  // negative number cannot overflow.
  const int64_t start = given_start < 0 ? given_start + extent : given_start;
  // Compared without adding: start + length could overflow and pass.
  TG_CHECK(start >= 0 && length >= 0 && start <= extent && length <= extent - start,
           "op 'narrow': start ", given_start, " and length ", length, " do not fit in dim ", d,
           " of size ", extent, " (shape ", shape_str(shape()), ")");
  Shape shape = this->shape();
  shape[d] = length;
  const int64_t window_offset =
      offset_of_position(*this, d, start, length > 0 && numel() > 0, "op 'narrow': offset");
  Tensor out = make_view(*this, shape, strides(), window_offset, "narrow");
  // d narrow(x)/dx: the gradient placed back into zeros at [start, start + length)
  record("narrow", {*this}, out, {},
         [from = this->shape(), d, start, length](const Tensor& g, const Node&) {
           const auto same_view = [&](const Tensor& t) { return t.narrow(d, start, length); };
           return Grads{into_zeros(from, g, same_view)};
         });
  return out;
}

Tensor Tensor::slice(int64_t dim, int64_t given_start, int64_t given_end, int64_t step) const {
  live("Tensor::slice");
  const int64_t d = normalize_dim(dim, this->dim(), "slice");
  const int64_t extent = shape()[d];
  TG_CHECK(step >= 1, "op 'slice': step ", step, " must be positive (dim ", d, " of shape ",
           shape_str(shape()), ")");
  const int64_t start = clamp_slice_bound(given_start, extent);
  const int64_t end = std::max(start, clamp_slice_bound(given_end, extent));  // end < start: empty
  // ceil((end - start) / step) positions, start, start + step, ... below end; end - start is at
  // most extent, so nothing here overflows.
  const int64_t length = end == start ? 0 : (end - start - 1) / step + 1;
  Shape shape = this->shape(), strides = this->strides();
  shape[d] = length;
  // One position never walks its stride: keeping it lets x[::INT64_MAX] be a view, as in Python,
  // where stride * step would overflow.
  if (length > 1) strides[d] = checked_mul(strides[d], step, "op 'slice': stride");
  const int64_t window_offset =
      offset_of_position(*this, d, start, length > 0 && numel() > 0, "op 'slice': offset");
  Tensor out = make_view(*this, shape, strides, window_offset, "slice");
  // d slice(x)/dx: the gradient placed back into zeros at start, start + step, ... below end
  record("slice", {*this}, out, {},
         [from = this->shape(), d, start, end, step](const Tensor& g, const Node&) {
           const auto same_view = [&](const Tensor& t) { return t.slice(d, start, end, step); };
           return Grads{into_zeros(from, g, same_view)};
         });
  return out;
}

Tensor Tensor::select(int64_t dim, int64_t given_index) const {
  live("Tensor::select");
  const int64_t d = normalize_dim(dim, this->dim(), "select");
  const int64_t extent = shape()[d];
  const int64_t index = given_index < 0 ? given_index + extent : given_index;
  TG_CHECK(index >= 0 && index < extent, "op 'select': index ", given_index,
           " is out of range for dim ", d, " of size ", extent, " (shape ", shape_str(shape()),
           ")");
  Shape shape = this->shape(), strides = this->strides();
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  const int64_t position_offset =
      offset_of_position(*this, d, index, numel() > 0, "op 'select': offset");
  Tensor out = make_view(*this, shape, strides, position_offset, "select");
  // d select(x)/dx: the gradient placed back into zeros at that index, the dim put back
  record("select", {*this}, out, {},
         [from = this->shape(), d, index](const Tensor& g, const Node&) {
           const auto same_view = [&](const Tensor& t) { return t.select(d, index); };
           return Grads{into_zeros(from, g, same_view)};
         });
  return out;
}

Tensor expand_untaped(const Tensor& t, const Shape& shape) {
  const int64_t extra = static_cast<int64_t>(shape.size()) - t.dim();
  TG_CHECK(extra >= 0, "op 'expand': cannot expand ", shape_str(t.shape()), " to ", shape_str(shape));
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < t.dim(); ++i) {
    const int64_t have = t.shape()[i], want = shape[extra + i];
    TG_CHECK(have == want || have == 1, "op 'expand': cannot expand ", shape_str(t.shape()), " to ",
             shape_str(shape));
    strides[extra + i] = have == want ? t.strides()[i] : 0;
  }
  return make_view(t, shape, strides, t.offset(), "expand");
}

Tensor as_rows(const Tensor& t) {
  TG_CHECK(t.dim() >= 1, "as_rows: a 0-d tensor has no rows");
  return t.reshape({numel(Shape(t.shape().begin(), t.shape().end() - 1)), t.size(-1)});
}

std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  std::vector<int64_t> offsets(numel(batch));
  for (int64_t item = 0; item < static_cast<int64_t>(offsets.size()); ++item) {
    int64_t rest = item, offset = 0;  // item's index over the batch dims, last dim fastest
    for (size_t d = batch.size(); d-- > 0;) {
      offset += (rest % batch[d]) * t.strides()[d];
      rest /= batch[d];
    }
    offsets[item] = offset;
  }
  return offsets;
}

Tensor Tensor::expand(const Shape& requested) const {
  live("Tensor::expand");
  Shape shape = requested;
  const int64_t extra = static_cast<int64_t>(shape.size()) - dim();
  for (int64_t i = 0; i < dim() && extra >= 0; ++i) {
    if (shape[extra + i] == -1) shape[extra + i] = this->shape()[i];
  }
  Tensor out = expand_untaped(*this, shape);
  // d expand(x)/dx: the gradient summed over the expanded dims (the engine reduces it)
  record("expand", {*this}, out, {}, [](const Tensor& g, const Node&) { return Grads{g}; });
  return out;
}

Tensor Tensor::squeeze(int64_t dim) const {
  live("Tensor::squeeze");
  const int64_t d = normalize_dim(dim, this->dim(), "squeeze");
  const bool drops = shape()[d] == 1;  // like PyTorch, a dim of another size stays
  Shape shape = this->shape(), strides = this->strides();
  if (drops) {
    shape.erase(shape.begin() + d);
    strides.erase(strides.begin() + d);
  }
  Tensor out = make_view(*this, shape, strides, offset(), "squeeze");
  // d squeeze(x)/dx: the gradient with the size-1 dim put back
  record("squeeze", {*this}, out, {}, [d, drops](const Tensor& g, const Node&) {
    return Grads{drops ? g.unsqueeze(d) : g};
  });
  return out;
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  live("Tensor::unsqueeze");
  const int64_t d = normalize_dim(dim, this->dim() + 1, "unsqueeze");
  Shape shape = this->shape(), strides = this->strides();
  const int64_t stride =
      d < this->dim() ? checked_mul(strides[d], shape[d], "op 'unsqueeze': stride") : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  Tensor out = make_view(*this, shape, strides, offset(), "unsqueeze");
  // d unsqueeze(x)/dx: the gradient with the size-1 dim removed
  record("unsqueeze", {*this}, out, {}, [d](const Tensor& g, const Node&) { return Grads{g.squeeze(d)}; });
  return out;
}

Tensor Tensor::contiguous() const {
  live("Tensor::contiguous");
  if (is_contiguous()) return *this;
  Tensor out = copy_of(*this, dtype());
  // d contiguous(x)/dx = identity
  record("contiguous", {*this}, out, {}, [](const Tensor& g, const Node&) { return Grads{g}; });
  return out;
}

Tensor Tensor::clone() const {
  live("Tensor::clone");
  Tensor out = copy_of(*this, dtype());
  // d clone(x)/dx = identity
  record("clone", {*this}, out, {}, [](const Tensor& g, const Node&) { return Grads{g}; });
  return out;
}

Tensor Tensor::to(DType target) const {
  live("Tensor::to");
  if (target == dtype()) return *this;
  Tensor out = copy_of(*this, target);
  if (!is_floating(target)) return out;  // indices and masks carry no gradient
  // d cast(x)/dx = identity, cast back to the input's dtype
  record("to", {*this}, out, {}, [from = dtype()](const Tensor& g, const Node&) {
    return Grads{g.to(from)};
  });
  return out;
}

Tensor Tensor::to(Device target) const {
  live("Tensor::to");
  if (target == device()) return *this;
  Tensor out = copy_to_device(*this, target);
  if (!is_floating(dtype())) return out;
  // d to(x, device)/dx = identity, moved back to the input's device
  record("to_device", {*this}, out, {}, [from = device()](const Tensor& g, const Node&) {
    return Grads{g.to(from)};
  });
  return out;
}

namespace {

// What an in-place write needs: no tensor that requires grad while grad mode is on (the write
// would be invisible to the tape, as PyTorch refuses for a leaf).
void check_in_place_write(const Tensor& dst, const char* op) {
  TG_CHECK(!(grad_enabled() && dst.requires_grad()), "op '", op, "': the tensor of shape ",
           shape_str(dst.shape()), " requires grad, and an in-place write is not recorded on the "
           "tape; write under NoGrad (as an optimizer does) or into a detach()ed handle");
}

// copy_: a defined src that broadcasts to dst, and a dst that may be written in place and has no
// two elements in one place (an expanded view would take several values at once).
void check_copy_into(const Tensor& dst, const Tensor& src) {
  TG_CHECK(src.defined(), "op 'copy_': the source is an undefined tensor");
  check_in_place_write(dst, "copy_");
  for (int64_t d = 0; d < dst.dim(); ++d) {
    TG_CHECK(dst.shape()[d] <= 1 || dst.strides()[d] != 0, "op 'copy_': the destination of shape ",
             shape_str(dst.shape()), " has elements that share memory (an expanded view)");
  }
  const int64_t extra = dst.dim() - src.dim();
  bool broadcasts = extra >= 0;
  for (int64_t d = 0; broadcasts && d < src.dim(); ++d) {
    broadcasts = src.shape()[d] == 1 || src.shape()[d] == dst.shape()[extra + d];
  }
  TG_CHECK(broadcasts, "op 'copy_': cannot copy a tensor of shape ", shape_str(src.shape()),
           " into one of shape ", shape_str(dst.shape()));
}

}  // namespace

const Tensor& Tensor::copy_(const Tensor& src) const {
  live("Tensor::copy_");
  check_copy_into(*this, src);
  NoGrad no_grad;
  Tensor source = src.device() == device() ? src : copy_to_device(src, device());
  // Reading and writing one storage could read what was just written: read a copy.
  if (source.storage() == storage()) source = copy_of(source, source.dtype());
  kernels(device()).copy(expand_untaped(source, shape()), *this);
  bump_version();
  return *this;
}

const Tensor& Tensor::fill_(double value) const {
  live("Tensor::fill_");
  check_in_place_write(*this, "fill_");
  kernels(device()).fill(*this, value);
  bump_version();
  return *this;
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  TG_CHECK(!tensors.empty(), "op 'cat': no tensors given");
  const Tensor& first = tensors[0];
  const int64_t d = normalize_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  shape[d] = 0;
  for (const Tensor& t : tensors) {
    Shape other = t.shape();
    check_same_device("cat", {first, t});
    TG_CHECK(t.dim() == first.dim() && t.dtype() == first.dtype(),
             "op 'cat': tensors of shapes ", shape_str(first.shape()), " (", dtype_name(first.dtype()),
             ") and ", shape_str(t.shape()), " (", dtype_name(t.dtype()), ") cannot be joined");
    other[d] = first.shape()[d];
    TG_CHECK(other == first.shape(), "op 'cat': shapes ", shape_str(first.shape()), " and ",
             shape_str(t.shape()), " differ outside dim ", d);
    shape[d] = checked_add(shape[d], t.shape()[d], "op 'cat': the joined size");
  }
  Tensor out = empty(shape, first.dtype(), first.device());
  std::vector<int64_t> lengths;
  int64_t start = 0;
  {
    NoGrad no_grad;
    for (const Tensor& t : tensors) {
      Tensor window = out.narrow(d, start, t.shape()[d]);
      kernels(out.device()).copy(t, window);
      start += t.shape()[d];
      lengths.push_back(t.shape()[d]);
    }
  }
  // d cat(x_1..x_n)/dx_i: the slice of the gradient where x_i went
  record("cat", tensors, out, {}, [d, lengths](const Tensor& g, const Node&) {
    Grads grads;
    int64_t begin = 0;
    for (int64_t length : lengths) {
      grads.push_back(g.narrow(d, begin, length));
      begin += length;
    }
    return grads;
  });
  return out;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TG_CHECK(!tensors.empty(), "op 'stack': no tensors given");
  const int64_t d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> unsqueezed;
  for (const Tensor& t : tensors) {
    TG_CHECK(t.shape() == tensors[0].shape(), "op 'stack': shapes ", shape_str(tensors[0].shape()),
             " and ", shape_str(t.shape()), " differ");
    unsqueezed.push_back(t.unsqueeze(d));
  }
  return cat(unsqueezed, d);
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration view_ops({"view", "permute", "narrow", "slice", "select", "expand", "squeeze",
                               "unsqueeze", "contiguous", "clone", "to", "cat"});
// Recorded only when a tensor changes device (its gradcheck case runs on a GPU).
const OpRegistration view_ops_between_devices({"to_device"}, OpGradient::between_devices);

}  // namespace tg
