// embedding: index_select_rows forward; backward adds each gradient row into the row it came from.
#include "tapegrad/ops/embedding.h"

#include <cstdint>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/views.h"

namespace tg {
namespace {

// i64 indices of any shape and a floating [num_embeddings, dim] weight, on one device.
void check_embedding_inputs(const Tensor& indices, const Tensor& weight) {
  TG_CHECK(indices.defined() && weight.defined(), "op 'embedding': undefined tensor");
  TG_CHECK(indices.dtype() == DType::i64, "op 'embedding': indices must be i64, got ",
           dtype_name(indices.dtype()), " of shape ", shape_str(indices.shape()));
  TG_CHECK(weight.dim() == 2 && is_floating(weight.dtype()), "op 'embedding': weight must be a ",
           "floating [num_embeddings, dim] matrix, got ", dtype_name(weight.dtype()), " of shape ",
           shape_str(weight.shape()));
  check_same_device("embedding", {indices, weight});
}

// Every index (flat: the indices as one row) names a row of the weight. The indices' range comes
// back to the host (screen_indices: the op's one synchronisation). Nothing should be ignored:
// `ignore` = INT64_MIN skips only entries of that (out of range) value, and a count short of
// numel() reveals them.
void check_indices_in_range(const Tensor& flat, const Tensor& indices, const Tensor& weight) {
  const int64_t rows = weight.size(0);
  const IndexSummary screened =
      kernels(flat.device()).screen_indices(flat, INT64_MIN, Tensor(), Tensor());
  if (screened.kept != flat.numel() || (screened.kept > 0 && (screened.min < 0 || screened.max >= rows))) {
    const int64_t bad = screened.kept != flat.numel() ? INT64_MIN
                        : screened.min < 0           ? screened.min
                                                     : screened.max;
    fail("op 'embedding': index ", bad, " in indices of shape ", shape_str(indices.shape()),
         " is out of range for weight of shape ", shape_str(weight.shape()), "; valid: [0, ",
         rows, ")");
  }
}

}  // namespace

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  check_embedding_inputs(indices, weight);
  const int64_t rows = weight.size(0), width = weight.size(1);
  const Tensor flat = indices.contiguous().reshape({-1});
  check_indices_in_range(flat, indices, weight);
  Tensor out = empty({flat.numel(), width}, weight.dtype(), weight.device());
  kernels(weight.device()).index_select_rows(weight.detach().contiguous(), flat, out);
  Shape out_shape = indices.shape();
  out_shape.push_back(width);
  out = out.view(out_shape);
  // d out[r, :]/d weight[index[r], :] = identity: gradient rows add up into their weight rows
  record("embedding", {indices, weight}, out, {flat},
         [rows, width](const Tensor& g, const Node& n) {
           Tensor grad = zeros({rows, width}, g.dtype(), g.device());
           const Tensor g_rows = as_rows(g.contiguous());
           kernels(g.device()).index_add_rows(g_rows, n.saved[0], grad);
           return Grads{Tensor(), grad};
         });
  return out;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration embedding_ops({"embedding"});

}  // namespace tg
