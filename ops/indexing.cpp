// Indexing along a dim: sort / argsort, gather, scatter_add, index_select (ops/indexing.h).
// gather and scatter_add are each other's backward; every op reads its values through the two
// kernels gather_along and scatter_add_along (autograd/kernels.h) on a "line" view of the indexed
// tensor, and checks its indices once on the host first.
#include "tapegrad/ops/indexing.h"

#include <algorithm>
#include <cstdint>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/ops/views.h"

namespace tg {
namespace {

// Throws unless every tensor is defined (the op's name and which argument).
void require_indexing_defined(const char* op, const Tensor& x, const char* what) {
  TG_CHECK(x.defined(), "op '", op, "': ", what, " is undefined");
}

// Throws unless index is i64 (the op, and index's dtype and shape).
void require_i64_index(const char* op, const Tensor& index) {
  require_indexing_defined(op, index, "index");
  TG_CHECK(index.dtype() == DType::i64, "op '", op, "': index must be i64, got ",
           dtype_name(index.dtype()), " of shape ", shape_str(index.shape()));
}

// index with each broadcast dim (stride 0) narrowed to one entry: its distinct entries, which an
// expand()ed index holds far fewer of than it shows.
Tensor distinct_index_entries(const Tensor& index) {
  Tensor entries = index.detach();
  for (int64_t d = 0; d < index.dim(); ++d) {
    if (index.strides()[d] == 0 && index.shape()[d] > 1) entries = entries.narrow(d, 0, 1);
  }
  return entries.contiguous();
}

// Throws unless every entry of index lies in [0, extent), naming the op, the offending entry and
// the shapes. The smallest and largest entry come back to the host (the op's one sync).
void require_indices_in_range(const char* op, const Tensor& index, int64_t extent, int64_t dim,
                              const Tensor& x) {
  if (index.numel() == 0) return;
  const Tensor entries = distinct_index_entries(index);
  const IndexSummary found =
      kernels(entries.device()).screen_indices(entries, INT64_MIN, Tensor(), Tensor());
  const bool all_seen = found.kept == entries.numel();  // INT64_MIN itself is skipped
  if (all_seen && found.min >= 0 && found.max < extent) return;
  const int64_t bad = !all_seen ? INT64_MIN : found.min < 0 ? found.min : found.max;
  fail("op '", op, "': index ", bad, " in index of shape ", shape_str(index.shape()),
       " is out of range for dim ", dim, " of x of shape ", shape_str(x.shape()), "; valid: [0, ",
       extent, ")");
}

// Throws unless index.size(d) <= limit.size(d) for every d (but `except`, when >= 0).
void require_index_fits(const char* op, const Tensor& index, const Tensor& limit,
                        const char* limit_name, int64_t except) {
  for (int64_t d = 0; d < index.dim(); ++d) {
    TG_CHECK(d == except || index.shape()[d] <= limit.shape()[d], "op '", op,
             "': index of shape ", shape_str(index.shape()), " is larger than ", limit_name,
             " of shape ", shape_str(limit.shape()), " in dim ", d);
  }
}

// The view of t that gather_along and scatter_add_along read through: `shape` (t's rank, no
// larger than t off `dim`), stride 0 on dim, starting where t starts. Needs t.size(dim) > 0.
Tensor indexing_line(const Tensor& t, int64_t dim, const Shape& shape) {
  Tensor line = t.detach();
  for (int64_t d = 0; d < t.dim(); ++d) line = line.narrow(d, 0, d == dim ? 1 : shape[d]);
  return expand_untaped(line, shape);
}

// out (index's shape) = x's entries picked by index along dim, untaped; index already checked.
Tensor gather_untaped(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  if (index.numel() == 0) return out;
  kernels(x.device()).gather_along(indexing_line(x, dim, index.shape()), x.strides()[dim], index,
                                   out);
  return out;
}

// target[... index[p] ...] += src[p] over index's positions, in place, untaped (target
// contiguous and f32 / f64; index already checked; src at least index's size in every dim).
void scatter_add_into(const Tensor& target, int64_t dim, const Tensor& index, const Tensor& src) {
  if (index.numel() == 0) return;
  Tensor src_part = src.detach();
  for (int64_t d = 0; d < src.dim(); ++d) src_part = src_part.narrow(d, 0, index.shape()[d]);
  kernels(target.device()).scatter_add_along(src_part.to(target.dtype()), index,
                                             indexing_line(target, dim, index.shape()),
                                             target.strides()[dim]);
}

// zeros of `shape` in dtype, with src added at the positions index picks along dim. The sums of a
// half dtype run in f32 and are rounded once.
Tensor scatter_add_into_zeros(const Shape& shape, DType dtype, int64_t dim, const Tensor& index,
                              const Tensor& src) {
  Tensor sums = zeros(shape, is_half(dtype) ? DType::f32 : dtype, src.device());
  scatter_add_into(sums, dim, index, src);
  return sums.to(dtype);
}

// The order that sorts x along dim (i64, x's shape), for a dim already normalized.
Tensor sorting_order(const Tensor& x, int64_t dim, bool descending, const char* op) {
  const DType dtype = x.dtype();
  TG_CHECK(is_floating(dtype) || dtype == DType::i64, "op '", op, "': x must be f32, f64, f16, ",
           "bf16 or i64, got ", dtype_name(dtype), " of shape ", shape_str(x.shape()));
  const Tensor keys = x.detach().to(is_half(dtype) ? DType::f32 : dtype).contiguous();
  Tensor order = empty(x.shape(), DType::i64, x.device());
  if (x.numel() == 0) return order;
  kernels(x.device()).argsort_dim(keys, split_at(x.shape(), dim), descending, order);
  return order;
}

// The 0-d tensor t as [1] (ops along dim 0 of a scalar treat it as one entry, as PyTorch does).
Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

}  // namespace

SortResult sort(const Tensor& x_in, int64_t dim, bool descending) {
  require_indexing_defined("sort", x_in, "x");
  const Tensor x = at_least_1d(x_in);
  const int64_t d = normalize_dim(dim, x.dim(), "sort");
  const Tensor order = sorting_order(x, d, descending, "sort");
  Tensor values = gather_untaped(x, d, order);
  // d values[p]/d x[order[p]] = 1: the gradient goes back to where each value came from
  if (is_floating(x.dtype())) {
    record("sort", {x}, values, {order}, [d, from = x.shape()](const Tensor& g, const Node& n) {
      return Grads{scatter_add_into_zeros(from, g.dtype(), d, n.saved[0], g)};
    });
  }
  if (x_in.dim() == 0) return {values.reshape({}), order.reshape({})};
  return {values, order};
}

Tensor argsort(const Tensor& x_in, int64_t dim, bool descending) {
  require_indexing_defined("argsort", x_in, "x");
  const Tensor x = at_least_1d(x_in);
  const int64_t d = normalize_dim(dim, x.dim(), "argsort");
  const Tensor order = sorting_order(x, d, descending, "argsort");
  return x_in.dim() == 0 ? order.reshape({}) : order;
}

namespace {

// gather: x and an i64 index of x's rank, on one device.
void check_gather_inputs(const Tensor& x, const Tensor& index) {
  require_indexing_defined("gather", x, "x");
  require_i64_index("gather", index);
  check_same_device("gather", {x, index});
  TG_CHECK(x.dim() == index.dim(), "op 'gather': index of shape ",
           shape_str(index.shape()), " must have the rank of x of shape ",
           shape_str(x.shape()));
}

// scatter_add: x and src of one floating dtype, and an i64 index, all of one rank and device.
void check_scatter_add_inputs(const Tensor& x, const Tensor& index, const Tensor& src) {
  require_indexing_defined("scatter_add", x, "x");
  require_indexing_defined("scatter_add", src, "src");
  require_i64_index("scatter_add", index);
  check_same_device("scatter_add", {x, index, src});
  TG_CHECK(is_floating(x.dtype()) && src.dtype() == x.dtype(), "op 'scatter_add': x and ",
           "src must have one floating dtype, got ", dtype_name(x.dtype()), " and ",
           dtype_name(src.dtype()));
  TG_CHECK(x.dim() == index.dim() && src.dim() == index.dim(), "op 'scatter_add': ",
           "x of shape ", shape_str(x.shape()), ", index of shape ", shape_str(index.shape()),
           " and src of shape ", shape_str(src.shape()), " must have one rank");
}

// index_select: x of at least one dim and a 1-D (or 0-d) i64 index, on one device.
void check_index_select_inputs(const Tensor& x, const Tensor& index) {
  require_indexing_defined("index_select", x, "x");
  require_i64_index("index_select", index);
  check_same_device("index_select", {x, index});
  TG_CHECK(x.dim() >= 1 && index.dim() <= 1, "op 'index_select': needs x of at least one dim ",
           "and a 1-D index, got x of shape ", shape_str(x.shape()), " and index of shape ",
           shape_str(index.shape()));
}

}  // namespace

Tensor gather(const Tensor& x_in, int64_t dim, const Tensor& index_in) {
  check_gather_inputs(x_in, index_in);
  const Tensor x = at_least_1d(x_in), index = at_least_1d(index_in);
  const int64_t d = normalize_dim(dim, x.dim(), "gather");
  require_index_fits("gather", index, x, "x", d);
  require_indices_in_range("gather", index, x.shape()[d], d, x_in);
  Tensor out = gather_untaped(x, d, index);
  // d out[p]/d x[p with index[p] at dim] = 1: the gradient is added back there (scatter_add)
  record("gather", {x, index}, out, {index},
         [d, from = x.shape()](const Tensor& g, const Node& n) {
           return Grads{scatter_add_into_zeros(from, g.dtype(), d, n.saved[0], g), Tensor()};
         });
  return index_in.dim() == 0 ? out.reshape({}) : out;
}

Tensor scatter_add(const Tensor& x_in, int64_t dim, const Tensor& index_in, const Tensor& src_in) {
  check_scatter_add_inputs(x_in, index_in, src_in);
  const Tensor x = at_least_1d(x_in), index = at_least_1d(index_in), src = at_least_1d(src_in);
  const int64_t d = normalize_dim(dim, x.dim(), "scatter_add");
  require_index_fits("scatter_add", index, src, "src", -1);
  require_index_fits("scatter_add", index, x, "x", d);
  require_indices_in_range("scatter_add", index, x.shape()[d], d, x_in);
  const DType sum_dtype = is_half(x.dtype()) ? DType::f32 : x.dtype();
  Tensor out = x.detach().to(sum_dtype).clone();
  scatter_add_into(out, d, index, src);
  out = out.to(x.dtype());
  // d out/dx = identity; d out[p with index[p] at dim]/d src[p] = 1: src's gradient is gathered
  // from there (zero where src was not read)
  record("scatter_add", {x, index, src}, out, {index},
         [d, src_shape = src.shape()](const Tensor& g, const Node& n) {
           const Tensor& picked = n.saved[0];
           Tensor grad_src = zeros(src_shape, g.dtype(), g.device());
           Tensor window = grad_src;
           for (int64_t k = 0; k < grad_src.dim(); ++k) {
             window = window.narrow(k, 0, picked.shape()[k]);
           }
           if (picked.numel() > 0) {
             kernels(g.device()).gather_along(indexing_line(g, d, picked.shape()), g.strides()[d],
                                              picked, window);
           }
           return Grads{g, Tensor(), grad_src};
         });
  return x_in.dim() == 0 ? out.reshape({}) : out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index_in) {
  check_index_select_inputs(x, index_in);
  const int64_t d = normalize_dim(dim, x.dim(), "index_select");
  require_indices_in_range("index_select", index_in, x.shape()[d], d, x);
  // The index as a broadcast view of out's shape: entry k along dim, the same in every other dim.
  Shape out_shape = x.shape(), index_shape(x.dim(), 1);
  out_shape[d] = index_shape[d] = index_in.numel();
  const Tensor index = expand_untaped(index_in.detach().reshape(index_shape), out_shape);
  Tensor out = gather_untaped(x, d, index);
  // d out[.., k, ..]/d x[.., index[k], ..] = 1: gradient slices added back (index_add)
  record("index_select", {x, index_in}, out, {index},
         [d, from = x.shape()](const Tensor& g, const Node& n) {
           return Grads{scatter_add_into_zeros(from, g.dtype(), d, n.saved[0], g), Tensor()};
         });
  return out;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration indexing_ops({"sort", "gather", "scatter_add", "index_select"});
// Not differentiable: they record nothing, and record() refuses their names.
const OpRegistration indexing_ops_without_gradient({"argsort"}, OpGradient::none);

}  // namespace tg
