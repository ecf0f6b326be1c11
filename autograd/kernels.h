#pragma once
// The kernel interface: everything a device must do for the ops in ops/.
// ops/ never asks which device a tensor is on; it calls kernels(tensor.device()).
// The CPU implementation is in cpu/ (plain loops) and cpu/fast/ (their vectorised twins);
// cpu/README.md pairs them, and cpu/reference.h has the plain-loop reference of the kernels whose
// entry point is the fast one (GEMM, softmax, attention).
//
// Conventions: tensors passed as outputs are contiguous (attention's excepted: see
// attention_forward) and already allocated. Inputs may have any strides unless a comment says
// "contiguous". Floating kernels handle f32 and f64; copy, fill, unary, binary, where, sum_dim,
// uniform, gemm and attention also f16 and bf16 (mixed precision: computed and accumulated in f32,
// rounded once on store). copy, fill, where, compare and predicate take every dtype.
#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

enum class UnaryOp {
  neg, exp, log, sqrt, tanh, sigmoid, relu, gelu,
  relu_grad,   // 1 where x > 0, else 0
  gelu_grad,   // d gelu / dx = Phi(x) + x * phi(x)
  pow,         // x ^ scalar
  add_scalar,  // x + scalar
  mul_scalar,  // x * scalar
  ge_scalar,   // 1 where x >= scalar, else 0
  sin, cos, abs,
  sign,        // -1, 0 or 1 (0 at 0), NaN stays NaN
  clamp_min,   // max(x, scalar), NaN stays NaN
  clamp_max,   // min(x, scalar), NaN stays NaN
};

enum class BinaryOp { add, sub, mul, div, eq };  // eq gives 1 or 0 in the inputs' dtype

// Comparisons and logic: a bool result from two inputs of one dtype (any dtype). logical_and and
// logical_or read each input as "is not zero" (NaN is not zero), as PyTorch does.
enum class CompareOp { eq, ne, lt, le, gt, ge, logical_and, logical_or };
// Predicates of one input (any dtype), a bool result: isnan and isinf are false for integers;
// logical_not is x == 0.
enum class PredicateOp { isnan, isinf, logical_not };

// C[i] = alpha * op(A[i]) @ op(B[i]) + beta * C[i] for every batch item i, row-major,
// with the item's offsets (in elements) from the base pointers.
struct GemmBatch {
  DType dtype = DType::f32;
  bool transpose_a = false, transpose_b = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  double alpha = 1.0, beta = 0.0;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  std::vector<int64_t> a_offsets, b_offsets, c_offsets;
};

// A contiguous tensor seen as [outer, n, inner]: reductions and softmax run over the middle axis.
struct DimSplit {
  int64_t outer = 1, n = 1, inner = 1;
};

// Scaled dot-product attention over a batch of N = B H independent (query, key, value) problems:
// q [B, H, Sq, head_dim], k [B, H, Sk, head_dim], v [B, H, Sk, value_dim], item n = b H + h.
// Their strides on B, H and S are any (the per-head views of a projection's output, or of one
// packed [B, S, 3, H, head_dim] projection, come as they are, uncopied); the last dim has stride
// 1. Query i may attend key j unless `causal` and j > i, or the mask says false there. Dropout
// drops probability (n, i, j) when Philox number n*Sq*Sk + i*Sk + j of (seed, offset) is below
// dropout_p (the numbering that dropout() on the [N, Sq, Sk] weights uses, so both attention
// paths drop the same entries).
struct AttentionProblem {
  Tensor q, k, v;
  double scale = 1.0;
  bool causal = false;
  Tensor mask;                       // bool, may be undefined; element (n, i, j) is at
  std::vector<int64_t> mask_offsets; //   mask_offsets[n] + i * mask_row_stride + j * mask_col_stride
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  double dropout_p = 0.0;
  uint64_t seed = 0, offset = 0;
  // Block-sparse layout and ALiBi (autograd/attention_layout.h): tiles no query of a tile may see
  // are skipped, forward and backward. sparsity_random is bigbird_random_blocks' table (host
  // memory).
  SparsityLayout sparsity;
  std::vector<int64_t> sparsity_random;
  int64_t alibi_heads = 0;  // H > 0: ALiBi on, item n is head n % H
  // A learned bias by relative position (T5's buckets looked up per offset:
  // nn/relative_position.h), in natural units: score (i, j) of item n gets
  // relative_bias[n % H, j - i + Sq - 1] with relative_bias [H, Sq + Sk - 1] contiguous, of the
  // compute dtype (f64 for f64, else f32), on the kernel's device; undefined: none. Backward,
  // where relative_bias_grad ([N, Sq + Sk - 1], the same dtype and device, zero-filled) is
  // defined, adds each dS_ij of item n to relative_bias_grad[n, j - i + Sq - 1].
  Tensor relative_bias, relative_bias_grad;
};

struct IndexSummary {
  int64_t kept = 0;           // entries not equal to `ignore`
  int64_t min = 0, max = -1;  // smallest and largest kept entry (max < min when none is kept)
};

// One optimizer update, element by element (PyTorch's torch.optim formulas):
//   SGD:   d = g + weight_decay * p; with momentum, buf = first_step ? d
//          : momentum * buf + (1 - dampening) * d, and d = nesterov ? d + momentum * buf : buf;
//          p -= lr * d.
//   Adam:  p *= decay_factor (AdamW's decoupled decay, else 1); g += l2 * p (Adam's L2, else 0);
//          m = beta1 m + (1 - beta1) g; v = beta2 v + (1 - beta2) g^2;
//          m_hat = m / bias_correction1; v_hat = v / bias_correction2;
//          p -= lr * m_hat / (sqrt(v_hat) + eps)   (Kingma & Ba's Algorithm 1).
// Arithmetic in f64, each stored value rounded to the tensor's dtype (the CPU's f32 Adam fast
// path computes in f32, in PyTorch's order: cpu/fast/optim_avx2.cpp).
struct SgdStep {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, first_step = false;
};
struct AdamStep {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0;
  double bias_correction1 = 1, bias_correction2 = 1;  // 1 - beta1^t and 1 - beta2^t at step t
  double decay_factor = 1, l2 = 0;
};

struct Kernels {
  virtual ~Kernels() = default;
  virtual const char* name() const = 0;

  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;

  // dst = src elementwise, same shape, any strides on both sides, converting dtypes.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;

  virtual void unary(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) = 0;
  // a and b are already expanded (stride 0 on broadcast dims) to out's shape.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = condition ? a : b; condition is bool; all three expanded to out's shape.
  virtual void where(const Tensor& condition, const Tensor& a, const Tensor& b,
                     const Tensor& out) = 0;
  // out (bool) = a op b; a and b have one dtype and are expanded to out's shape.
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out (bool) = op(x), x of out's shape.
  virtual void predicate(PredicateOp op, const Tensor& x, const Tensor& out) = 0;

  // x contiguous [outer, n, inner] -> out [outer, inner].
  virtual void sum_dim(const Tensor& x, DimSplit split, const Tensor& out) = 0;
  // Largest value over the middle axis and its index (i64); the first one wins ties.
  virtual void max_dim(const Tensor& x, DimSplit split, const Tensor& values,
                       const Tensor& indices) = 0;
  // out[o, i] = x[o, index[o, i], i]   (x contiguous [outer, n, inner], index i64 [outer, inner])
  virtual void gather_dim(const Tensor& x, DimSplit split, const Tensor& index,
                          const Tensor& out) = 0;
  // out[o, index[o, i], i] += src[o, i]   (out contiguous [outer, n, inner])
  virtual void scatter_add_dim(const Tensor& src, DimSplit split, const Tensor& index,
                               const Tensor& out) = 0;
  // Indexing along one dim (ops/indexing.h), for every position p of index's shape. `line` has
  // index's shape and stride 0 on the indexed dim: its element p is where the line through p
  // starts in the indexed tensor, whose stride on that dim is `step`. index is i64 with its
  // entries already checked in range by the op; line, index, out and src may have any strides
  // (scatter_add_along's line: a view of a tensor whose elements do not overlap).
  //   gather_along:      out[p] = line[p + index[p] * step]    (any dtype: elements are moved)
  //   scatter_add_along: line[p + index[p] * step] += src[p]   (f32, f64; repeats add up)
  virtual void gather_along(const Tensor& line, int64_t step, const Tensor& index,
                            const Tensor& out) = 0;
  virtual void scatter_add_along(const Tensor& src, const Tensor& index, const Tensor& line,
                                 int64_t step) = 0;
  // indices (i64, contiguous like x) = for each line of contiguous x [outer, n, inner] along the
  // middle axis, the positions 0..n-1 in the order that sorts it: stable (equal values keep their
  // order, also descending), NaN sorts as the largest value. x is f32, f64 or i64.
  virtual void argsort_dim(const Tensor& x, DimSplit split, bool descending,
                           const Tensor& indices) = 0;
  // Softmax (or log-softmax) over the middle axis of contiguous x, max-subtracted.
  virtual void softmax_dim(const Tensor& x, DimSplit split, bool log, const Tensor& out) = 0;

  virtual void gemm(const GemmBatch& batch) = 0;

  // The gradients of y = x W^T + b in one pass over G, where a device has such a kernel: dx = G W,
  // dW = G^T x, db = the column sums of G; an undefined output is not wanted. All 2-D and
  // contiguous: g [M, N], x [M, K], weight [N, K] (read for dx only: undefined without it).
  // Returns false where the device has none (the default), and ops/matmul.cpp computes them with
  // gemm and sum_dim instead.
  virtual bool linear_backward(const Tensor& g, const Tensor& x, const Tensor& weight,
                               const Tensor& dx, const Tensor& dw, const Tensor& db) {
    (void)g, (void)x, (void)weight, (void)dx, (void)dw, (void)db;
    return false;
  }

  // out[r, :] = table[index[r], :]   (table contiguous [rows, width])
  virtual void index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) = 0;
  // table[index[r], :] += src[r, :]  (repeated indices add up)
  virtual void index_add_rows(const Tensor& src, const Tensor& index, const Tensor& table) = 0;

  // Per row of contiguous x [rows, n]: out = (x - mean) * rstd, saving mean and rstd [rows].
  virtual void normalize_rows(const Tensor& x, double eps, const Tensor& out, const Tensor& mean,
                              const Tensor& rstd) = 0;
  // layer_norm's forward in one pass over x, where a device has such a kernel: per row of
  // contiguous x [rows, n], y = xhat weight + bias (weight and bias [n], each may be undefined)
  // with xhat = (x - mean) rstd, rstd = 1 / sqrt(variance + eps). The kernel allocates y [rows, n],
  // mean and rstd [rows], and xhat [rows, n] when xhat is not null (the backward's; null when
  // nothing will be recorded). One dtype. Returns false, allocating nothing, where the device has
  // none (the default) or declines these inputs: then ops/layer_norm.cpp calls normalize_rows and
  // applies weight and bias as ops.
  virtual bool layer_norm_forward(const Tensor& x, double eps, const Tensor& weight,
                                  const Tensor& bias, Tensor* y, Tensor* xhat, Tensor* mean,
                                  Tensor* rstd) {
    (void)x, (void)eps, (void)weight, (void)bias, (void)y, (void)xhat, (void)mean, (void)rstd;
    return false;
  }
  // GELU's gradient in one pass, where a device has such a kernel: dx = g gelu'(x), gelu'(x) =
  // Phi(x) + x phi(x), for g and x of one shape and dtype, contiguous; the kernel allocates dx.
  // Undefined where the device has none (the default) or declines these inputs: then
  // ops/elementwise.cpp multiplies g by UnaryOp::gelu_grad.
  virtual Tensor gelu_backward(const Tensor& g, const Tensor& x) {
    (void)g, (void)x;
    return Tensor();
  }
  // The gradients of layer_norm over rows in one pass over G, where a device has such a kernel:
  // with dxhat = G weight (G where weight is undefined), per row dx = rstd (dxhat - mean(dxhat) -
  // xhat mean(dxhat xhat)); dweight = the column sums of G xhat, dbias those of G. g, xhat
  // [rows, n] contiguous, rstd [rows], weight [n] (may be undefined), one dtype. Each non-null
  // output pointer is a gradient wanted, which the kernel allocates (dx [rows, n], dweight and
  // dbias [n]). Returns false, allocating nothing, where the device has none (the default) or
  // declines these inputs: then ops/layer_norm.cpp composes them from ops.
  virtual bool layer_norm_backward(const Tensor& g, const Tensor& xhat, const Tensor& rstd,
                                   const Tensor& weight, Tensor* dx, Tensor* dweight,
                                   Tensor* dbias) {
    (void)g, (void)xhat, (void)rstd, (void)weight, (void)dx, (void)dweight, (void)dbias;
    return false;
  }

  // Fused attention: out [B, H, Sq, value_dim] and the per-row log-sum-exp [N, Sq] contiguous (the
  // only statistics kept for backward, which recomputes the probabilities tile by tile). For
  // f16/bf16 q, k, v the log-sum-exp is f32. out, grad_out and the gradients are 4-d like q, k, v
  // (any strides on B, H and S, stride 1 on the last dim), so that an op may pass views: a device
  // whose kernel wants them contiguous copies them itself (and copies results back).
  virtual void attention_forward(const AttentionProblem& problem, const Tensor& out,
                                 const Tensor& logsumexp) = 0;
  // Accumulates into grad_q, grad_k, grad_v (zero-filled by the caller).
  virtual void attention_backward(const AttentionProblem& problem, const Tensor& out,
                                  const Tensor& logsumexp, const Tensor& grad_out,
                                  const Tensor& grad_q, const Tensor& grad_k,
                                  const Tensor& grad_v) = 0;

  // Uniform [0, 1) numbers from Philox 4x32-10 keyed by seed: out[i] is number offset + i of the
  // stream (a position in numbers, as reserve_random returns; autograd/philox.h).
  virtual void uniform(const Tensor& out, uint64_t seed, uint64_t offset) = 0;

  // Waits until the device has finished the work queued so far (timings; a no-op on the CPU).
  virtual void synchronize() {}

  // ---- Transfers between host memory and this device (the tensor is contiguous) -------------
  virtual void copy_from_host(const void* host_bytes, const Tensor& dst) = 0;
  virtual void copy_to_host(const Tensor& src, void* host_bytes) = 0;

  // ---- Index checks: the one device-to-host read the ops make --------------------------------
  // Reads contiguous i64 `index` once. Entries equal to `ignore` are skipped; the others are
  // counted and their smallest and largest value returned. When `safe` (i64) and `keep` (bool) are
  // defined (same shape as index), also writes keep = index != ignore, safe = keep ? index : 0.
  // An op must know its indices are in range before it runs, so the answer comes back to the host
  // (on a GPU this waits for the device: the synchronisation is here and nowhere else in ops/).
  virtual IndexSummary screen_indices(const Tensor& index, int64_t ignore, const Tensor& safe,
                                      const Tensor& keep) = 0;

  // ---- Optimizer steps, clipping and loss scaling (param, grad and state contiguous, one
  // dtype, f32 or f64; the CPU versions in cpu/optim.cpp are the readable reference) -------
  // momentum_buffer is undefined when step.momentum == 0.
  virtual void sgd_step(const SgdStep& step, const Tensor& param, const Tensor& grad,
                        const Tensor& momentum_buffer) = 0;
  virtual void adam_step(const AdamStep& step, const Tensor& param, const Tensor& grad,
                         const Tensor& exp_avg, const Tensor& exp_avg_sq) = 0;
  // total (an f64 scalar on this device) += sum of x[i]^2, summed in f64.
  virtual void accumulate_sum_of_squares(const Tensor& x, const Tensor& total) = 0;
  // out = grad * inv_scale in grad's dtype (inv_scale rounded to it first); found_inf (an f32
  // scalar on this device) is set to 1 when any element of out is inf or NaN (grad's was, or the
  // product overflowed), else left alone.
  virtual void unscale_and_check(const Tensor& grad, double inv_scale, const Tensor& out,
                                 const Tensor& found_inf) = 0;

  // ---- int8 inference (contiguous tensors; ops/quantize.h checks the shapes, and the CPU versions
  // in cpu/quantize.cpp are the readable reference) ----------------------------------------
  // Symmetric int8 rows of x [rows, cols] f32 on `levels` steps each side (127: 8 bits; 63: 7
  // bits, what int8_activation_levels() may ask for; 1..127): scale[r] = max(max_c |x[r, c]| /
  // levels, 2^-126) in f32 (never below the smallest normal f32, so never 0 for denormal rows; 1
  // for a row without a nonzero finite entry), or fixed_scale for every row when fixed_scale > 0;
  // q[r, c] = x[r, c] / scale[r] rounded to nearest (ties to even), clamped to [-levels, levels],
  // NaN to 0. q is i8 [rows, cols], scale f32 [rows].
  virtual void quantize_rows(const Tensor& x, double fixed_scale, int levels, const Tensor& q,
                             const Tensor& scale) = 0;
  // The levels a Linear's input is quantized to before gemm_i8 (ops/quantize.h): 127, or 63 where
  // this backend's product is faster on 7-bit activations (the CPU's AVX2 kernel,
  // cpu/fast/quantize.h).
  virtual int int8_activation_levels() { return 127; }
  // The levels Linear::quantize rounds a weight to: 127, or 63 where this backend's product is
  // faster on 7-bit weights too (the CPU's AVX2 kernel). A weight of either runs on every backend.
  virtual int int8_weight_levels() { return 127; }
  // acc [m, n] i32 = a [m, k] i8 times b [n, k]^T i8 (b: a Linear's weight [out, in]), exact:
  // k <= kMaxInt8Depth keeps every sum of products of +-127 inside i32.
  virtual void gemm_i8(const Tensor& a, const Tensor& b, const Tensor& acc) = 0;
  // out [m, n] f32 = (acc[i, j] row_scale[i]) col_scale[j] + bias[j], in f32 in that order (bias
  // may be undefined: + 0 is skipped).
  virtual void dequantize_product(const Tensor& acc, const Tensor& row_scale,
                                  const Tensor& col_scale, const Tensor& bias,
                                  const Tensor& out) = 0;
  // out [m, n] f32 = dequantize_product(gemm_i8(a, b), row_scale, col_scale, bias), bit for bit;
  // a backend may do both in one pass (the CPU's fast paths: no i32 [m, n] in memory).
  virtual void quantized_product(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                                 const Tensor& col_scale, const Tensor& bias, const Tensor& out) {
    const Tensor acc = empty({a.size(0), b.size(0)}, DType::i32, a.device());
    gemm_i8(a, b, acc);
    dequantize_product(acc, row_scale, col_scale, bias, out);
  }
  // out [m, n] f32 = quantized_product(quantize_rows(x, fixed_scale, levels), b, x's row scales,
  // col_scale, bias), bit for bit: a Linear's int8 forward (ops/quantize.h). A backend may quantize
  // each block of x's rows straight into its product's layout (the CPU's fast paths: x read once,
  // no i8 [m, k] in memory).
  virtual void quantized_linear(const Tensor& x, double fixed_scale, int levels, const Tensor& b,
                                const Tensor& col_scale, const Tensor& bias, const Tensor& out) {
    const Tensor q = empty(x.shape(), DType::i8, x.device());
    const Tensor row_scale = empty({x.size(0)}, DType::f32, x.device());
    quantize_rows(x, fixed_scale, levels, q, row_scale);
    quantized_product(q, b, row_scale, col_scale, bias, out);
  }
};

// The longest dot product gemm_i8 takes: k 127^2 < 2^31.
constexpr int64_t kMaxInt8Depth = 133143;

// ---- The backend registry ---------------------------------------------------------------------
// Each device type has at most one backend. The CPU backend is always there; the CUDA backend is
// in the registry from the start when the library is built with it (runtime/backends.cpp names
// tg::cuda::cuda_backend()); register_backend() serves test harnesses (the emulated device).
struct Backend {
  const char* name = "";                          // "cpu", "cuda"
  int (*device_count)() = nullptr;                // devices usable now (0: none present)
  Kernels& (*kernels_for)(int index) = nullptr;   // index < device_count()
  std::vector<std::string> (*describe)() = nullptr;  // one line a device, for `tapegrad info`
};
void register_backend(DeviceType type, const Backend& backend);
Backend cpu_backend();  // defined beside the CPU kernels (cpu/memory.cpp)
const Backend* find_backend(DeviceType type);  // null when this build has none
Kernels& kernels(Device device);  // the device's kernels; tg::Error if absent

// Precision switches that backends read (off by default, as in PyTorch).
struct MathModes {
  bool allow_tf32 = false;  // f32 GEMMs may round their inputs to TF32 (10-bit mantissa)
};
MathModes& math_modes();

}  // namespace tg
