// The fused attention op: shape checks, then one kernel call each way (cpu/fast/attention.cpp).
#include "tapegrad/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/embedding.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

// The mask as a strided view over [N, Sq, Sk] without materialising the broadcast.
void attach_mask(AttentionProblem& problem, const Tensor& mask, const Shape& batch, int64_t sq,
                 int64_t sk) {
  Shape full = batch;
  full.insert(full.end(), {sq, sk});
  const Tensor view = expand_untaped(mask, full);
  problem.mask = view;
  problem.mask_row_stride = view.strides()[view.dim() - 2];
  problem.mask_col_stride = view.strides()[view.dim() - 1];
  problem.mask_offsets = batch_offsets(view, batch);  // relative to the view's first element
}

// Whether t, of shape [B, H, S, width], is a view of a contiguous [B, S, H, width] tensor (what
// MultiHeadAttention's split_heads makes of a projection: a view and a transpose).
bool heads_interleaved(const Tensor& t) {
  return t.dim() == 4 && t.detach().transpose(1, 2).is_contiguous();
}

// q, k, v of a contiguous [B, S, 3 hidden] tensor as [B, H, S, head_dim] views, rows 3 hidden
// apart (taped like any view when `qkv` is).
std::vector<Tensor> qkv_slices(const Tensor& qkv, int64_t heads) {
  const int64_t batch = qkv.size(0), seq = qkv.size(1), head_dim = qkv.size(2) / (3 * heads);
  const Tensor split = qkv.view({batch, seq, 3, heads, head_dim});
  std::vector<Tensor> slices;
  for (int64_t which = 0; which < 3; ++which) {
    slices.push_back(split.narrow(2, which, 1).squeeze(2).transpose(1, 2));
  }
  return slices;
}

// A layout's sizes: positive windows, and products that stay far from int64's limit.
void check_sparsity(const char* op, const SparsityLayout& s) {
  if (s.kind == SparsityKind::full) return;
  constexpr int64_t kLimit = int64_t{1} << 40;
  TG_CHECK(s.window >= 1 && s.window <= kLimit, "op '", op, "': a sparse layout needs a window in [1, 2^40], got ", s.window);
  TG_CHECK(s.dilation >= 1 && s.dilation <= kLimit / s.window, "op '", op, "': band dilation ",
           s.dilation, " with window ", s.window, " (need dilation >= 1 and window x dilation <= 2^40)");
  TG_CHECK(s.random_blocks >= 0 && s.random_blocks <= kLimit && s.global_tokens >= 0 &&
               s.global_tokens <= kLimit,
           "op '", op, "': bigbird random blocks ", s.random_blocks, " and global tokens ",
           s.global_tokens, " must be in [0, 2^40]");
}

}  // namespace

Tensor sparsity_mask(const SparsityLayout& sparsity, int64_t sq, int64_t sk, Device device) {
  check_sparsity("sparsity_mask", sparsity);
  TG_CHECK(sq >= 0 && sk >= 0 && (sq == 0 || sk <= (int64_t{1} << 31) / std::max<int64_t>(sq, 1)),
           "sparsity_mask: a dense [", sq, ", ", sk, "] mask is too large (at most 2^31 entries)");
  const std::vector<int64_t> random = bigbird_random_blocks(sparsity, sq, sk);
  const SparsityView view = sparsity_view(sparsity, random, sq);
  std::vector<bool> allowed(sq * sk);
  for (int64_t i = 0; i < sq; ++i) {
    for (int64_t j = 0; j < sk; ++j) allowed[i * sk + j] = view.visible(i, j);
  }
  return from_bools(allowed, {sq, sk}, device);
}

Tensor alibi_bias(int64_t heads, int64_t sq, int64_t sk, DType dtype, Device device) {
  TG_CHECK(heads >= 1 && sq >= 0 && sk >= 0, "alibi_bias: [", heads, ", ", sq, ", ", sk,
           "] is not a valid bias shape (heads >= 1, sizes >= 0)");
  // The entry count as checked products: a wrapped product would pass any bound.
  const int64_t entries = checked_mul(checked_mul(heads, sq, "alibi_bias: heads x sq"), sk,
                                      "alibi_bias: heads x sq x sk");
  TG_CHECK(entries <= (int64_t{1} << 31), "alibi_bias: [", heads, ", ", sq, ", ", sk,
           "] has ", entries, " entries (at most 2^31)");
  std::vector<double> bias(entries);
  for (int64_t h = 0; h < heads; ++h) {
    const double slope = alibi_slope(h, heads);
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) bias[(h * sq + i) * sk + j] = -slope * static_cast<double>(i > j ? i - j : j - i);
    }
  }
  return from_values(bias, {heads, sq, sk}, dtype, device);
}

Tensor relative_bias_dense(const Tensor& relative_bias, int64_t sq, int64_t sk) {
  // sk bounded before Sq + Sk - 1 is formed, so that the sum cannot wrap.
  TG_CHECK(relative_bias.defined() && relative_bias.dim() == 2 && sq >= 1 && sk >= 1 &&
               sk <= (int64_t{1} << 31) / sq && relative_bias.size(1) == sq + sk - 1,
           "relative_bias_dense: a relative bias [H, Sq + Sk - 1] for Sq ", sq, ", Sk ", sk,
           " (at most 2^31 pairs), got ",
           relative_bias.defined() ? shape_str(relative_bias.shape()) : "an undefined tensor");
  std::vector<int64_t> offsets(sq * sk);  // entry (i, j) reads column j - i + Sq - 1
  for (int64_t i = 0; i < sq; ++i) {
    for (int64_t j = 0; j < sk; ++j) offsets[i * sk + j] = j - i + sq - 1;
  }
  const Tensor columns = from_indices(offsets, {sq, sk}, relative_bias.device());
  // rows of the [Sq + Sk - 1, H] transpose, looked up: [Sq, Sk, H] -> [H, Sq, Sk]
  return embedding(columns, relative_bias.transpose(0, 1)).permute({2, 0, 1});
}

namespace {

// The checks of both ops: q, k, v of shapes [..., Sq, head_dim], [..., Sk, head_dim],
// [..., Sk, value_dim] on one device in one dtype, dropout_p in [0, 1), and a bool mask.
void check_inputs(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& mask, double dropout_p) {
  TG_CHECK(q.defined() && k.defined() && v.defined(), "op '", op, "': undefined tensor");
  TG_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), "op '", op,
           "': q, k, v of shapes ", shape_str(q.shape()), ", ", shape_str(k.shape()), ", ",
           shape_str(v.shape()), " need the same number of dims (at least 2)");
  const Shape batch(q.shape().begin(), q.shape().end() - 2);
  const int64_t head_dim = q.size(-1), sk = k.size(-2);
  TG_CHECK(Shape(k.shape().begin(), k.shape().end() - 2) == batch &&
               Shape(v.shape().begin(), v.shape().end() - 2) == batch && k.size(-1) == head_dim &&
               v.size(-2) == sk,
           "op '", op, "': shapes q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), ", v ",
           shape_str(v.shape()),
           " do not fit (expected [..., Sq, head_dim], [..., Sk, head_dim], [..., Sk, value_dim])");
  check_same_device(op, {q, k, v, mask});
  TG_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "op '", op, "': dtypes ",
           dtype_name(q.dtype()), ", ", dtype_name(k.dtype()), ", ", dtype_name(v.dtype()), " differ");
  TG_CHECK(dropout_p >= 0 && dropout_p < 1, "op '", op, "': dropout_p must be in [0, 1), got ", dropout_p);
  TG_CHECK(!mask.defined() || mask.dtype() == DType::b8, "op '", op, "': mask must be bool, got ",
           mask.defined() ? dtype_name(mask.dtype()) : "");
}

// The relative bias: [H, Sq + Sk - 1] for q [..., H, Sq, d], floating, on q's device.
void check_relative_bias(const char* op, const Tensor& q, const Tensor& k, const Tensor& bias) {
  if (!bias.defined()) return;
  const int64_t offsets = q.size(-2) + k.size(-2) - 1;
  TG_CHECK(q.dim() >= 3 && bias.dim() == 2 && bias.size(0) == q.size(-3) &&
               bias.size(1) == offsets && is_floating(bias.dtype()),
           "op '", op, "': relative_bias must be a floating [heads, Sq + Sk - 1] = [",
           q.dim() >= 3 ? q.size(-3) : 0, ", ", offsets, "] for q ", shape_str(q.shape()),
           ", got ", dtype_name(bias.dtype()), " ", shape_str(bias.shape()));
  check_same_device(op, {q, bias});
}

// [B, H, S, width] <-> [B, S, H, width].
Shape swap_heads(const Shape& shape) { return {shape[0], shape[2], shape[1], shape[3]}; }

// Puts q, k, v into the problem as the kernel takes them, [B, H, S, width], and says whether their
// heads interleave. Heads split from a projection ([B, H, S, width] views of [B, S, H, width], or
// of a packed [B, S, 3, H, width]) go to the CPU kernel as they are, and the output and gradients
// come back in that layout: splitting and merging heads then copies nothing. Anything else (and
// the CUDA kernels) gets contiguous [N, 1, S, width] copies.
bool set_operands(AttentionProblem& problem, const Tensor& q, const Tensor& k, const Tensor& v,
                  const Tensor& packed) {
  const bool interleaved = packed.defined() || (q.device().type == DeviceType::cpu &&
                                                 heads_interleaved(q) && heads_interleaved(k) &&
                                                 heads_interleaved(v));
  if (interleaved) {
    problem.q = q.detach();  // rows H head_dim (packed: 3 H head_dim) apart
    problem.k = k.detach();
    problem.v = v.detach();
  } else {
    const int64_t items = numel(Shape(q.shape().begin(), q.shape().end() - 2));
    problem.q = q.detach().contiguous().view({items, 1, q.size(-2), q.size(-1)});
    problem.k = k.detach().contiguous().view({items, 1, k.size(-2), k.size(-1)});
    problem.v = v.detach().contiguous().view({items, 1, v.size(-2), v.size(-1)});
  }
  return interleaved;
}

// The problem's settings: scale (1 / sqrt(head_dim) by default), causal, the mask, dropout (its
// Philox numbers reserved here), the sparse layout and ALiBi.
void set_settings(const char* op, AttentionProblem& problem, const Tensor& q, const Tensor& k,
                  const Tensor& mask, bool is_causal, double dropout_p,
                  std::optional<double> scale, const SparsityLayout& sparsity, bool alibi) {
  const Shape batch(q.shape().begin(), q.shape().end() - 2);
  const int64_t sq = q.size(-2), head_dim = q.size(-1), sk = k.size(-2);
  problem.scale = scale.value_or(1.0 / std::sqrt(static_cast<double>(head_dim)));
  problem.causal = is_causal;
  if (mask.defined()) attach_mask(problem, mask, batch, sq, sk);
  problem.dropout_p = dropout_p;
  check_sparsity(op, sparsity);
  problem.sparsity = sparsity;
  problem.sparsity_random = bigbird_random_blocks(sparsity, sq, sk);
  if (alibi) {
    TG_CHECK(q.dim() >= 3, "op '", op, "': alibi needs q of shape [..., heads, Sq, d], got ",
             shape_str(q.shape()));
    problem.alibi_heads = q.size(-3);
  }
  if (dropout_p > 0) {
    problem.seed = rng_state().seed;
    problem.offset = reserve_random(numel(batch) * sq * sk);
  }
}

// What the forward kernel wrote: the output [B, H, Sq, value_dim] (heads interleaved in memory
// when the operands' are), the row log-sum-exp, and the op's result, the output as
// [..., Sq, value_dim].
struct Forward {
  Tensor out, logsumexp, result;
};

Forward run_forward(const AttentionProblem& problem, const Tensor& q, const Tensor& v,
                    bool interleaved) {
  const Shape batch(q.shape().begin(), q.shape().end() - 2);
  const int64_t sq = q.size(-2), value_dim = v.size(-1), items = numel(batch);
  const Tensor out =
      interleaved ? empty(swap_heads({q.size(0), q.size(1), sq, value_dim}), q.dtype(), q.device())
                        .transpose(1, 2)
                  : empty({items, 1, sq, value_dim}, q.dtype(), q.device());
  // The row statistics stay f32 for f16/bf16 inputs: log-sum-exp needs the range and precision.
  const DType lse_dtype = is_half(q.dtype()) ? DType::f32 : q.dtype();
  Tensor logsumexp = empty({items, sq}, lse_dtype, q.device());
  kernels(q.device()).attention_forward(problem, out, logsumexp);
  Shape out_shape = batch;
  out_shape.insert(out_shape.end(), {sq, value_dim});
  Tensor result = interleaved ? out : out.view(out_shape);
  return {out, logsumexp, result};
}

// The output gradient g [B, H, Sq, value_dim] laid out as the interleaved output is, heads
// interleaved in memory.
Tensor interleaved_grad_out(const Tensor& g) {
  return g.transpose(1, 2).contiguous().transpose(1, 2);
}

// The problem of a backward: the settings with the saved q, k, v (saved[0..2]), mask (saved[5])
// and relative bias (saved[6]).
AttentionProblem saved_problem(const AttentionProblem& settings, const Node& node) {
  AttentionProblem problem = settings;
  problem.q = node.saved[0];
  problem.k = node.saved[1];
  problem.v = node.saved[2];
  problem.mask = node.saved[5];
  problem.relative_bias = node.saved[6];
  return problem;
}

// The inputs of the op's node: `operands` (q, k, v, or the packed qkv), then the relative bias
// when there is one.
std::vector<Tensor> node_inputs(std::vector<Tensor> operands, const Tensor& relative_bias) {
  if (relative_bias.defined()) operands.push_back(relative_bias);
  return operands;
}

// Where a backward's kernel adds the relative bias's gradient: a zeroed [N, Sq + Sk - 1] of the
// kernel's dtype in problem.relative_bias_grad, when the node's input `input` (the bias) needs one.
void prepare_relative_grad(AttentionProblem& problem, const Node& node, size_t input) {
  if (!problem.relative_bias.defined() || !node.needs_grad(input)) return;
  const Tensor& bias = problem.relative_bias;
  const int64_t items = problem.q.size(0) * problem.q.size(1);
  problem.relative_bias_grad = zeros({items, bias.size(1)}, bias.dtype(), bias.device());
}

// The gradients of the node's inputs: `operands`', then the relative bias's (when it is an
// input): the kernel's per-item sums [N, L] summed over the batch into [H, L], in `bias_dtype`.
Grads with_relative_grad(Grads operands, const AttentionProblem& problem, DType bias_dtype) {
  if (!problem.relative_bias.defined()) return operands;
  const Tensor& per_item = problem.relative_bias_grad;
  if (!per_item.defined()) {
    operands.emplace_back();  // the bias needs no gradient
    return operands;
  }
  const int64_t heads = problem.relative_bias.size(0), offsets = per_item.size(1);
  const Tensor summed = sum(per_item.view({per_item.size(0) / heads, heads, offsets}), {0});
  operands.push_back(summed.to(bias_dtype));
  return operands;
}

// Records packed_self_attention's node: its input is `packed`, whose gradient is one tensor
// (and the relative bias, if any).
void record_packed(const char* op, const Tensor& packed, int64_t heads,
                   const Tensor& relative_bias, Tensor& result, std::vector<Tensor> saved,
                   const AttentionProblem& settings) {
  const DType bias_dtype = relative_bias.defined() ? relative_bias.dtype() : DType::f32;
  record(op, node_inputs({packed}, relative_bias), result, std::move(saved),
         [settings, heads, bias_dtype, shape = packed.shape()](const Tensor& g, const Node& node) {
           AttentionProblem problem = saved_problem(settings, node);
           prepare_relative_grad(problem, node, 1);
           // One zeroed [B, S, 3 hidden] gradient; the kernel adds into its three slices
           const Tensor grad = zeros(shape, g.dtype(), g.device());
           const std::vector<Tensor> slices = qkv_slices(grad, heads);
           kernels(g.device()).attention_backward(problem, node.saved[3], node.saved[4],
                                                  interleaved_grad_out(g), slices[0], slices[1],
                                                  slices[2]);
           return with_relative_grad(Grads{grad}, problem, bias_dtype);
         });
}

// Records scaled_dot_product_attention's node: inputs q, k, v (and the relative bias, if any).
void record_separate(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                     const Tensor& relative_bias, bool interleaved, Tensor& result,
                     std::vector<Tensor> saved, const AttentionProblem& settings) {
  const DType bias_dtype = relative_bias.defined() ? relative_bias.dtype() : DType::f32;
  record(op, node_inputs({q, k, v}, relative_bias), result, std::move(saved),
         [settings, interleaved, bias_dtype, q_shape = q.shape(), k_shape = k.shape(),
          v_shape = v.shape()](const Tensor& g, const Node& node) {
           AttentionProblem problem = saved_problem(settings, node);
           prepare_relative_grad(problem, node, 3);
           const Tensor& out = node.saved[3];
           if (interleaved) {  // all [B, H, S, width] over [B, S, H, width]; so is g, copied
             const auto zeros_like_heads = [&](const Tensor& t) {
               return zeros(swap_heads(t.shape()), g.dtype(), g.device()).transpose(1, 2);
             };
             const Tensor grad_q = zeros_like_heads(problem.q);
             const Tensor grad_k = zeros_like_heads(problem.k);
             const Tensor grad_v = zeros_like_heads(problem.v);
             kernels(g.device()).attention_backward(problem, out, node.saved[4],
                                                    interleaved_grad_out(g), grad_q, grad_k,
                                                    grad_v);
             return with_relative_grad(Grads{grad_q, grad_k, grad_v}, problem, bias_dtype);
           }
           Tensor grad_q = zeros(problem.q.shape(), g.dtype(), g.device());
           Tensor grad_k = zeros(problem.k.shape(), g.dtype(), g.device());
           Tensor grad_v = zeros(problem.v.shape(), g.dtype(), g.device());
           kernels(g.device()).attention_backward(problem, out, node.saved[4],
                                                  g.contiguous().view(out.shape()), grad_q,
                                                  grad_k, grad_v);
           return with_relative_grad(
               Grads{grad_q.view(q_shape), grad_k.view(k_shape), grad_v.view(v_shape)}, problem,
               bias_dtype);
         });
}

// The body of both ops. q, k, v: [..., S, width], already cast under autocast. `packed`, when
// defined, is the [B, S, 3 hidden] tensor whose [B, H, S, head_dim] slices q, k, v are
// (packed_self_attention): the kernel reads them in place, 3 hidden floats a row, and the tape
// records `packed` as the one input, whose gradient the backward writes as one tensor.
Tensor attention(const char* op, const Tensor& q, const Tensor& k, const Tensor& v,
                 const Tensor& packed, const Tensor& mask, bool is_causal, double dropout_p,
                 std::optional<double> scale, const SparsityLayout& sparsity, bool alibi,
                 const Tensor& relative_bias) {
  check_inputs(op, q, k, v, mask, dropout_p);
  check_relative_bias(op, q, k, relative_bias);
  AttentionProblem problem;
  const bool interleaved = set_operands(problem, q, k, v, packed);
  set_settings(op, problem, q, k, mask, is_causal, dropout_p, scale, sparsity, alibi);
  if (relative_bias.defined()) {  // read by the kernel in its compute dtype
    problem.relative_bias =
        relative_bias.detach().to(is_half(q.dtype()) ? DType::f32 : q.dtype()).contiguous();
  }
  Forward forward = run_forward(problem, q, v, interleaved);

  // The tensors are saved on the node (and freed with it); the closure keeps only the settings.
  std::vector<Tensor> saved{problem.q,    problem.k,    problem.v,
                            forward.out,  forward.logsumexp, problem.mask,
                            problem.relative_bias};
  AttentionProblem settings = problem;
  settings.q = settings.k = settings.v = settings.mask = settings.relative_bias = Tensor();

  // Backward recomputes the probabilities from q, k, v and the row log-sum-exp:
  // dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)), dQ = scale dS K, dK = scale dS^T Q
  if (packed.defined()) {
    record_packed(op, packed, q.size(1), relative_bias, forward.result, std::move(saved),
                  settings);
  } else {
    record_separate(op, q, k, v, relative_bias, interleaved, forward.result, std::move(saved),
                    settings);
  }
  return forward.result;
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                    const Tensor& mask, bool is_causal, double dropout_p,
                                    std::optional<double> scale, const SparsityLayout& sparsity,
                                    bool alibi, const Tensor& relative_bias) {
  // Under autocast: f16/bf16 q, k, v and output; the kernel computes in f32 (the bias stays f32).
  return attention("scaled_dot_product_attention", autocast_to_half(q_in), autocast_to_half(k_in),
                   autocast_to_half(v_in), Tensor(), mask, is_causal, dropout_p, scale, sparsity,
                   alibi, relative_bias);
}

Tensor packed_self_attention(const Tensor& qkv_in, int64_t heads, const Tensor& mask,
                             bool is_causal, double dropout_p, std::optional<double> scale,
                             const SparsityLayout& sparsity, bool alibi,
                             const Tensor& relative_bias) {
  const char* op = "packed_self_attention";
  const Tensor qkv = autocast_to_half(qkv_in);
  TG_CHECK(qkv.defined() && qkv.dim() == 3 && heads >= 1 && qkv.size(2) % (3 * heads) == 0,
           "op '", op, "': qkv ", qkv.defined() ? shape_str(qkv.shape()) : "undefined", " with ",
           heads, " heads (expected [B, S, 3 hidden], hidden a multiple of the heads)");
  if (qkv.device().type != DeviceType::cpu) {  // CUDA kernels take [N, S, width]: taped slices
    const std::vector<Tensor> slices = qkv_slices(qkv.contiguous(), heads);
    return scaled_dot_product_attention(slices[0], slices[1], slices[2], mask, is_causal,
                                        dropout_p, scale, sparsity, alibi, relative_bias);
  }
  const Tensor packed = qkv.contiguous();
  const std::vector<Tensor> slices = qkv_slices(packed.detach(), heads);
  return attention(op, slices[0], slices[1], slices[2], packed, mask, is_causal, dropout_p, scale,
                   sparsity, alibi, relative_bias);
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration attention_ops({"scaled_dot_product_attention", "packed_self_attention"});

}  // namespace tg
