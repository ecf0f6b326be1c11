// Reductions: sum, mean, max over dims.
#include "tapegrad/ops/reduce.h"

#include <algorithm>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

// Sorted, distinct, non-negative dims; all dims when `dims` is empty.
std::vector<int64_t> reduced_dims(const Tensor& x, const std::vector<int64_t>& dims, const char* op) {
  std::vector<int64_t> result;
  for (int64_t d : dims) result.push_back(normalize_dim(d, x.dim(), op));
  if (dims.empty()) for (int64_t d = 0; d < x.dim(); ++d) result.push_back(d);
  std::sort(result.begin(), result.end());
  TG_CHECK(std::adjacent_find(result.begin(), result.end()) == result.end(), "op '", op,
           "': dims ", shape_str(dims), " repeat a dim");
  return result;
}

Shape kept_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape kept = shape;
  for (int64_t d : dims) kept[d] = 1;
  return kept;
}

Shape dropped_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape dropped;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (!std::binary_search(dims.begin(), dims.end(), d)) dropped.push_back(shape[d]);
  }
  return dropped;
}

void check_floating(const Tensor& x, const char* op) {
  TG_CHECK(x.defined() && is_floating(x.dtype()), "op '", op, "': needs a floating tensor, got ",
           x.defined() ? dtype_name(x.dtype()) : "undefined", " of shape ",
           x.defined() ? shape_str(x.shape()) : "[]");
}

}  // namespace

DimSplit split_at(const Shape& shape, int64_t dim) {
  DimSplit split;
  for (int64_t i = 0; i < dim; ++i) split.outer *= shape[i];
  split.n = shape[dim];
  for (int64_t i = dim + 1; i < static_cast<int64_t>(shape.size()); ++i) split.inner *= shape[i];
  return split;
}

Tensor sum(const Tensor& x_in, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast
  check_floating(x, "sum");
  const std::vector<int64_t> reduced = reduced_dims(x, dims, "sum");
  const Shape kept = kept_shape(x.shape(), reduced);
  Tensor current = x.detach().contiguous();
  Shape shape = x.shape();
  // No elements: the sums are 0. Summing dim by dim would allocate the partial sums, as large as
  // 2^62 elements for an empty [2^62, 0] (the last dim goes first).
  if (x.numel() == 0) current = zeros(kept, x.dtype(), x.device());
  for (auto d = reduced.rbegin(); x.numel() != 0 && d != reduced.rend(); ++d) {
    const DimSplit split = split_at(shape, *d);
    shape[*d] = 1;
    Tensor summed = empty(shape, x.dtype(), x.device());
    kernels(x.device()).sum_dim(current, split, summed);
    current = summed;
  }
  Tensor out = current.view(keepdim ? kept : dropped_shape(x.shape(), reduced));
  // d sum(x)/dx = 1 everywhere: the gradient broadcast back over the summed dims
  record("sum", {x}, out, {}, [kept, from = x.shape()](const Tensor& g, const Node&) {
    return Grads{g.reshape(kept).expand(from)};
  });
  return out;
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_floating(x, "mean");
  int64_t count = 1;
  for (int64_t d : reduced_dims(x, dims, "mean")) count *= x.shape()[d];
  // mean = sum / count, so d mean/dx = 1 / count (through sum and mul)
  return mul(sum(x, dims, keepdim), 1.0 / static_cast<double>(std::max<int64_t>(count, 1)));
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

// The largest element of each slice along `dim` and its index: the first one on a tie. NaN
// propagates, as in PyTorch: a slice holding a NaN gives NaN, at the index of its first NaN (every
// device's kernel, cpu/reduce.cpp and cuda/reduce.cu, picks the same element).
MaxResult max(const Tensor& x_in, int64_t dim, bool keepdim) {
  const Tensor x = autocast_to_f32(x_in);  // f32 under autocast
  check_floating(x, "max");
  const int64_t d = normalize_dim(dim, x.dim(), "max");
  TG_CHECK(x.shape()[d] > 0, "op 'max': dim ", d, " of shape ", shape_str(x.shape()), " is empty");
  const DimSplit split = split_at(x.shape(), d);
  const Shape kept = kept_shape(x.shape(), {d});
  Tensor values = empty(kept, x.dtype(), x.device());
  Tensor indices = empty(kept, DType::i64, x.device());
  kernels(x.device()).max_dim(x.detach().contiguous(), split, values, indices);
  if (!keepdim) {
    values = values.squeeze(d);
    indices = indices.squeeze(d);
  }
  // d max(x)/dx = 1 at the (first) largest element, 0 elsewhere
  record("max", {x}, values, {indices}, [split, kept, from = x.shape()](const Tensor& g, const Node& n) {
    Tensor grad = zeros(from, g.dtype(), g.device());
    kernels(g.device()).scatter_add_dim(g.contiguous(), split, n.saved[0].contiguous(), grad);
    return Grads{grad};
  });
  return {values, indices};
}

Tensor max(const Tensor& x) {
  TG_CHECK(x.numel() > 0, "op 'max': tensor of shape ", shape_str(x.shape()), " is empty");
  return max(x.reshape({-1}), 0).values;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration reduce_ops({"sum", "max"});

}  // namespace tg
