// CUDA fused attention: a tiled kernel with an online softmax (the algorithm of
// cpu/fast/attention.cpp, which is the reference; a tensor-core flash kernel comes later).
//
// Forward: one block per query row (n, i). The block walks the keys in tiles of kTile (one key per
// thread): s_ij = scale q_i . k_j, masked entries -inf, then the online softmax
//   m' = max(m, max_j s_ij),  l' = l e^(m - m') + sum_j e^(s_ij - m'),
//   acc' = acc e^(m - m') + sum_j e^(s_ij - m') Z_ij v_j          (Z: the dropout factors)
// with the accumulator acc [dv] in shared memory. At the end O_i = acc / l, lse_i = m + log l.
//
// Backward: one block per query row again, recomputing P_ij = exp(s_ij - lse_i), with
//   D_i = dO_i . O_i,  dP_ij = Z_ij (dO_i . v_j),  dS_ij = P_ij (dP_ij - D_i),
//   d loss / d q_i += scale sum_j dS_ij k_j      (the block owns row i: no atomics)
//   d loss / d k_j += scale dS_ij q_i            (atomicAdd: every row's block adds to key j)
//   d loss / d v_j += P_ij Z_ij dO_i             (atomicAdd)
//   d loss / d relative_bias[h, j - i] += dS_ij   (atomicAdd; T5's learned bias, when present)
// f16/bf16 inputs are computed in f32 with an f32 log-sum-exp; their gradients accumulate in f32
// scratch tensors that are rounded once into the half gradients (as the CPU kernel does).
//
// The kernels index q, k, v, the output and the gradients as contiguous [N, S, width]. The
// interface passes [B, H, S, width] tensors with any strides on B, H and S (autograd/kernels.h):
// those that are not contiguous are copied to contiguous tensors first (own_copy), and an output
// or gradient so copied is copied back at the end.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "tapegrad/autograd/philox.h"
#include "tapegrad/cuda/device_math.h"
#include "tapegrad/cuda/device_types.h"
#include "tapegrad/cuda/kernels.h"

namespace tg::cuda {
namespace {

// Keys per tile = threads per block (a multiple of the warp size, at most 32 warps).
constexpr int kTile = 64;
constexpr int kWarpSize = 32;
constexpr int kWarps = kTile / kWarpSize;
// Dynamic shared memory a block may use without opting in (the same on every GPU since sm_20);
// beyond it a kernel must ask for more (up to 163 KiB on an A100, 227 KiB on an H100/H200).
constexpr size_t kDefaultSharedBytes = 48 * 1024;

// Everything both kernels read, by value. T is the stored element type, C the compute type
// (f32 for f32/f16/bf16, f64 for f64); the log-sum-exp is stored as C.
template <typename T, typename C>
struct AttentionArgs {
  const T* q = nullptr;  // [batch, sq, d]
  const T* k = nullptr;  // [batch, sk, d]
  const T* v = nullptr;  // [batch, sk, dv]
  int64_t batch = 0, sq = 0, sk = 0, d = 0, dv = 0;
  C scale = 1;
  bool causal = false;
  const bool* mask = nullptr;              // null: no mask
  const int64_t* mask_offsets = nullptr;   // [batch], on the device
  int64_t mask_row_stride = 0, mask_col_stride = 0;
  double dropout_p = 0;  // 0: no dropout
  C keep_scale = 1;      // 1 / (1 - dropout_p), rounded to C as the CPU does
  uint64_t seed = 0, offset = 0;
  SparsityView sparsity;   // its random table on the device
  int64_t alibi_heads = 0;  // H > 0: ALiBi, item n is head n % H
  // The learned relative bias [relative_heads, sq + sk - 1] (AttentionProblem::relative_bias) and
  // its gradient [batch, sq + sk - 1], each null when absent.
  const C* relative_bias = nullptr;
  int64_t relative_heads = 0;
  C* relative_grad = nullptr;
};

// ---- Device helpers --------------------------------------------------------------------------

template <typename C>
__device__ inline C negative_infinity() {
  return -std::numeric_limits<C>::infinity();
}

// combine() of `value` over the block's threads, returned to every thread; `identity` is
// combine's neutral value (0 for Plus, -inf for Larger). Every thread must call it. Each warp
// reduces with shuffles, lane 0 parks the warp's result in scratch [warps], and every thread
// combines the warp results in the same order (so all threads get bit-identical results).
template <typename C, typename Op>
__device__ C block_reduce(C value, C* scratch, Op combine, C identity) {
  for (int delta = kWarpSize / 2; delta > 0; delta /= 2) {
    value = combine(value, __shfl_xor_sync(0xffffffffu, value, delta));
  }
  const int lane = threadIdx.x % kWarpSize, warp = threadIdx.x / kWarpSize;
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  C result = identity;
  for (int w = 0; w < static_cast<int>(blockDim.x) / kWarpSize; ++w) {
    result = combine(result, scratch[w]);
  }
  __syncthreads();  // scratch is free again for the next reduction
  return result;
}

// sum_c a[c] * b[c] for a row held in shared memory (compute type) and one in global memory.
template <typename C, typename T>
__device__ inline C dot_row(const C* shared_row, const T* global_row, int64_t length) {
  C sum = 0;
  for (int64_t c = 0; c < length; ++c) sum += shared_row[c] * convert<C>(global_row[c]);
  return sum;
}

// Keys that query row i can see at all: j <= i when causal (whole tiles past it are skipped).
template <typename T, typename C>
__device__ inline int64_t key_end(const AttentionArgs<T, C>& a, int64_t i) {
  return a.causal ? (i + 1 < a.sk ? i + 1 : a.sk) : a.sk;
}

// Whether query i of item n may attend key j (j < key_end): not past the diagonal when causal,
// inside the sparse layout, and the mask (element mask_offsets[n] + i * row_stride + j *
// col_stride) says true.
template <typename T, typename C>
__device__ inline bool key_allowed(const AttentionArgs<T, C>& a, int64_t n, int64_t i, int64_t j) {
  if (a.causal && j > i) return false;
  if (!a.sparsity.visible(i, j)) return false;
  if (a.mask != nullptr &&
      !a.mask[a.mask_offsets[n] + i * a.mask_row_stride + j * a.mask_col_stride]) {
    return false;
  }
  return true;
}

// The dropout factor Z_ij of probability (n, i, j): 0 when Philox number (n Sq + i) Sk + j of
// (seed, offset) is below dropout_p, else 1 / (1 - p); 1 without dropout.
template <typename T, typename C>
__device__ inline C dropout_factor(const AttentionArgs<T, C>& a, int64_t n, int64_t i, int64_t j) {
  if (a.dropout_p <= 0) return C(1);
  const float uniform = philox_uniform(a.seed, a.offset, (n * a.sq + i) * a.sk + j);
  return uniform >= a.dropout_p ? a.keep_scale : C(0);
}

// ALiBi's slope for item n's head, 0 without ALiBi.
template <typename T, typename C>
__device__ inline C alibi_slope_of(const AttentionArgs<T, C>& a, int64_t n) {
  return a.alibi_heads > 0 ? static_cast<C>(alibi_slope(n % a.alibi_heads, a.alibi_heads)) : C(0);
}

// The score s_ij = scale q_i . k_j - slope |i - j| + relative_bias[h, j - i + sq - 1] of key j,
// or -inf where the key is masked, causal-hidden, outside the layout or past the end of the tile.
template <typename T, typename C>
__device__ inline C score_of(const AttentionArgs<T, C>& a, const C* q_row, int64_t n, int64_t i,
                             int64_t j, int64_t end, C slope) {
  if (j >= end || !key_allowed(a, n, i, j)) return negative_infinity<C>();
  C score = a.scale * dot_row(q_row, a.k + (n * a.sk + j) * a.d, a.d);
  if (a.relative_bias != nullptr) {
    score += a.relative_bias[(n % a.relative_heads) * (a.sq + a.sk - 1) + j - i + a.sq - 1];
  }
  return slope == C(0) ? score : score - slope * static_cast<C>(i > j ? i - j : j - i);
}

// Whether the tile of keys [j0, j0 + threads) (cut at end) holds a key the layout lets query i
// see: the block skips the others, the same decision on every thread.
template <typename T, typename C>
__device__ inline bool tile_visible(const AttentionArgs<T, C>& a, int64_t i, int64_t j0, int64_t end) {
  return a.sparsity.tile_visible(i, i + 1, j0, j0 + blockDim.x < end ? j0 + blockDim.x : end);
}

// ---- Forward ---------------------------------------------------------------------------------

// Block (n, i) = blockIdx.x computes out [n, i, :] and lse [n, i]. Dynamic shared memory:
// q_row [d], acc [dv], probs [kTile], scratch [warps], all of type C.
template <typename T, typename C>
__global__ void attention_forward_kernel(AttentionArgs<T, C> a, T* out, C* lse) {
  const int64_t row = blockIdx.x, n = row / a.sq, i = row % a.sq;
  const int tid = threadIdx.x, threads = blockDim.x;
  C* q_row = dynamic_shared<C>();
  C* acc = q_row + a.d;
  C* probs = acc + a.dv;
  C* scratch = probs + threads;

  for (int64_t c = tid; c < a.d; c += threads) q_row[c] = convert<C>(a.q[row * a.d + c]);
  for (int64_t c = tid; c < a.dv; c += threads) acc[c] = 0;
  __syncthreads();

  // Every thread keeps its own (identical) copy of the running max m and sum l.
  C row_max = negative_infinity<C>(), row_sum = 0;
  const int64_t end = key_end(a, i);
  const C slope = alibi_slope_of(a, n);
  for (int64_t j0 = 0; j0 < end; j0 += threads) {
    if (!tile_visible(a, i, j0, end)) continue;
    const int64_t j = j0 + tid;
    const C score = score_of(a, q_row, n, i, j, end, slope);
    const C tile_max = block_reduce(score, scratch, Larger{}, negative_infinity<C>());
    const C new_max = max_of(row_max, tile_max);
    if (new_max == negative_infinity<C>()) continue;  // nothing visible yet (the whole block agrees)

    const C correction = exp_of(row_max - new_max);  // e^(m - m'); 0 on the first visible tile
    const C prob = exp_of(score - new_max);          // e^(s - m'); 0 where masked
    // l counts every probability
    row_sum = row_sum * correction + block_reduce(prob, scratch, Plus{}, C(0));
    probs[tid] = j < end ? prob * dropout_factor(a, n, i, j) : C(0);  // O drops some of them
    __syncthreads();

    // acc[c] = acc[c] e^(m - m') + sum_t probs[t] v[j0 + t, c]   (thread tid owns columns c)
    const int64_t cols = end - j0 < threads ? end - j0 : threads;
    const T* v_tile = a.v + (n * a.sk + j0) * a.dv;
    for (int64_t c = tid; c < a.dv; c += threads) {
      C sum = acc[c] * correction;
      for (int64_t t = 0; t < cols; ++t) sum += probs[t] * convert<C>(v_tile[t * a.dv + c]);
      acc[c] = sum;
    }
    __syncthreads();  // probs is rewritten by the next tile
    row_max = new_max;
  }

  // O_i = acc / l and lse_i = m + log l; a fully masked row (l = 0) gives O_i = 0, lse_i = -inf.
  const bool empty = row_sum == C(0);
  for (int64_t c = tid; c < a.dv; c += threads) {
    out[row * a.dv + c] = convert<T>(empty ? C(0) : acc[c] / row_sum);
  }
  if (tid == 0) lse[row] = empty ? negative_infinity<C>() : row_max + log_of(row_sum);
}

// ---- Backward --------------------------------------------------------------------------------

// Block (n, i) = blockIdx.x adds row i's share to grad_q [n, i, :] (its own row) and to every
// grad_k [n, j, :], grad_v [n, j, :] (atomically). Gradients are of the compute type C. Dynamic
// shared memory: q_row [d], d_out_row [dv], dq_acc [d], d_scores [kTile], kept [kTile],
// scratch [warps].
template <typename T, typename C>
__global__ void attention_backward_kernel(AttentionArgs<T, C> a, const T* out, const C* lse,
                                          const T* grad_out, C* grad_q, C* grad_k, C* grad_v) {
  const int64_t row = blockIdx.x, n = row / a.sq, i = row % a.sq;
  const int tid = threadIdx.x, threads = blockDim.x;
  const C row_lse = lse[row];
  if (row_lse == negative_infinity<C>()) return;  // fully masked row: no probabilities, no gradient

  C* q_row = dynamic_shared<C>();
  C* d_out_row = q_row + a.d;
  C* dq_acc = d_out_row + a.dv;
  C* d_scores = dq_acc + a.d;
  C* kept = d_scores + threads;
  C* scratch = kept + threads;

  // D_i = dO_i . O_i (= sum_j P_ij dP_ij), and the rows of q and dO this block reuses.
  C partial = 0, nonzero = 0;
  for (int64_t c = tid; c < a.d; c += threads) {
    q_row[c] = convert<C>(a.q[row * a.d + c]);
    dq_acc[c] = 0;
  }
  for (int64_t c = tid; c < a.dv; c += threads) {
    d_out_row[c] = convert<C>(grad_out[row * a.dv + c]);
    partial += d_out_row[c] * convert<C>(out[row * a.dv + c]);
    if (d_out_row[c] != C(0)) nonzero = 1;  // a NaN counts
  }
  // A row whose dO is zero adds nothing (dP, D and dS vanish with it), as on the CPU: skipped, so
  // that non-finite scores of a query the loss never read do not reach dK and dV either.
  if (block_reduce(nonzero, scratch, Plus{}, C(0)) == C(0)) return;
  // (its barrier also publishes q_row, d_out_row)
  const C row_dot = block_reduce(partial, scratch, Plus{}, C(0));

  const int64_t end = key_end(a, i);
  const C slope = alibi_slope_of(a, n);
  for (int64_t j0 = 0; j0 < end; j0 += threads) {
    if (!tile_visible(a, i, j0, end)) continue;
    // Thread tid: key j's dS_ij and P_ij Z_ij (0 for masked keys and past the end).
    const int64_t j = j0 + tid;
    C d_score = 0, kept_prob = 0;
    if (j < end && key_allowed(a, n, i, j)) {
      const C prob = exp_of(score_of(a, q_row, n, i, j, end, slope) - row_lse);  // P_ij
      const C factor = dropout_factor(a, n, i, j);                       // Z_ij
      const C d_prob = factor * dot_row(d_out_row, a.v + (n * a.sk + j) * a.dv, a.dv);  // dP_ij
      d_score = prob * (d_prob - row_dot);  // dS_ij = P_ij (dP_ij - D_i)
      kept_prob = prob * factor;            // P~_ij
      if (a.relative_grad != nullptr && d_score != C(0)) {  // the bias's gradient, by j - i
        atomicAdd(&a.relative_grad[n * (a.sq + a.sk - 1) + j - i + a.sq - 1], d_score);
      }
    }
    d_scores[tid] = d_score;
    kept[tid] = kept_prob;
    __syncthreads();

    const int64_t cols = end - j0 < threads ? end - j0 : threads;
    // dq_acc[c] += sum_t dS_it k[j0 + t, c]   (thread tid owns columns c; scale comes at the end)
    const T* k_tile = a.k + (n * a.sk + j0) * a.d;
    for (int64_t c = tid; c < a.d; c += threads) {
      C sum = dq_acc[c];
      for (int64_t t = 0; t < cols; ++t) sum += d_scores[t] * convert<C>(k_tile[t * a.d + c]);
      dq_acc[c] = sum;
    }
    // grad_k[j0 + t] += scale dS_it q_i, grad_v[j0 + t] += P~_it dO_i: the threads share a key's
    // row (consecutive columns, coalesced); other blocks add to the same keys, hence atomics.
    for (int64_t t = 0; t < cols; ++t) {
      const int64_t key = n * a.sk + j0 + t;
      if (d_scores[t] != C(0)) {
        const C weight = a.scale * d_scores[t];
        for (int64_t c = tid; c < a.d; c += threads) atomicAdd(&grad_k[key * a.d + c], weight * q_row[c]);
      }
      if (kept[t] != C(0)) {
        for (int64_t c = tid; c < a.dv; c += threads) atomicAdd(&grad_v[key * a.dv + c], kept[t] * d_out_row[c]);
      }
    }
    __syncthreads();  // d_scores and kept are rewritten by the next tile
  }

  // d loss / d q_i += scale sum_j dS_ij k_j
  for (int64_t c = tid; c < a.d; c += threads) grad_q[row * a.d + c] += a.scale * dq_acc[c];
}

// ---- Host side -------------------------------------------------------------------------------

// The learned relative bias [H, Sq + Sk - 1] and its gradient [N, Sq + Sk - 1]: contiguous, of the
// compute dtype, on this device.
void check_relative_bias(const AttentionProblem& p, Device device, const char* kernel) {
  if (!p.relative_bias.defined()) return;
  const DType compute = is_half(p.q.dtype()) ? DType::f32 : p.q.dtype();
  const int64_t offsets = p.q.size(2) + p.k.size(2) - 1, items = p.q.size(0) * p.q.size(1);
  const Tensor& bias = p.relative_bias;
  TG_CHECK(bias.dim() == 2 && bias.size(1) == offsets && bias.is_contiguous() &&
               bias.dtype() == compute && bias.device() == device,
           "kernel '", kernel, "' on cuda: the relative bias must be a contiguous ",
           dtype_name(compute), " [H, ", offsets, "] on this device, got ",
           shape_str(bias.shape()));
  const Tensor& grad = p.relative_bias_grad;
  TG_CHECK(!grad.defined() || (grad.shape() == Shape{items, offsets} && grad.is_contiguous() &&
                               grad.dtype() == compute && grad.device() == device),
           "kernel '", kernel, "' on cuda: the relative bias's gradient must be a contiguous ",
           dtype_name(compute), " [", items, ", ", offsets, "] on this device");
}

// Checks what both directions need: shapes [B, H, Sq, d], [B, H, Sk, d], [B, H, Sk, dv], one
// dtype, all on this device, and a mask of bools with one offset per item.
void check_problem(const AttentionProblem& p, Device device, const char* kernel) {
  const Tensor* inputs[] = {&p.q, &p.k, &p.v};
  for (const Tensor* t : inputs) {
    TG_CHECK(t->defined() && t->dim() == 4, "kernel '", kernel, "' on cuda: q, k, v must be 4-d");
    TG_CHECK(t->device() == device, "kernel '", kernel, "' on ", device_name(device),
             ": an input is on ", device_name(t->device()));
    TG_CHECK(t->dtype() == p.q.dtype(), "kernel '", kernel, "' on cuda: q, k, v dtypes differ");
  }
  TG_CHECK(p.k.size(0) == p.q.size(0) && p.v.size(0) == p.q.size(0) &&
               p.k.size(1) == p.q.size(1) && p.v.size(1) == p.q.size(1) &&
               p.k.size(3) == p.q.size(3) && p.v.size(2) == p.k.size(2),
           "kernel '", kernel, "' on cuda: shapes q ", shape_str(p.q.shape()), ", k ",
           shape_str(p.k.shape()), ", v ", shape_str(p.v.shape()), " do not fit");
  if (p.mask.defined()) {
    const int64_t items = p.q.size(0) * p.q.size(1);
    TG_CHECK(p.mask.dtype() == DType::b8, "kernel '", kernel, "' on cuda: the mask must be bool");
    TG_CHECK(p.mask.device() == device, "kernel '", kernel, "' on ", device_name(device),
             ": the mask is on ", device_name(p.mask.device()));
    TG_CHECK(static_cast<int64_t>(p.mask_offsets.size()) == items, "kernel '", kernel,
             "' on cuda: ", p.mask_offsets.size(), " mask offsets for ", items, " items");
  }
  check_relative_bias(p, device, kernel);
}

// Checks that an output or saved tensor is on this device, of this shape and dtype.
void check_tensor(const Tensor& t, const Shape& shape, DType dtype, Device device,
                  const char* kernel, const char* what) {
  TG_CHECK(t.defined() && t.shape() == shape && t.dtype() == dtype, "kernel '", kernel,
           "' on cuda: ", what, " must be ", dtype_name(dtype), " of shape ", shape_str(shape),
           t.defined() ? ", got " + std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape())
                       : std::string(", got an undefined tensor"));
  TG_CHECK(t.device() == device, "kernel '", kernel, "' on ", device_name(device), ": ", what,
           " is on ", device_name(t.device()));
}

// The log-sum-exp [N, Sq]: as check_tensor, and contiguous (the interface asks it so).
void check_logsumexp(const Tensor& t, const Shape& shape, DType dtype, Device device,
                     const char* kernel) {
  check_tensor(t, shape, dtype, device, kernel, "logsumexp");
  TG_CHECK(t.is_contiguous(), "kernel '", kernel, "' on cuda: logsumexp must be contiguous");
}

// t itself where it is contiguous and of `dtype`, else a contiguous copy of it in `dtype` (made
// with the device's copy kernel).
Tensor own_copy(Kernels& kernels, const Tensor& t, DType dtype) {
  if (t.is_contiguous() && t.dtype() == dtype) return t;
  Tensor copy = empty(t.shape(), dtype, t.device());
  kernels.copy(t, copy);
  return copy;
}

// The problem with contiguous q, k, v (the given ones where they are).
AttentionProblem contiguous_problem(Kernels& kernels, const AttentionProblem& p) {
  AttentionProblem contiguous = p;
  contiguous.q = own_copy(kernels, p.q, p.q.dtype());
  contiguous.k = own_copy(kernels, p.k, p.k.dtype());
  contiguous.v = own_copy(kernels, p.v, p.v.dtype());
  return contiguous;
}

// What make_args copies to the device: the mask offsets and the layout's random table, kept alive
// by the caller until the kernel has been queued.
struct DeviceTables {
  Tensor mask_offsets, sparsity_random;
};

// The kernel arguments for element type T.
template <typename T>
AttentionArgs<T, compute_t<T>> make_args(Kernels& kernels, const AttentionProblem& p,
                                         Device device, DeviceTables& tables) {
  using C = compute_t<T>;
  AttentionArgs<T, C> a;
  a.q = p.q.data_as<T>();
  a.k = p.k.data_as<T>();
  a.v = p.v.data_as<T>();
  a.batch = p.q.size(0) * p.q.size(1);  // contiguous [B, H, S, width]: [N, S, width]
  a.sq = p.q.size(2);
  a.sk = p.k.size(2);
  a.d = p.q.size(3);
  a.dv = p.v.size(3);
  a.scale = static_cast<C>(p.scale);
  a.causal = p.causal;
  if (p.mask.defined()) {
    tables.mask_offsets = empty({a.batch}, DType::i64, device);
    kernels.copy_from_host(p.mask_offsets.data(), tables.mask_offsets);
    a.mask = p.mask.data_as<bool>();
    a.mask_offsets = tables.mask_offsets.data_as<int64_t>();
    a.mask_row_stride = p.mask_row_stride;
    a.mask_col_stride = p.mask_col_stride;
  }
  if (p.dropout_p > 0) {
    a.dropout_p = p.dropout_p;
    a.keep_scale = static_cast<C>(1.0 / (1.0 - p.dropout_p));
    a.seed = p.seed;
    a.offset = p.offset;
  }
  a.sparsity = sparsity_view(p.sparsity, p.sparsity_random, a.sq);  // host table for now
  if (a.sparsity.random != nullptr) {
    tables.sparsity_random = empty({static_cast<int64_t>(p.sparsity_random.size())}, DType::i64, device);
    kernels.copy_from_host(p.sparsity_random.data(), tables.sparsity_random);
    a.sparsity.random = tables.sparsity_random.data_as<int64_t>();
  }
  a.alibi_heads = p.alibi_heads;
  if (p.relative_bias.defined()) {
    a.relative_bias = p.relative_bias.data_as<C>();
    a.relative_heads = p.relative_bias.size(0);
    if (p.relative_bias_grad.defined()) a.relative_grad = p.relative_bias_grad.data_as<C>();
  }
  return a;
}

// One block per query row: the grid, kTile threads, and `values` values of type C of dynamic
// shared memory. Past 48 KiB the kernel is allowed more (cudaFuncSetAttribute), up to what the
// device allows; more than that is an error naming the head sizes.
template <typename C, typename... Params>
LaunchShape row_blocks(void (*kernel)(Params...), int64_t rows, int64_t values,
                       const AttentionProblem& p, int device_index, const char* name) {
  TG_CHECK(rows <= 0x7fffffff, "kernel '", name, "' on cuda: ", rows,
           " query rows are more than one grid can hold (2^31 - 1)");
  const size_t bytes = static_cast<size_t>(values) * sizeof(C);
  if (bytes > kDefaultSharedBytes) {
    cudaDeviceProp properties{};
    check_cuda(cudaGetDeviceProperties(&properties, device_index), "cudaGetDeviceProperties");
    TG_CHECK(bytes <= properties.sharedMemPerBlockOptin, "kernel '", name, "' on cuda: head sizes d = ",
             p.q.size(3), ", dv = ", p.v.size(3), " (", dtype_name(p.q.dtype()), ") need ", bytes,
             " bytes of shared memory per block, more than the ", properties.sharedMemPerBlockOptin,
             " this GPU allows");
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(bytes)),
               "cudaFuncSetAttribute");
  }
  return LaunchShape{dim3(static_cast<unsigned>(rows), 1, 1), dim3(kTile, 1, 1), bytes};
}

}  // namespace

void CudaKernels::attention_forward(const AttentionProblem& given, const Tensor& out,
                                    const Tensor& logsumexp) {
  DeviceGuard guard(device_index());
  const char* kernel = "attention_forward";
  const Device device{DeviceType::cuda, device_index()};
  check_problem(given, device, kernel);
  const int64_t batch = given.q.size(0) * given.q.size(1), sq = given.q.size(2);
  const DType dtype = given.q.dtype();
  const DType lse_dtype = is_half(dtype) ? DType::f32 : dtype;
  check_tensor(out, {given.q.size(0), given.q.size(1), sq, given.v.size(3)}, dtype, device, kernel,
               "out");
  check_logsumexp(logsumexp, {batch, sq}, lse_dtype, device, kernel);
  if (batch * sq == 0) return;
  const AttentionProblem problem = contiguous_problem(*this, given);
  const Tensor own_out = own_copy(*this, out, dtype);

  dispatch_floating_or_half(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    DeviceTables tables;
    const AttentionArgs<T, C> args = make_args<T>(*this, problem, device, tables);
    // shared memory: q_row [d], acc [dv], probs [kTile], scratch [kWarps]
    const LaunchShape shape =
        row_blocks<C>(attention_forward_kernel<T, C>, batch * sq, args.d + args.dv + kTile + kWarps,
                      problem, device_index(), kernel);
    launch(kernel, attention_forward_kernel<T, C>, shape, args, own_out.data_as<T>(),
           logsumexp.data_as<C>());
  });
  if (!own_out.same(out)) copy(own_out, out);
}

void CudaKernels::attention_backward(const AttentionProblem& given, const Tensor& out,
                                     const Tensor& logsumexp, const Tensor& grad_out,
                                     const Tensor& grad_q, const Tensor& grad_k,
                                     const Tensor& grad_v) {
  DeviceGuard guard(device_index());
  const char* kernel = "attention_backward";
  const Device device{DeviceType::cuda, device_index()};
  check_problem(given, device, kernel);
  const DType dtype = given.q.dtype();
  const DType lse_dtype = is_half(dtype) ? DType::f32 : dtype;
  const int64_t batch = given.q.size(0) * given.q.size(1), sq = given.q.size(2);
  const Shape out_shape{given.q.size(0), given.q.size(1), sq, given.v.size(3)};
  check_tensor(out, out_shape, dtype, device, kernel, "out");
  check_logsumexp(logsumexp, {batch, sq}, lse_dtype, device, kernel);
  check_tensor(grad_out, out_shape, dtype, device, kernel, "grad_out");
  check_tensor(grad_q, given.q.shape(), dtype, device, kernel, "grad_q");
  check_tensor(grad_k, given.k.shape(), dtype, device, kernel, "grad_k");
  check_tensor(grad_v, given.v.shape(), dtype, device, kernel, "grad_v");
  if (batch * sq == 0) return;
  const AttentionProblem problem = contiguous_problem(*this, given);
  const Tensor own_out = own_copy(*this, out, dtype);
  const Tensor own_grad_out = own_copy(*this, grad_out, dtype);

  // The gradients the kernel accumulates into (atomically, so f32 or f64, and contiguous): the
  // given ones, or copies (f32 for f16/bf16) that go back into them once at the end.
  const DType accumulate = is_half(dtype) ? DType::f32 : dtype;
  const Tensor dq = own_copy(*this, grad_q, accumulate);
  const Tensor dk = own_copy(*this, grad_k, accumulate);
  const Tensor d_v = own_copy(*this, grad_v, accumulate);

  dispatch_floating_or_half(dtype, kernel, [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    DeviceTables tables;
    const AttentionArgs<T, C> args = make_args<T>(*this, problem, device, tables);
    // shared memory: q_row [d], d_out_row [dv], dq_acc [d], d_scores and kept [kTile each],
    // scratch [kWarps]
    const LaunchShape shape = row_blocks<C>(attention_backward_kernel<T, C>, batch * sq,
                                            2 * args.d + args.dv + 2 * kTile + kWarps, problem,
                                            device_index(), kernel);
    launch(kernel, attention_backward_kernel<T, C>, shape, args, own_out.data_as<T>(),
           logsumexp.data_as<C>(), own_grad_out.data_as<T>(), dq.data_as<C>(), dk.data_as<C>(),
           d_v.data_as<C>());
  });

  if (!dq.same(grad_q)) copy(dq, grad_q);
  if (!dk.same(grad_k)) copy(dk, grad_k);
  if (!d_v.same(grad_v)) copy(d_v, grad_v);
}

}  // namespace tg::cuda
