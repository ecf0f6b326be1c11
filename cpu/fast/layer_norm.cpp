// layer_norm's two passes in one kernel call each: the forward (Kernels::layer_norm_forward) and
// the backward (Kernels::layer_norm_backward).
//
// The forward. Composed, it is normalize_rows (cpu/reduce.cpp), whose two sums per row run one
// element after another (a chain of n dependent adds: the plain loop keeps the reference order),
// then a mul by the weight and an add of the bias: three passes over [rows, n] and three tensors
// allocated. Here a row is read while in L1 for its mean and its variance, in eight running sums
// each, and written once: xhat, saved for the backward (not at all when nothing is recorded), and
// y = xhat weight + bias, computed as the ops compute it (a product, then a sum: the same bits
// from the same xhat). The sums' order differs from normalize_rows', within rounding.
//
// The backward, per row, with dxhat = G w,  dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat));
// and the column sums dw = sum of G xhat, db = sum of G.
//
// Composed from ops (ops/layer_norm.cpp's plain path) that is ten passes over [rows, n] tensors
// and seven of them allocated, for what is one read of G and xhat and one write of dx: here each
// row is read once for its two sums and once for dx, while it is in L1. The column sums run over
// fixed blocks of kLayerNormRows rows, each block's into its own row of a scratch buffer, and the
// blocks are added in order at the end: the same bits at any thread count (the sums' order differs
// from one column sum over all rows, within rounding).
//
// The plain paths are the ops, which these kernels leave to the caller by returning false: for
// f16 / bf16, and when the fast paths are off (runtime/features.h). tests/cpu/fast/test_layer_norm.cpp
// compares the two.
#include <algorithm>
#include <cmath>

#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/features.h"

namespace tg::cpu {
namespace {

constexpr int64_t kLayerNormRows = 32;  // rows of a block of the column sums

// The sum of row[k] - shift over a row, squared when kSquares, in eight running sums (the
// compiler keeps them in vector registers).
template <bool kSquares, typename T>
T sum_of_row(const T* row, int64_t n, T shift) {
  T lanes[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) {
      const T centred = row[k + j] - shift;
      lanes[j] += kSquares ? centred * centred : centred;
    }
  }
  T total = 0;
  for (int j = 0; j < 8; ++j) total += lanes[j];
  for (; k < n; ++k) total += kSquares ? (row[k] - shift) * (row[k] - shift) : row[k] - shift;
  return total;
}

// One row of the forward: its mean and rstd, xhat (where asked) and y.
template <typename T>
void layer_norm_row_forward(const T* x, int64_t n, T eps, const T* w, const T* b, T* xhat, T* y,
                            T& mean, T& rstd) {
  const T mu = sum_of_row<false>(x, n, T(0)) / T(n);
  const T inv_std = T(1) / std::sqrt(sum_of_row<true>(x, n, mu) / T(n) + eps);
  for (int64_t k = 0; k < n; ++k) {
    const T normalised = (x[k] - mu) * inv_std;
    if (xhat) xhat[k] = normalised;
    const T scaled = w ? normalised * w[k] : normalised;
    y[k] = b ? scaled + b[k] : scaled;
  }
  mean = mu;
  rstd = inv_std;
}

// What the forward kernel takes: x [rows, n] (both > 0), weight and bias (where defined), all f32
// or all f64 and contiguous, with the fast paths on.
bool forward_takes(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const DType dtype = x.dtype();
  if (!fast_paths_enabled() || (dtype != DType::f32 && dtype != DType::f64)) return false;
  for (const Tensor* t : {&x, &weight, &bias}) {
    if (t->defined() && (t->dtype() != dtype || !t->is_contiguous())) return false;
  }
  return x.dim() == 2 && x.size(0) > 0 && x.size(1) > 0;
}

template <typename T>
void layer_norm_forward_rows(const Tensor& x_t, T eps, const Tensor& w_t, const Tensor& b_t,
                             const Tensor& y_t, const Tensor& xhat_t, const Tensor& mean_t,
                             const Tensor& rstd_t) {
  const int64_t n = x_t.size(-1), rows = x_t.numel() / n;
  const T* x = x_t.data_as<T>();
  const T* w = w_t.defined() ? w_t.data_as<T>() : nullptr;
  const T* b = b_t.defined() ? b_t.data_as<T>() : nullptr;
  T* xhat = xhat_t.defined() ? xhat_t.data_as<T>() : nullptr;
  T* y = y_t.data_as<T>();
  T* mean = mean_t.data_as<T>();
  T* rstd = rstd_t.data_as<T>();
  parallel_for(rows, grain_for(3.0 * static_cast<double>(n), 1 << 15), [&](int64_t first,
                                                                          int64_t past) {
    for (int64_t r = first; r < past; ++r) {
      layer_norm_row_forward(x + r * n, n, eps, w, b, xhat ? xhat + r * n : nullptr, y + r * n,
                             mean[r], rstd[r]);
    }
  });
}

// The two sums of one row that dx needs: of dxhat and of dxhat xhat, in eight running sums each
// (the compiler keeps them in vector registers).
template <typename T>
void layer_norm_row_sums(const T* g, const T* w, const T* xhat, int64_t n, T& sum_dxhat,
                         T& sum_projected) {
  T lanes_a[8] = {}, lanes_b[8] = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    for (int j = 0; j < 8; ++j) {
      const T dxhat = w ? g[k + j] * w[k + j] : g[k + j];
      lanes_a[j] += dxhat;
      lanes_b[j] += dxhat * xhat[k + j];
    }
  }
  T a = 0, b = 0;
  for (int j = 0; j < 8; ++j) a += lanes_a[j], b += lanes_b[j];
  for (; k < n; ++k) {
    const T dxhat = w ? g[k] * w[k] : g[k];
    a += dxhat;
    b += dxhat * xhat[k];
  }
  sum_dxhat = a;
  sum_projected = b;
}

// dx's row: rstd (dxhat - mean_a - xhat mean_b).
template <typename T>
void layer_norm_row_dx(const T* g, const T* w, const T* xhat, int64_t n, T rstd, T mean_a,
                       T mean_b, T* dx) {
  for (int64_t k = 0; k < n; ++k) {
    const T dxhat = w ? g[k] * w[k] : g[k];
    dx[k] = rstd * (dxhat - mean_a - xhat[k] * mean_b);
  }
}

// Block `block`'s rows: their dx, and their column sums into dw_part and db_part (either null).
template <typename T>
void layer_norm_block(const T* g, const T* xhat, const T* rstd, const T* w, int64_t rows,
                      int64_t n, int64_t block, T* dx, T* dw_part, T* db_part) {
  const int64_t first = block * kLayerNormRows, past = std::min(rows, first + kLayerNormRows);
  if (dw_part) std::fill(dw_part, dw_part + n, T(0));
  if (db_part) std::fill(db_part, db_part + n, T(0));
  for (int64_t r = first; r < past; ++r) {
    const T* g_row = g + r * n;
    const T* xhat_row = xhat + r * n;
    if (dx) {
      T sum_dxhat, sum_projected;
      layer_norm_row_sums(g_row, w, xhat_row, n, sum_dxhat, sum_projected);
      layer_norm_row_dx(g_row, w, xhat_row, n, rstd[r], sum_dxhat / T(n), sum_projected / T(n),
                        dx + r * n);
    }
    if (dw_part) {
      for (int64_t k = 0; k < n; ++k) dw_part[k] += g_row[k] * xhat_row[k];
    }
    if (db_part) {
      for (int64_t k = 0; k < n; ++k) db_part[k] += g_row[k];
    }
  }
}

// out = the column sums of the blocks' partial sums (`half` 0: dw's, 1: db's), added in block
// order.
template <typename T>
void layer_norm_add_blocks(const T* scratch, int64_t blocks, int64_t n, int64_t half, T* out) {
  std::fill(out, out + n, T(0));
  for (int64_t block = 0; block < blocks; ++block) {
    const T* part = scratch + block * 2 * n + half * n;
    for (int64_t k = 0; k < n; ++k) out[k] += part[k];
  }
}

template <typename T>
void layer_norm_backward_rows(const Tensor& g_t, const Tensor& xhat_t, const Tensor& rstd_t,
                              const Tensor& w_t, const Tensor& dx_t, const Tensor& dw_t,
                              const Tensor& db_t, CpuKernels& kernels) {
  const int64_t rows = g_t.size(0), n = g_t.size(1);
  const int64_t blocks = (rows + kLayerNormRows - 1) / kLayerNormRows;
  const T* w = w_t.defined() ? w_t.data_as<T>() : nullptr;
  T* dx = dx_t.defined() ? dx_t.data_as<T>() : nullptr;
  // Each block's column sums: dw's in the first half of its scratch row, db's in the second.
  const bool sums = dw_t.defined() || db_t.defined();
  const size_t scratch_bytes = sums ? static_cast<size_t>(blocks * 2 * n) * sizeof(T) : 0;
  T* scratch = sums ? static_cast<T*>(kernels.allocate(scratch_bytes)) : nullptr;
  const int64_t grain = grain_for(3.0 * static_cast<double>(kLayerNormRows * n), 1 << 15);
  parallel_for(blocks, grain, [&](int64_t first, int64_t past) {
    for (int64_t block = first; block < past; ++block) {
      T* part = sums ? scratch + block * 2 * n : nullptr;
      layer_norm_block(g_t.data_as<T>(), xhat_t.data_as<T>(), rstd_t.data_as<T>(), w, rows, n,
                       block, dx, dw_t.defined() ? part : nullptr,
                       db_t.defined() ? part + n : nullptr);
    }
  });
  if (dw_t.defined()) layer_norm_add_blocks(scratch, blocks, n, 0, dw_t.data_as<T>());
  if (db_t.defined()) layer_norm_add_blocks(scratch, blocks, n, 1, db_t.data_as<T>());
  if (scratch) kernels.deallocate(scratch, scratch_bytes);
}

}  // namespace

bool CpuKernels::layer_norm_forward(const Tensor& x, double eps, const Tensor& weight,
                                    const Tensor& bias, Tensor* y, Tensor* xhat, Tensor* mean,
                                    Tensor* rstd) {
  if (!forward_takes(x, weight, bias)) return false;
  const DType dtype = x.dtype();
  const int64_t rows = x.size(0), n = x.size(1);
  *y = empty({rows, n}, dtype, kCPU);
  const bool affine = weight.defined() || bias.defined();
  if (xhat) *xhat = affine ? empty({rows, n}, dtype, kCPU) : *y;  // without weight and bias, y is xhat
  *mean = empty({rows}, dtype, kCPU);
  *rstd = empty({rows}, dtype, kCPU);
  dispatch_floating(dtype, "layer_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_forward_rows<T>(x, static_cast<T>(eps), weight, bias, *y,
                               xhat && affine ? *xhat : Tensor(), *mean, *rstd);
  });
  return true;
}

bool CpuKernels::layer_norm_backward(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                                     const Tensor& weight, Tensor* dx, Tensor* dweight,
                                     Tensor* dbias) {
  const DType dtype = g.dtype();
  if (!fast_paths_enabled() || (dtype != DType::f32 && dtype != DType::f64)) return false;
  for (const Tensor* t : {&xhat, &rstd, &weight}) {
    if (t->defined() && (t->dtype() != dtype || !t->is_contiguous())) return false;
  }
  if (!g.is_contiguous() || g.dim() != 2 || g.size(0) == 0 || g.size(1) == 0) return false;
  const int64_t n = g.size(1);
  // each wanted gradient, allocated here; an unwanted one stays undefined
  const auto wanted = [&](Tensor* grad, const Shape& shape) {
    return grad ? (*grad = empty(shape, dtype, kCPU)) : Tensor();
  };
  const Tensor d_x = wanted(dx, g.shape()), d_weight = wanted(dweight, {n}),
               d_bias = wanted(dbias, {n});
  dispatch_floating(dtype, "layer_norm_backward", [&](auto tag) {
    layer_norm_backward_rows<decltype(tag)>(g, xhat, rstd, weight, d_x, d_weight, d_bias, *this);
  });
  return true;
}

}  // namespace tg::cpu
