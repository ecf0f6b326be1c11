// The CUDA fused attention kernels (cuda/attention.cu) against their CPU twins
// (cpu/fast/attention.cpp) on identical inputs: outputs, log-sum-exps and gradients, for every
// mask layout (shared over heads, padding, row masks with column stride 0), causal attention with
// Sq != Sk, d != dv, dropout with the same Philox numbering, several key tiles, f16/bf16, and
// operands with their heads interleaved in memory (which the CUDA kernels copy to contiguous).
// Sizes stay small: the emulated device runs every GPU thread as an OS thread.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"
#include "cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

// A bool mask as the op passes it: a contiguous tensor (built on the CPU) and where element
// (n, i, j) lives in it, mask_offsets[n] + i * row_stride + j * col_stride.
struct Mask {
  Tensor values;  // undefined: no mask
  std::vector<int64_t> offsets;
  int64_t row_stride = 0, col_stride = 0;
};

// One attention problem: sizes, settings and the mask.
struct Case {
  int64_t n = 1, sq = 1, sk = 1, d = 4, dv = 4;
  DType dtype = DType::f32;
  bool causal = false;
  double dropout_p = 0;
  double scale = 0;  // 0: 1 / sqrt(d)
  Mask mask = {};
  uint64_t seed = 1234, offset = 17;
  SparsityLayout sparsity = {};
  int64_t alibi_heads = 0;
  // Zero rows of dO, which both backwards skip: all but the last query and every fifth one from 2.
  // With inf_in_unread_query, also an infinity in q at item 0, query 0, one of those rows.
  bool sparse_grad = false;
  bool inf_in_unread_query = false;
  // q, k, v, the output and the gradients are [B, H, S, width] with B = n / heads, H = heads;
  // interleaved: views of [B, S, H, width] tensors (as heads split from a projection), which the
  // CUDA kernels copy to contiguous ones and back.
  int64_t heads = 1;
  bool interleaved = false;
  // > 0: a learned relative bias [relative_heads, Sq + Sk - 1] (T5's) and its gradient compared
  int64_t relative_heads = 0;
};

// The case's [B, H, S, width] shape of an operand with `rows` rows of `width` entries.
Shape heads_shape(const Case& c, int64_t rows, int64_t width) {
  return {c.n / c.heads, c.heads, rows, width};
}

// The tensor in the case's layout (on its own device): the same values, the heads interleaved in
// memory when the case says so.
Tensor lay_out(const Case& c, const Tensor& t) {
  return c.interleaved ? t.transpose(1, 2).contiguous().transpose(1, 2) : t;
}

bool keeps_gradient(const Case& c, int64_t i) { return i == c.sq - 1 || i % 5 == 2; }

struct Tolerance {
  double rtol, atol;
};

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f64: return {1e-10, 1e-12};
    case DType::f32: return {2e-5, 2e-6};
    case DType::f16: return {1e-2, 2e-3};
    default: return {4e-2, 1e-2};  // bf16: 8 mantissa bits
  }
}

// A CPU bool tensor from 0/1 entries.
Tensor bools(const std::vector<int>& entries, const Shape& shape) {
  std::vector<bool> values(entries.begin(), entries.end());
  return from_bools(values, shape, kCPU);
}

// A [sq, sk] mask shared by every item (offsets all 0), about `keep` of the entries true.
Mask shared_mask(int64_t n, int64_t sq, int64_t sk, double keep, uint64_t salt) {
  std::mt19937_64 engine(salt);
  std::bernoulli_distribution kept(keep);
  std::vector<int> entries(sq * sk);
  for (int& entry : entries) entry = kept(engine);
  return {bools(entries, {sq, sk}), std::vector<int64_t>(n, 0), sk, 1};
}

// A padding mask [batch, sk] (key j of batch item b visible when j < lengths[b]) broadcast over
// `heads` heads and every query row: item n = b * heads + h, row stride 0.
Mask padding_mask(const std::vector<int64_t>& lengths, int64_t heads, int64_t sk) {
  const int64_t batch = static_cast<int64_t>(lengths.size());
  std::vector<int> entries(batch * sk);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < sk; ++j) entries[b * sk + j] = j < lengths[b];
  }
  Mask mask{bools(entries, {batch, sk}), {}, 0, 1};
  for (int64_t n = 0; n < batch * heads; ++n) mask.offsets.push_back(n / heads * sk);
  return mask;
}

// A row mask [sq] (query i sees every key or none) read with column stride 0.
Mask row_mask(int64_t n, const std::vector<int>& rows) {
  return {bools(rows, {static_cast<int64_t>(rows.size())}), std::vector<int64_t>(n, 0), 1, 0};
}

// The problem with q, k, v (and the mask) on `device`.
AttentionProblem problem_on(const Case& c, const Tensor& q, const Tensor& k, const Tensor& v,
                            bool cuda) {
  AttentionProblem p;
  p.q = lay_out(c, cuda ? on_cuda(q) : q);
  p.k = lay_out(c, cuda ? on_cuda(k) : k);
  p.v = lay_out(c, cuda ? on_cuda(v) : v);
  p.scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(static_cast<double>(c.d));
  p.causal = c.causal;
  if (c.mask.values.defined()) {
    p.mask = cuda ? on_cuda(c.mask.values) : c.mask.values;
    p.mask_offsets = c.mask.offsets;
    p.mask_row_stride = c.mask.row_stride;
    p.mask_col_stride = c.mask.col_stride;
  }
  p.dropout_p = c.dropout_p;
  p.seed = c.seed;
  p.offset = c.offset;
  p.sparsity = c.sparsity;
  p.sparsity_random = bigbird_random_blocks(c.sparsity, c.sq, c.sk);
  p.alibi_heads = c.alibi_heads;
  if (c.relative_heads > 0) {  // the kernels' compute dtype: f64 for f64, else f32
    const DType compute = c.dtype == DType::f64 ? DType::f64 : DType::f32;
    const Tensor bias =
        random_tensor({c.relative_heads, c.sq + c.sk - 1}, compute, 0x5eed + 8, -2, 2);
    p.relative_bias = cuda ? on_cuda(bias) : bias;
  }
  return p;
}

// What one device computed: forward results and the gradients after one backward.
struct Results {
  Tensor out, lse, dq, dk, dv;
  Tensor d_relative;  // the relative bias's per-item gradient [N, Sq + Sk - 1], when it has one
};

// Forward then backward on one device. The gradients start from the same nonzero values on both
// devices (the kernels accumulate into them).
Results run(const Case& c, bool cuda) {
  Tensor q = random_tensor(heads_shape(c, c.sq, c.d), c.dtype, 0x5eed + 1, -1.5, 1.5);
  const Tensor k = random_tensor(heads_shape(c, c.sk, c.d), c.dtype, 0x5eed + 2, -1.5, 1.5);
  const Tensor v = random_tensor(heads_shape(c, c.sk, c.dv), c.dtype, 0x5eed + 3, -1.5, 1.5);
  Tensor grad_out = random_tensor(heads_shape(c, c.sq, c.dv), c.dtype, 0x5eed + 4, -1.5, 1.5);
  if (c.sparse_grad) {
    std::vector<double> values = grad_out.to_host_f64();
    for (int64_t row = 0; row < c.n * c.sq; ++row) {
      if (!keeps_gradient(c, row % c.sq)) std::fill_n(values.begin() + row * c.dv, c.dv, 0.0);
    }
    grad_out = from_values(values, grad_out.shape(), c.dtype, kCPU);
  }
  if (c.inf_in_unread_query) {
    std::vector<double> values = q.to_host_f64();
    values[0] = std::numeric_limits<double>::infinity();
    q = from_values(values, q.shape(), c.dtype, kCPU);
  }
  AttentionProblem p = problem_on(c, q, k, v, cuda);
  const Device device = cuda ? kCuda : kCPU;
  Kernels& kernels = tg::kernels(device);
  auto here = [&](const Tensor& t) { return lay_out(c, cuda ? on_cuda(t) : t); };

  Results r;
  r.out = lay_out(c, empty(heads_shape(c, c.sq, c.dv), c.dtype, device));
  r.lse = empty({c.n, c.sq}, is_half(c.dtype) ? DType::f32 : c.dtype, device);
  kernels.attention_forward(p, r.out, r.lse);
  r.dq = here(random_tensor(p.q.shape(), c.dtype, 0x5eed + 5, -1.5, 1.5));
  r.dk = here(random_tensor(p.k.shape(), c.dtype, 0x5eed + 6, -1.5, 1.5));
  r.dv = here(random_tensor(p.v.shape(), c.dtype, 0x5eed + 7, -1.5, 1.5));
  if (p.relative_bias.defined()) {
    p.relative_bias_grad = zeros({c.n, c.sq + c.sk - 1}, p.relative_bias.dtype(), device);
  }
  kernels.attention_backward(p, r.out, r.lse, here(grad_out), r.dq, r.dk, r.dv);
  r.d_relative = p.relative_bias_grad;
  return r;
}

// No NaN anywhere and no infinity except a fully masked row's log-sum-exp.
void require_finite(const Tensor& t) {
  for (double value : on_cpu(t).to_host_f64()) REQUIRE(std::isfinite(value));
}

// Runs the case on both devices and compares everything the kernels write.
Results require_match(const Case& c) {
  INFO("n " << c.n << ", sq " << c.sq << ", sk " << c.sk << ", d " << c.d << ", dv " << c.dv
            << ", " << dtype_name(c.dtype) << (c.causal ? ", causal" : "")
            << (c.mask.values.defined() ? ", masked" : "") << ", dropout " << c.dropout_p);
  const Results cpu = run(c, false);
  const Results cuda = run(c, true);
  const Tolerance tol = tolerance_for(c.dtype);
  const Tolerance lse_tol = tolerance_for(is_half(c.dtype) ? DType::f32 : c.dtype);
  {
    INFO("out");
    require_close(cuda.out, cpu.out, tol.rtol, tol.atol);
  }
  {
    INFO("logsumexp");
    require_close(cuda.lse, cpu.lse, lse_tol.rtol, lse_tol.atol);
  }
  {
    INFO("grad q");
    require_close(cuda.dq, cpu.dq, tol.rtol, tol.atol);
  }
  {
    INFO("grad k");
    require_close(cuda.dk, cpu.dk, tol.rtol, tol.atol);
  }
  {
    INFO("grad v");
    require_close(cuda.dv, cpu.dv, tol.rtol, tol.atol);
  }
  if (cpu.d_relative.defined()) {  // sums of dS along each diagonal: f32 or f64 either way
    INFO("grad of the relative bias");
    const Tolerance sums = tolerance_for(is_half(c.dtype) ? DType::f32 : c.dtype);
    require_close(cuda.d_relative, cpu.d_relative, 4 * sums.rtol, 4 * sums.atol);
  }
  require_finite(cuda.out);
  require_finite(cuda.dq);
  require_finite(cuda.dk);
  require_finite(cuda.dv);
  return cuda;
}

const std::vector<DType> kExact = {DType::f32, DType::f64};

}  // namespace

TEST_CASE("cuda attention matches the cpu without a mask", "[cuda]") {
  for (DType dtype : kExact) {
    require_match({.n = 3, .sq = 13, .sk = 13, .d = 8, .dv = 8, .dtype = dtype});
    require_match({.n = 2, .sq = 7, .sk = 7, .d = 5, .dv = 11, .dtype = dtype});   // d != dv
    require_match({.n = 1, .sq = 4, .sk = 9, .d = 12, .dv = 3, .dtype = dtype, .scale = 0.37});
  }
}

TEST_CASE("cuda attention matches the cpu when causal", "[cuda]") {
  for (DType dtype : kExact) {
    require_match({.n = 2, .sq = 17, .sk = 17, .d = 6, .dv = 6, .dtype = dtype, .causal = true});
    require_match({.n = 2, .sq = 6, .sk = 9, .d = 4, .dv = 5, .dtype = dtype, .causal = true});
    require_match({.n = 2, .sq = 9, .sk = 6, .d = 4, .dv = 5, .dtype = dtype, .causal = true});
  }
}

TEST_CASE("cuda attention matches the cpu for cross attention", "[cuda]") {
  for (DType dtype : kExact) {
    require_match({.n = 2, .sq = 5, .sk = 37, .d = 6, .dv = 10, .dtype = dtype});
    require_match({.n = 2, .sq = 31, .sk = 3, .d = 7, .dv = 2, .dtype = dtype});
  }
}

TEST_CASE("cuda attention matches the cpu with a mask shared by the heads", "[cuda]") {
  for (DType dtype : kExact) {
    // [Sq, Sk] broadcast over 3 items: offsets all 0, row stride Sk, column stride 1.
    require_match({.n = 3, .sq = 11, .sk = 14, .d = 4, .dv = 6, .dtype = dtype,
                   .mask = shared_mask(3, 11, 14, 0.6, 99)});
    // the same with causal on top
    require_match({.n = 3, .sq = 12, .sk = 12, .d = 4, .dv = 6, .dtype = dtype, .causal = true,
                   .mask = shared_mask(3, 12, 12, 0.7, 5)});
    // a row mask [Sq] with column stride 0: rows 1 and 4 see nothing
    require_match({.n = 2, .sq = 6, .sk = 8, .d = 3, .dv = 5, .dtype = dtype,
                   .mask = row_mask(2, {1, 0, 1, 1, 0, 1})});
  }
}

TEST_CASE("cuda attention matches the cpu with padding masks and fully masked rows", "[cuda]") {
  for (DType dtype : kExact) {
    // 2 batch items x 2 heads; the second batch item has no visible key at all.
    const Case padded{.n = 4, .sq = 7, .sk = 9, .d = 4, .dv = 5, .dtype = dtype,
                      .mask = padding_mask({6, 0}, 2, 9)};
    const Results cuda = require_match(padded);
    // Items 2 and 3 are fully masked: output 0, gradients unchanged (the initial values), and the
    // log-sum-exp the CPU writes (-inf).
    const std::vector<double> out = on_cpu(cuda.out).to_host_f64();
    for (int64_t e = 2 * 7 * 5; e < 4 * 7 * 5; ++e) REQUIRE(out[e] == 0.0);
    const std::vector<double> lse = on_cpu(cuda.lse).to_host_f64();
    for (int64_t row = 2 * 7; row < 4 * 7; ++row) REQUIRE(lse[row] == -INFINITY);
    // A shared mask with one fully masked query row (row 3), causal on top.
    Mask mask = shared_mask(2, 8, 8, 0.8, 7);
    const std::vector<double> allowed = mask.values.to_host_f64();
    std::vector<int> entries(64);
    for (int e = 0; e < 64; ++e) entries[e] = allowed[e] != 0 && e / 8 != 3;
    mask.values = bools(entries, {8, 8});
    require_match({.n = 2, .sq = 8, .sk = 8, .d = 4, .dv = 4, .dtype = dtype, .causal = true,
                   .mask = mask});
    // Per-item masks [N, Sq, Sk] (offsets n Sq Sk), no broadcast at all.
    Mask per_item = shared_mask(1, 3 * 5, 6, 0.5, 11);
    per_item.values = per_item.values.view({3, 5, 6});
    per_item.offsets = {0, 30, 60};
    per_item.row_stride = 6;
    require_match({.n = 3, .sq = 5, .sk = 6, .d = 4, .dv = 4, .dtype = dtype, .mask = per_item});
  }
}

TEST_CASE("cuda attention matches the cpu with dropout", "[cuda]") {
  for (DType dtype : kExact) {
    require_match({.n = 2, .sq = 9, .sk = 13, .d = 4, .dv = 6, .dtype = dtype, .dropout_p = 0.3});
    require_match({.n = 2, .sq = 10, .sk = 10, .d = 4, .dv = 6, .dtype = dtype, .causal = true,
                   .dropout_p = 0.5, .seed = 42, .offset = 1001});
    require_match({.n = 4, .sq = 6, .sk = 7, .d = 3, .dv = 3, .dtype = dtype, .dropout_p = 0.2,
                   .mask = padding_mask({5, 2}, 2, 7)});
  }
  // Dropout really changes the result (the same case without it differs).
  const Case with{.n = 1, .sq = 5, .sk = 6, .d = 4, .dv = 4, .dtype = DType::f64, .dropout_p = 0.4};
  Case without = with;
  without.dropout_p = 0;
  const std::vector<double> dropped = on_cpu(run(with, true).out).to_host_f64();
  const std::vector<double> kept = on_cpu(run(without, true).out).to_host_f64();
  REQUIRE(dropped != kept);
}

TEST_CASE("cuda attention matches the cpu across several key tiles", "[cuda]") {
  for (DType dtype : kExact) {
    // 150 keys: tiles of 64, 64 and 22 (the online softmax rescales between them).
    require_match({.n = 2, .sq = 3, .sk = 150, .d = 4, .dv = 5, .dtype = dtype});
    // causal: rows from 64 on span two tiles; a mask and dropout on top
    require_match({.n = 1, .sq = 70, .sk = 70, .d = 3, .dv = 4, .dtype = dtype, .causal = true,
                   .dropout_p = 0.25, .mask = shared_mask(1, 70, 70, 0.8, 3)});
  }
}

TEST_CASE("cuda attention matches the cpu with sparse layouts and ALiBi", "[cuda]") {
  // Several key tiles of 64 (the CUDA kernel's) and of 128 (the CPU's), so that both skip tiles.
  const SparsityLayout local{.kind = SparsityKind::local, .window = 20};
  const SparsityLayout band{.kind = SparsityKind::band, .window = 4, .dilation = 9};
  const SparsityLayout bigbird{.kind = SparsityKind::bigbird, .window = 8, .random_blocks = 1,
                               .global_tokens = 3, .seed = 5};
  const DType f32 = DType::f32;
  require_match({.n = 1, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .sparsity = local});
  require_match({.n = 1, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .causal = true,
                 .sparsity = local});
  require_match({.n = 1, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .sparsity = band});
  require_match({.n = 1, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .causal = true,
                 .sparsity = bigbird});
  require_match({.n = 1, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = DType::f64,
                 .sparsity = bigbird});
  require_match({.n = 4, .sq = 20, .sk = 30, .d = 4, .dv = 3, .dtype = f32, .alibi_heads = 2});
  require_match({.n = 2, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .causal = true,
                 .sparsity = local, .alibi_heads = 2});
}

TEST_CASE("cuda attention matches the cpu in f16 and bf16", "[cuda]") {
  for (DType dtype : {DType::f16, DType::bf16}) {
    require_match({.n = 2, .sq = 9, .sk = 11, .d = 8, .dv = 6, .dtype = dtype});
    require_match({.n = 4, .sq = 8, .sk = 8, .d = 4, .dv = 5, .dtype = dtype, .causal = true,
                   .dropout_p = 0.3, .mask = padding_mask({8, 0}, 2, 8)});
    require_match({.n = 1, .sq = 5, .sk = 70, .d = 4, .dv = 4, .dtype = dtype,
                   .mask = shared_mask(1, 5, 70, 0.7, 8)});
  }
}

TEST_CASE("cuda attention matches the cpu when most output gradient rows are zero", "[cuda]") {
  for (DType dtype : kExact) {
    require_match({.n = 3, .sq = 23, .sk = 19, .d = 6, .dv = 5, .dtype = dtype, .sparse_grad = true});
    require_match({.n = 2, .sq = 23, .sk = 23, .d = 6, .dv = 5, .dtype = dtype, .causal = true,
                   .dropout_p = 0.3, .sparse_grad = true});
  }
}

// Both backwards leave out a query whose dO row is zero. An infinity in it makes its scores
// infinite and its probabilities NaN; no loss reads its output, and the NaN reaches neither dK nor
// dV, on either device (computed in full, 0 * NaN would spread it there).
TEST_CASE("cuda and cpu attention keep an unread query's NaN out of dK and dV", "[cuda]") {
  const Case c{.n = 2, .sq = 11, .sk = 11, .d = 4, .dv = 4, .dtype = DType::f32, .sparse_grad = true,
               .inf_in_unread_query = true};
  REQUIRE_FALSE(keeps_gradient(c, 0));
  const Results cpu = run(c, false), cuda = run(c, true);
  const Tolerance tol = tolerance_for(c.dtype);
  require_finite(cpu.dk);
  require_finite(cpu.dv);
  require_close(cuda.dk, cpu.dk, tol.rtol, tol.atol);
  require_close(cuda.dv, cpu.dv, tol.rtol, tol.atol);
  REQUIRE_FALSE(std::isfinite(cpu.out.to_host_f64()[0]));  // the query's own output
  REQUIRE_FALSE(std::isfinite(on_cpu(cuda.out).to_host_f64()[0]));
}

// Heads split from a projection, as the CPU op passes them: both devices read q, k, v and write
// the output and gradients where they lie (the CUDA kernels through contiguous copies).
TEST_CASE("cuda attention matches the cpu on interleaved heads", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    require_match({.n = 6, .sq = 9, .sk = 13, .d = 4, .dv = 6, .dtype = dtype, .heads = 3,
                   .interleaved = true});
    require_match({.n = 4, .sq = 70, .sk = 70, .d = 3, .dv = 4, .dtype = dtype, .causal = true,
                   .dropout_p = 0.25, .mask = padding_mask({70, 33}, 2, 70), .heads = 2,
                   .interleaved = true});
  }
}

TEST_CASE("cuda attention with no keys gives zero output", "[cuda]") {
  const Results cuda = require_match({.n = 2, .sq = 3, .sk = 0, .d = 4, .dv = 4,
                                      .dtype = DType::f32});
  for (double value : on_cpu(cuda.out).to_host_f64()) REQUIRE(value == 0.0);
}

TEST_CASE("cuda attention takes large heads past 48 KiB of shared memory", "[cuda]") {
  // f64, d = 7000: forward needs 56 KiB of shared memory per block, backward 113 KiB (opt-in).
  require_match({.n = 1, .sq = 3, .sk = 5, .d = 7000, .dv = 5, .dtype = DType::f64});
}

TEST_CASE("cuda attention rejects head sizes beyond shared memory", "[cuda]") {
  const int64_t d = 30000;  // 30000 f64 values of q alone need 240000 bytes per block
  AttentionProblem p;
  p.q = on_cuda(random_tensor({1, 1, 2, d}, DType::f64, 0x5eed + 1, -1.5, 1.5));
  p.k = on_cuda(random_tensor({1, 1, 2, d}, DType::f64, 0x5eed + 2, -1.5, 1.5));
  p.v = on_cuda(random_tensor({1, 1, 2, 4}, DType::f64, 0x5eed + 3, -1.5, 1.5));
  const Tensor out = empty({1, 1, 2, 4}, DType::f64, kCuda);
  const Tensor lse = empty({1, 2}, DType::f64, kCuda);
  REQUIRE_THROWS_WITH(kernels(kCuda).attention_forward(p, out, lse),
                      Catch::Contains("shared memory") && Catch::Contains("d = 30000"));
}

TEST_CASE("cuda attention rejects inputs on another device", "[cuda]") {
  AttentionProblem p;
  p.q = random_tensor({1, 1, 2, 4}, DType::f32, 0x5eed + 1, -1.5, 1.5);  // on the CPU
  p.k = on_cuda(random_tensor({1, 1, 2, 4}, DType::f32, 0x5eed + 2, -1.5, 1.5));
  p.v = on_cuda(random_tensor({1, 1, 2, 4}, DType::f32, 0x5eed + 3, -1.5, 1.5));
  const Tensor out = empty({1, 1, 2, 4}, DType::f32, kCuda);
  const Tensor lse = empty({1, 2}, DType::f32, kCuda);
  REQUIRE_THROWS_AS(kernels(kCuda).attention_forward(p, out, lse), tg::Error);
}

TEST_CASE("cuda attention matches the cpu with a learned relative bias", "[cuda]") {
  // several key tiles of both kernels, causal and not, Sq != Sk, a mask, a sparse layout, halves
  const DType f32 = DType::f32;
  require_match({.n = 4, .sq = 20, .sk = 30, .d = 4, .dv = 3, .dtype = f32, .relative_heads = 2});
  require_match({.n = 2, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .causal = true,
                 .relative_heads = 2});
  require_match({.n = 2, .sq = 70, .sk = 70, .d = 4, .dv = 4, .dtype = DType::f64,
                 .mask = padding_mask({70, 33}, 1, 70), .relative_heads = 1});
  require_match({.n = 2, .sq = 140, .sk = 140, .d = 4, .dv = 4, .dtype = f32, .causal = true,
                 .sparsity = {.kind = SparsityKind::local, .window = 20}, .relative_heads = 2});
  require_match({.n = 4, .sq = 9, .sk = 11, .d = 8, .dv = 6, .dtype = DType::bf16,
                 .relative_heads = 2});
  require_match({.n = 4, .sq = 12, .sk = 12, .d = 4, .dv = 4, .dtype = f32, .causal = true,
                 .heads = 2, .interleaved = true, .relative_heads = 2});
}
