// The fast CPU kernels against the readable reference kernels (cpu/reference.h): GEMM on
// OpenBLAS (split over threads), softmax over the middle axis, and fused attention (tiles, online
// softmax, SIMD exp), on random inputs of awkward sizes (not multiples of the 16-row GEMM blocks
// or of the 64 x 128 attention tiles), at 1 and at 2 or 3 threads, f32 and f64.
//
// Tolerances. u is the unit roundoff (2^-24 for f32, 2^-53 for f64); the reference sums in double,
// so what is compared is the fast kernel's rounding.
//  - GEMM: a dot product of length k in any order (blocked, FMA) is within gamma_k * sum |a||b|,
//    gamma_k = k u / (1 - k u) (Higham, Accuracy and Stability, 3.1); alpha, beta C and the final
//    store add a few u. Each element is checked against (k + 4) u * (|alpha| sum_p |a_ip||b_pj| +
//    |beta c_ij|): rigorous, yet ~1e-5 of the values for f32, where an index bug costs O(1).
//  - softmax: exp(x - m) is off by |x - m| u (rounding of x - m) plus an ulp or two (exp), the
//    sum l by n u and the division by u: softmax_k within (|x_k - m| + n + 4) u relative, and
//    log-softmax = x - m - log l within (|x| + |m| + n + 4) u absolute; checked at 2x that.
//  - attention: every result is a chain of at most K = Sq + Sk + head_dim + value_dim roundings
//    (the score dot product, the online-softmax corrections over the key tiles, the sums over
//    keys or queries), each within u of values bounded by the largest output (plus the SIMD exp,
//    within 1.2e-7 ~ 2u relative): checked at 16 K u times the largest magnitude of the
//    reference result (f32 with Sk = 150: 3e-4 of it; a key missed by a tile or mask bug moves
//    an output by ~1/Sk of it, 20x more).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/cpu/fast/attention_tiles.h"
#include "tapegrad/cpu/reference.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"
#include "tests/support/thread_counts.h"

using namespace tg;
using tg::testing::at_thread_counts;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

double unit_roundoff(DType dtype) { return dtype == DType::f32 ? 0x1.0p-24 : 0x1.0p-53; }

Tensor random(const Shape& shape, DType dtype, double low = -1, double high = 1) {
  return uniform(shape, low, high, dtype, kCPU);
}

Tensor abs_of(const Tensor& t) {
  std::vector<double> values = t.to_host_f64();
  for (double& x : values) x = std::abs(x);
  return from_values(values, t.shape(), t.dtype(), kCPU);
}

// t with NaN in the first `columns` entries of every row (a product's C, its spare columns kept).
Tensor nan_in_columns(const Tensor& t, int64_t columns) {
  std::vector<double> values = t.to_host_f64();
  const int64_t width = t.size(t.dim() - 1);
  for (size_t i = 0; i < values.size(); ++i) {
    if (static_cast<int64_t>(i) % width < columns) values[i] = std::nan("");
  }
  return from_values(values, t.shape(), t.dtype(), kCPU);
}

// at_thread_counts (tests/support/thread_counts.h) covers the thread pool's paths: GEMM split by
// rows, columns or items; attention over tiles and items.
// |fast - ref| <= tolerance[i] element by element; equal infinities pass.
void require_within(const Tensor& fast, const Tensor& ref, const std::vector<double>& tolerance) {
  const std::vector<double> f = fast.to_host_f64(), r = ref.to_host_f64();
  REQUIRE(f.size() == r.size());
  REQUIRE(tolerance.size() == r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    if (std::isinf(r[i]) && f[i] == r[i]) continue;
    if (std::isfinite(f[i]) && std::abs(f[i] - r[i]) <= tolerance[i]) continue;
    INFO("element " << i << ": fast " << f[i] << ", reference " << r[i] << ", tolerance " << tolerance[i]);
    REQUIRE(std::isfinite(f[i]));
    REQUIRE(std::abs(f[i] - r[i]) <= tolerance[i]);  // the first element off: stop here
  }
}

// |fast - ref| <= relative * max(max |ref|, floor) (the attention tolerance above).
void require_within_of_max(const Tensor& fast, const Tensor& ref, double relative, double floor = 0) {
  double largest = floor;
  for (double x : ref.to_host_f64()) {
    if (std::isfinite(x)) largest = std::max(largest, std::abs(x));
  }
  require_within(fast, ref, std::vector<double>(ref.numel(), relative * largest + 1e-300));
}

// ---- GEMM ----------------------------------------------------------------------------------------

struct GemmCase {
  int64_t items, m, n, k;
  bool transpose_a, transpose_b, shared_b;  // shared_b: every item uses the same B (a broadcast weight)
  double beta = 0.5;  // 0: C starts as NaN, which the product must overwrite (BLAS never reads it)
};

void check_gemm(const GemmCase& c, DType dtype) {
  INFO("items " << c.items << ", m " << c.m << ", n " << c.n << ", k " << c.k << ", ta "
                << c.transpose_a << ", tb " << c.transpose_b << ", shared B " << c.shared_b
                << ", beta " << c.beta << ", " << dtype_name(dtype));
  // Stored op(A) is m x k (k x m when transposed), with 3 spare columns: lda > the row length.
  const int64_t a_rows = c.transpose_a ? c.k : c.m, a_cols = (c.transpose_a ? c.m : c.k) + 3;
  const int64_t b_rows = c.transpose_b ? c.n : c.k, b_cols = (c.transpose_b ? c.k : c.n) + 1;
  const int64_t b_items = c.shared_b ? 1 : c.items, ldc = c.n + 2;
  const Tensor a = random({c.items, a_rows, a_cols}, dtype);
  const Tensor b = random({b_items, b_rows, b_cols}, dtype);
  const Tensor c0 = c.beta == 0 ? nan_in_columns(random({c.items, c.m, ldc}, dtype), c.n)
                                : random({c.items, c.m, ldc}, dtype);

  GemmBatch g;
  g.dtype = dtype;
  g.transpose_a = c.transpose_a;
  g.transpose_b = c.transpose_b;
  g.m = c.m, g.n = c.n, g.k = c.k, g.lda = a_cols, g.ldb = b_cols, g.ldc = ldc;
  g.alpha = -0.75, g.beta = c.beta;
  for (int64_t i = 0; i < c.items; ++i) {
    g.a_offsets.push_back(i * a_rows * a_cols);
    g.b_offsets.push_back(c.shared_b ? 0 : i * b_rows * b_cols);
    g.c_offsets.push_back(i * c.m * ldc);
  }
  enum class Run { fast, reference, bound };  // bound: the reference on |A|, |B|, |C|, |alpha|, |beta|
  const auto run = [&](Run how) {
    const bool bound = how == Run::bound;
    GemmBatch call = g;
    const Tensor a_in = bound ? abs_of(a) : a, b_in = bound ? abs_of(b) : b;
    const Tensor result = !bound ? c0.clone() : c.beta == 0 ? zeros_like(c0) : abs_of(c0);
    call.a = a_in.data();
    call.b = b_in.data();
    call.c = result.data();
    if (bound) call.alpha = std::abs(g.alpha), call.beta = std::abs(g.beta);
    if (how == Run::fast) kernels(kCPU).gemm(call);
    else cpu::reference::gemm(call);
    return result;
  };
  const Tensor expected = run(Run::reference);
  std::vector<double> tolerance = run(Run::bound).to_host_f64();  // times (k + 4) u: the bound above
  for (double& t : tolerance) t *= (c.k + 4) * unit_roundoff(dtype);
  at_thread_counts([&] { require_within(run(Run::fast), expected, tolerance); });
}

// ---- Attention -----------------------------------------------------------------------------------

enum class MaskKind { none, random, padding, key_holes };

// Where q, k, v, the output and the gradients, all [B, H, S, width] (item n = b H + h), lie in
// memory: contiguous; interleaved, views of [B, S, H, width] tensors (heads split from a
// projection); or packed, q, k, v (and their gradients) slices of one [B, S, 3, H, width] tensor
// (one projection for all three) with the output and its gradient interleaved.
enum class HeadLayout { contiguous, interleaved, packed };

struct AttentionCase {
  int64_t items, sq, sk, head_dim, value_dim;
  bool causal = false;
  MaskKind mask = MaskKind::none;
  double dropout_p = 0.0;
  SparsityLayout sparsity = {};
  int64_t alibi_heads = 0;
  // Most output gradient rows zero, as when a loss reads only some positions: the kernel leaves
  // those queries out of its backward. Query i of item n keeps its gradient when it is the last,
  // in [5, 30) of an even item, or a multiple of 11 past 63 in every third item.
  bool sparse_grad = false;
  int64_t heads = 1;  // H: items / heads batch items of `heads` heads
  HeadLayout layout = HeadLayout::contiguous;
  // > 0: a learned relative bias [relative_heads, Sq + Sk - 1] (T5's), whose gradient is compared
  // too; item n reads row n % relative_heads.
  int64_t relative_heads = 0;
};

bool keeps_gradient(const AttentionCase& c, int64_t n, int64_t i) {
  return i == c.sq - 1 || (n % 2 == 0 && i >= 5 && i < 30) || (n % 3 == 1 && i >= 64 && i % 11 == 0);
}

// The case's [B, H, S, width] shape of an operand with `rows` rows of `width` entries.
Shape heads_shape(const AttentionCase& c, int64_t rows, int64_t width) {
  return {c.items / c.heads, c.heads, rows, width};
}

// The same values with the heads interleaved in memory: a view of a [B, S, H, width] tensor.
Tensor interleave(const Tensor& t) { return t.transpose(1, 2).contiguous().transpose(1, 2); }

// q, k, v (or their gradients) in the case's layout, the same values.
void lay_out(const AttentionCase& c, Tensor& q, Tensor& k, Tensor& v) {
  if (c.layout == HeadLayout::interleaved) {
    q = interleave(q), k = interleave(k), v = interleave(v);
  } else if (c.layout == HeadLayout::packed) {  // needs Sq = Sk and head_dim = value_dim
    const Tensor packed = empty({q.size(0), q.size(2), 3, q.size(1), q.size(3)}, q.dtype(), kCPU);
    Tensor* parts[] = {&q, &k, &v};
    for (int64_t which = 0; which < 3; ++which) {
      const Tensor slice = packed.narrow(2, which, 1).squeeze(2).transpose(1, 2);
      kernels(kCPU).copy(*parts[which], slice);
      *parts[which] = slice;
    }
  }
}

// An output (or its gradient) in the case's layout: interleaved unless contiguous.
Tensor lay_out_output(const AttentionCase& c, const Tensor& t) {
  return c.layout == HeadLayout::contiguous ? t : interleave(t);
}

// The problem with contiguous operands.
AttentionProblem make_problem(const AttentionCase& c, DType dtype) {
  AttentionProblem p;
  p.q = random(heads_shape(c, c.sq, c.head_dim), dtype);
  p.k = random(heads_shape(c, c.sk, c.head_dim), dtype, -2, 2);  // scores of a few units: peaked
  p.v = random(heads_shape(c, c.sk, c.value_dim), dtype);
  p.scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  p.causal = c.causal;
  if (c.mask == MaskKind::random) {  // [N, Sq, Sk], 70% visible; row 1 of item 0 fully masked
    std::vector<bool> allowed(c.items * c.sq * c.sk);
    const std::vector<double> draws = random({c.items, c.sq, c.sk}, DType::f64, 0, 1).to_host_f64();
    for (size_t e = 0; e < allowed.size(); ++e) allowed[e] = draws[e] < 0.7;
    for (int64_t j = 0; j < c.sk; ++j) allowed[1 * c.sk + j] = false;
    p.mask = from_bools(allowed, {c.items, c.sq, c.sk}, kCPU);
    for (int64_t n = 0; n < c.items; ++n) p.mask_offsets.push_back(n * c.sq * c.sk);
    p.mask_row_stride = c.sk;
    p.mask_col_stride = 1;
  } else if (c.mask == MaskKind::padding) {  // [N, 1, Sk] read with row stride 0: item n sees
    std::vector<bool> allowed(c.items * c.sk);  // its first Sk - 37 n keys (none when <= 0)
    for (int64_t n = 0; n < c.items; ++n) {
      for (int64_t j = 0; j < c.sk; ++j) allowed[n * c.sk + j] = j < c.sk - 37 * n;
      p.mask_offsets.push_back(n * c.sk);
    }
    p.mask = from_bools(allowed, {c.items, 1, c.sk}, kCPU);
    p.mask_row_stride = 0;
    p.mask_col_stride = 1;
  } else if (c.mask == MaskKind::key_holes) {  // [N, 1, Sk], row stride 0, with keys hidden
    std::vector<bool> allowed(c.items * c.sk);  // before the last visible one: not a prefix
    for (int64_t n = 0; n < c.items; ++n) {
      for (int64_t j = 0; j < c.sk; ++j) allowed[n * c.sk + j] = (j + n) % 3 != 1 && j < c.sk - 5;
      p.mask_offsets.push_back(n * c.sk);
    }
    p.mask = from_bools(allowed, {c.items, 1, c.sk}, kCPU);
    p.mask_row_stride = 0;
    p.mask_col_stride = 1;
  }
  p.dropout_p = c.dropout_p;
  p.seed = 1234;
  p.offset = 56;
  p.sparsity = c.sparsity;
  p.sparsity_random = bigbird_random_blocks(c.sparsity, c.sq, c.sk);
  p.alibi_heads = c.alibi_heads;
  if (c.relative_heads > 0) {
    p.relative_bias = random({c.relative_heads, c.sq + c.sk - 1}, dtype, -2, 2);
  }
  return p;
}

// A zeroed gradient of the problem's relative bias, [N, Sq + Sk - 1], where it has one.
void zero_relative_grad(AttentionProblem& p) {
  if (!p.relative_bias.defined()) return;
  const int64_t items = p.q.size(0) * p.q.size(1), offsets = p.q.size(2) + p.k.size(2) - 1;
  p.relative_bias_grad = zeros({items, offsets}, p.q.dtype(), kCPU);
}

// The reference on contiguous operands gives exactly what it gave on the same values laid out
// otherwise (out and grad_q): it reads every row where the strides put it.
void require_reference_reads_in_place(const AttentionProblem& contiguous, const Tensor& grad_out,
                                      const Tensor& out, const Tensor& grad_q) {
  const DType dtype = contiguous.q.dtype();
  const Tensor contiguous_out = empty(out.shape(), dtype, kCPU);
  const Tensor contiguous_lse = empty({out.size(0) * out.size(1), out.size(2)}, dtype, kCPU);
  cpu::reference::attention_forward(contiguous, contiguous_out, contiguous_lse);
  REQUIRE(contiguous_out.to_host_f64() == out.to_host_f64());
  const Tensor contiguous_q = zeros(contiguous.q.shape(), dtype, kCPU);
  cpu::reference::attention_backward(contiguous, grad_out, contiguous_q,
                                     zeros(contiguous.k.shape(), dtype, kCPU),
                                     zeros(contiguous.v.shape(), dtype, kCPU));
  REQUIRE(contiguous_q.to_host_f64() == grad_q.to_host_f64());
}

void check_attention(const AttentionCase& c, DType dtype) {
  INFO("N " << c.items << ", Sq " << c.sq << ", Sk " << c.sk << ", head_dim " << c.head_dim
            << ", value_dim " << c.value_dim << ", causal " << c.causal << ", mask "
            << static_cast<int>(c.mask) << ", dropout " << c.dropout_p << ", " << dtype_name(dtype)
            << ", heads " << c.heads << ", layout " << static_cast<int>(c.layout));
  const AttentionProblem contiguous = make_problem(c, dtype);
  AttentionProblem p = contiguous;
  lay_out(c, p.q, p.k, p.v);
  Tensor grad_out = random(heads_shape(c, c.sq, c.value_dim), dtype);
  if (c.sparse_grad) {
    std::vector<double> values = grad_out.to_host_f64();
    for (int64_t n = 0; n < c.items; ++n) {
      for (int64_t i = 0; i < c.sq; ++i) {
        if (keeps_gradient(c, n, i)) continue;
        std::fill_n(values.begin() + (n * c.sq + i) * c.value_dim, c.value_dim, 0.0);
      }
    }
    grad_out = from_values(values, grad_out.shape(), dtype, kCPU);
  }
  grad_out = lay_out_output(c, grad_out);
  const double relative = 16.0 * (c.sq + c.sk + c.head_dim + c.value_dim) * unit_roundoff(dtype);
  // Zeroed gradients in the case's layout.
  const auto zero_grads = [&] {
    std::vector<Tensor> grads{zeros(p.q.shape(), dtype, kCPU), zeros(p.k.shape(), dtype, kCPU),
                              zeros(p.v.shape(), dtype, kCPU)};
    lay_out(c, grads[0], grads[1], grads[2]);
    return grads;
  };

  const Tensor out = lay_out_output(c, empty(heads_shape(c, c.sq, c.value_dim), dtype, kCPU));
  const Tensor lse = empty({c.items, c.sq}, dtype, kCPU);
  cpu::reference::attention_forward(p, out, lse);
  const std::vector<Tensor> grads = zero_grads();
  const Tensor &grad_q = grads[0], &grad_k = grads[1], &grad_v = grads[2];
  zero_relative_grad(p);
  cpu::reference::attention_backward(p, grad_out, grad_q, grad_k, grad_v);
  if (c.layout != HeadLayout::contiguous) {
    require_reference_reads_in_place(contiguous, grad_out.contiguous(), out, grad_q);
  }

  at_thread_counts([&] {
    const Tensor fast_out = lay_out_output(c, empty(out.shape(), dtype, kCPU));
    const Tensor fast_lse = empty(lse.shape(), dtype, kCPU);
    kernels(kCPU).attention_forward(p, fast_out, fast_lse);
    require_within_of_max(fast_out, out, relative);
    std::vector<double> lse_tolerance = lse.to_host_f64();  // lse ~ log Sk + max score: relative to itself
    for (double& t : lse_tolerance) t = relative * (std::isinf(t) ? 0 : std::abs(t) + 1);
    require_within(fast_lse, lse, lse_tolerance);

    const std::vector<Tensor> fast_grads = zero_grads();
    const Tensor &fast_q = fast_grads[0], &fast_k = fast_grads[1], &fast_v = fast_grads[2];
    AttentionProblem fast = p;
    zero_relative_grad(fast);
    kernels(kCPU).attention_backward(fast, fast_out, fast_lse, grad_out, fast_q, fast_k, fast_v);
    if (p.relative_bias.defined()) {  // sums of dS along a diagonal: rounding as dQ's
      require_within_of_max(fast.relative_bias_grad, p.relative_bias_grad, relative, 1.0);
    }
    // dQ and dK also carry the rounding of dP - D, whose terms dO_i . V_j are up to 1 in size
    // (inputs within [-1, 1]) even where the gradient is 0: with Sk = 1, P = 1 and dS = 0 exactly.
    require_within_of_max(fast_q, grad_q, relative, 1.0);
    require_within_of_max(fast_k, grad_k, relative, 1.0);
    require_within_of_max(fast_v, grad_v, relative);
  });
}

// The f32 paths of the attention kernel: the tile kernels with the products the CPU runs best
// (AVX-512 where it has AVX-512 F), the AVX2 products forced, and the baseline (BLAS products,
// SSE2 rows), as on a CPU without AVX2.
enum class TilePath { best, avx2, baseline };
const char* tile_path_name(TilePath path) {
  return path == TilePath::best ? "tile kernels, the CPU's best products" :
         path == TilePath::avx2 ? "tile kernels, AVX2 products" : "baseline path";
}
struct TilePathScope {
  std::optional<cpu::FastPathsOff> plain;
  std::optional<cpu::tiles::Avx2TilesScope> avx2;
  explicit TilePathScope(TilePath path) {
    if (path == TilePath::baseline) plain.emplace();
    if (path == TilePath::avx2) avx2.emplace();
  }
};
constexpr TilePath kTilePaths[] = {TilePath::best, TilePath::avx2, TilePath::baseline};

// One case on every f32 path, and in f64 beside each.
void check_attention_on_both_paths(const AttentionCase& c) {
  for (TilePath path : kTilePaths) {
    INFO(tile_path_name(path));
    const TilePathScope scope(path);
    for (DType dtype : {DType::f32, DType::f64}) check_attention(c, dtype);
  }
}

// ---- Softmax -------------------------------------------------------------------------------------

void check_softmax(DimSplit s, DType dtype) {
  INFO("outer " << s.outer << ", n " << s.n << ", inner " << s.inner << ", " << dtype_name(dtype));
  std::vector<double> values = random({s.outer, s.n, s.inner}, DType::f64, -20, 20).to_host_f64();
  for (size_t e = 0; e < values.size(); e += 7) values[e] = -kInf;  // masked entries
  for (int64_t k = 0; k < s.n; ++k) values[k * s.inner] = -kInf;    // row (0, 0): fully masked
  const Tensor x = from_values(values, {s.outer, s.n, s.inner}, dtype, kCPU);
  const double u = unit_roundoff(dtype);
  for (bool log : {false, true}) {
    INFO((log ? "log_softmax" : "softmax"));
    const Tensor expected = empty(x.shape(), dtype, kCPU);
    cpu::reference::softmax_dim(x, s, log, expected);
    // The bounds of the comment at the top, per element, with the row's max m.
    std::vector<double> tolerance(values.size());
    const std::vector<double> ref = expected.to_host_f64();
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t i = 0; i < s.inner; ++i) {
        double m = -kInf;
        for (int64_t k = 0; k < s.n; ++k) m = std::max(m, values[(o * s.n + k) * s.inner + i]);
        for (int64_t k = 0; k < s.n; ++k) {
          const int64_t e = (o * s.n + k) * s.inner + i;
          const double x_k = std::isinf(values[e]) ? 0 : values[e];
          if (std::isinf(m)) tolerance[e] = 0;  // a fully masked row: exactly 0 or -inf
          else tolerance[e] = log ? 2 * (std::abs(x_k) + std::abs(m) + s.n + 4) * u
                             : 2 * (std::abs(x_k - m) + s.n + 4) * u * std::abs(ref[e]) + 1e-300;
        }
      }
    }
    at_thread_counts([&] {
      const Tensor out = empty(x.shape(), dtype, kCPU);
      kernels(kCPU).softmax_dim(x, s, log, out);
      require_within(out, expected, tolerance);
    });
  }
}

}  // namespace

TEST_CASE("reference kernels by hand: a 2x2 product, a softmax row, one attention row", "[cpu-reference]") {
  // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]] = [[19, 22], [43, 50]]
  const Tensor a = from_values({1, 2, 3, 4}, {2, 2}, DType::f64, kCPU);
  const Tensor b = from_values({5, 6, 7, 8}, {2, 2}, DType::f64, kCPU);
  const Tensor c = full({2, 2}, std::nan(""), DType::f64, kCPU);  // beta = 0: never read
  GemmBatch g;
  g.dtype = DType::f64;
  g.m = g.n = g.k = g.lda = g.ldb = g.ldc = 2;
  g.a = a.data(), g.b = b.data(), g.c = c.data();
  g.a_offsets = g.b_offsets = g.c_offsets = {0};
  cpu::reference::gemm(g);
  REQUIRE(c.to_host_f64() == std::vector<double>{19, 22, 43, 50});

  // softmax(0, log 3) = (1/4, 3/4)
  const Tensor x = from_values({0, std::log(3.0)}, {1, 2, 1}, DType::f64, kCPU);
  const Tensor y = empty({1, 2, 1}, DType::f64, kCPU);
  cpu::reference::softmax_dim(x, {1, 2, 1}, false, y);
  REQUIRE(y.to_host_f64()[0] == Approx(0.25).margin(1e-15));
  REQUIRE(y.to_host_f64()[1] == Approx(0.75).margin(1e-15));

  // One query, keys with scores (0, log 3): out = v0 / 4 + 3 v1 / 4, lse = log 4.
  AttentionProblem p;
  p.q = from_values({1}, {1, 1, 1, 1}, DType::f64, kCPU);
  p.k = from_values({0, std::log(3.0)}, {1, 1, 2, 1}, DType::f64, kCPU);
  p.v = from_values({4, 8}, {1, 1, 2, 1}, DType::f64, kCPU);
  const Tensor out = empty({1, 1, 1, 1}, DType::f64, kCPU), lse = empty({1, 1}, DType::f64, kCPU);
  cpu::reference::attention_forward(p, out, lse);
  REQUIRE(out.item() == Approx(7).margin(1e-14));
  REQUIRE(lse.item() == Approx(std::log(4.0)).margin(1e-15));
}

TEST_CASE("GEMM on OpenBLAS matches the reference triple loop", "[cpu-reference][matmul]") {
  manual_seed(21);
  const std::vector<GemmCase> cases = {
      {1, 1, 1, 1, false, false, false},      // a scalar product
      {1, 17, 33, 129, false, false, false},  // serial path, nothing a multiple of 16
      {2, 5, 7, 3, true, true, false},        // both transposed, tiny
      {1, 301, 70, 90, false, false, false},  // parallel, blocks of rows (m >= n), ragged last
      {1, 301, 70, 90, true, false, false},   //   rows of a transposed A
      {1, 41, 515, 97, false, false, false},  // parallel, blocks of columns (n > m)
      {1, 41, 515, 97, false, true, false},   //   columns of a transposed B
      {5, 67, 45, 131, false, true, true},    // parallel over items >= threads, a shared B
      // up to 3 rows: a GEMV a row (cpu/fast/blas.cpp), each layout of A and B
      {1, 1, 515, 129, false, true, false},   //   a decoded token's projection, x W^T
      {1, 1, 70, 300, false, false, false},
      {2, 2, 33, 17, true, false, false},     //   rows of op(A) that are columns of A
      {1, 3, 40, 9, true, true, false},
      {3, 3, 129, 64, false, true, true},     //   items sharing a B
      {1, 1, 300, 50, false, true, false, 0}, //   beta 0: C's NaN overwritten
      {1, 2, 7, 5, true, false, false, 0},
      {1, 4, 30, 20, false, true, false, 0},  //   4 rows: the GEMM again
      {1, 2, 9, 0, false, true, false},       //   depth 0: C = beta C
  };
  for (const GemmCase& c : cases) {
    check_gemm(c, DType::f32);
    check_gemm(c, DType::f64);
  }
}

TEST_CASE("softmax_dim matches the reference softmax over rows", "[cpu-reference][softmax]") {
  manual_seed(22);
  for (DType dtype : {DType::f32, DType::f64}) {
    check_softmax({3, 131, 1}, dtype);     // rows: the attention-weights layout
    check_softmax({257, 1000, 1}, dtype);  // large enough for the thread pool
    check_softmax({2, 9, 5}, dtype);       // strided rows (softmax over a middle dim)
    for (int64_t n : {1, 7, 8, 9, 17}) check_softmax({4, n, 1}, dtype);  // the AVX2 rows' tails
  }
}

// The same rows with the fast paths off: f32 rows on std::exp, the path of a CPU without AVX2.
TEST_CASE("softmax_dim with the fast paths off matches the reference softmax over rows",
          "[cpu-reference][softmax]") {
  manual_seed(23);
  const cpu::FastPathsOff plain;
  for (int64_t n : {1, 7, 8, 9, 17, 1000}) check_softmax({4, n, 1}, DType::f32);
}

TEST_CASE("fused attention matches the reference: one tile, no mask", "[cpu-reference][attention]") {
  manual_seed(23);
  for (DType dtype : {DType::f32, DType::f64}) check_attention({2, 5, 7, 3, 4}, dtype);
}

// Enough items that each thread takes several at a time and prefetches the next one's rows
// (unit_group in cpu/fast/attention.cpp): 40 items are groups of 5 at two threads.
TEST_CASE("fused attention matches the reference on many small items (grouped work units)", "[cpu-reference][attention]") {
  manual_seed(30);
  for (DType dtype : {DType::f32, DType::f64}) {
    check_attention({40, 20, 24, 16, 16}, dtype);
    check_attention({40, 20, 24, 16, 16, true, MaskKind::random}, dtype);
    check_attention({40, 70, 70, 8, 5, false, MaskKind::key_holes}, dtype);
  }
}

// Zero rows of dO: the backward trims each query tile to its rows from the first to the last with
// a gradient, and skips tiles with none; the result must not change.
TEST_CASE("fused attention matches the reference when most output gradient rows are zero", "[cpu-reference][attention]") {
  manual_seed(31);
  check_attention_on_both_paths({.items = 6, .sq = 150, .sk = 140, .head_dim = 16, .value_dim = 8, .sparse_grad = true});
  check_attention_on_both_paths({.items = 6, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8, .causal = true,
                                 .mask = MaskKind::random, .sparse_grad = true});
  check_attention_on_both_paths({.items = 6, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8, .causal = true,
                                 .dropout_p = 0.3, .sparse_grad = true});
  check_attention_on_both_paths({.items = 6, .sq = 70, .sk = 200, .head_dim = 5, .value_dim = 3,
                                 .mask = MaskKind::padding, .sparse_grad = true});
  check_attention_on_both_paths({.items = 6, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8,
                                 .sparsity = {.kind = SparsityKind::local, .window = 20}, .sparse_grad = true});
  check_attention_on_both_paths({.items = 6, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8, .causal = true,
                                 .sparsity = {.kind = SparsityKind::bigbird, .window = 7, .random_blocks = 2,
                                              .global_tokens = 4, .seed = 9},
                                 .alibi_heads = 3, .sparse_grad = true});
}

// A query whose dO row is zero is left out of the backward: an infinity in it (infinite scores,
// NaN probabilities) must not reach dK or dV, which come out exactly as with that query finite.
TEST_CASE("fused attention backward keeps an unread query's non-finite scores out of dK and dV", "[cpu-reference][attention]") {
  manual_seed(32);
  const AttentionCase c{.items = 2, .sq = 70, .sk = 50, .head_dim = 8, .value_dim = 8, .sparse_grad = true};
  REQUIRE_FALSE(keeps_gradient(c, 0, 0));
  AttentionProblem p = make_problem(c, DType::f32);
  Tensor grad_out = random({c.items, 1, c.sq, c.value_dim}, DType::f32);
  std::vector<double> g = grad_out.to_host_f64();
  for (int64_t i = 0; i < c.sq; ++i) {  // item 0, query 0 has no gradient
    if (!keeps_gradient(c, 0, i)) std::fill_n(g.begin() + i * c.value_dim, c.value_dim, 0.0);
  }
  grad_out = from_values(g, grad_out.shape(), DType::f32, kCPU);
  const auto gradients = [&](double q00) {
    std::vector<double> q = p.q.to_host_f64();
    q[0] = q00;
    p.q = from_values(q, p.q.shape(), DType::f32, kCPU);
    const Tensor out = empty({c.items, 1, c.sq, c.value_dim}, DType::f32, kCPU);
    const Tensor lse = empty({c.items, c.sq}, DType::f32, kCPU);
    kernels(kCPU).attention_forward(p, out, lse);
    std::vector<Tensor> grads{zeros(p.q.shape(), DType::f32, kCPU), zeros(p.k.shape(), DType::f32, kCPU),
                              zeros(p.v.shape(), DType::f32, kCPU), out};
    kernels(kCPU).attention_backward(p, out, lse, grad_out, grads[0], grads[1], grads[2]);
    return grads;
  };
  at_thread_counts([&] {
    const std::vector<Tensor> finite = gradients(0.5), infinite = gradients(kInf);
    REQUIRE_FALSE(std::isfinite(infinite[3].to_host_f64()[0]));  // the unread query's own output
    REQUIRE(infinite[1].to_host_f64() == finite[1].to_host_f64());  // dK
    REQUIRE(infinite[2].to_host_f64() == finite[2].to_host_f64());  // dV
  });
}

TEST_CASE("fused attention matches the reference: ragged query and key tiles", "[cpu-reference][attention]") {
  manual_seed(24);
  // Sq 70 = 64 + 6 queries, Sk 150 = 128 + 22 keys; head_dim 7 and value_dim 5 (not lane multiples)
  for (DType dtype : {DType::f32, DType::f64}) check_attention({3, 70, 150, 7, 5}, dtype);
}

// q, k, v, the output and the gradients as the op passes them: heads split from a projection
// (rows H width apart) and slices of one packed projection (q, k, v rows 3 H width apart), read
// and written where they lie. Sq 260 and Sk 520 give dK, dV and dQ four revisits and more, so
// that the strided gradients are summed in scratch (Sums in cpu/fast/attention.cpp).
TEST_CASE("fused attention matches the reference on strided heads: interleaved and packed", "[cpu-reference][attention]") {
  manual_seed(33);
  for (HeadLayout layout : {HeadLayout::interleaved, HeadLayout::packed}) {
    check_attention_on_both_paths({.items = 6, .sq = 70, .sk = 70, .head_dim = 16, .value_dim = 16, .causal = true,
                                   .heads = 3, .layout = layout});
    check_attention_on_both_paths({.items = 4, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8,
                                   .mask = MaskKind::padding, .dropout_p = 0.2, .heads = 2, .layout = layout});
  }
  check_attention_on_both_paths({.items = 2, .sq = 260, .sk = 520, .head_dim = 16, .value_dim = 12,
                                 .heads = 2, .layout = HeadLayout::interleaved});
}

TEST_CASE("fused attention matches the reference: causal, Sq < Sk and Sq > Sk", "[cpu-reference][attention]") {
  manual_seed(25);
  for (DType dtype : {DType::f32, DType::f64}) {
    check_attention({2, 130, 150, 9, 6, true}, dtype);  // query tiles end mid key tile
    check_attention({2, 150, 70, 6, 9, true}, dtype);   // late queries see every key
  }
}

TEST_CASE("fused attention matches the reference: masks, fully masked rows and items", "[cpu-reference][attention]") {
  manual_seed(26);
  for (DType dtype : {DType::f32, DType::f64}) {
    check_attention({2, 67, 133, 5, 3, false, MaskKind::random}, dtype);
    check_attention({2, 67, 133, 5, 3, true, MaskKind::random}, dtype);
    check_attention({5, 9, 150, 4, 4, false, MaskKind::padding}, dtype);  // item 4 sees no key
    check_attention({3, 70, 140, 5, 3, false, MaskKind::key_holes}, dtype);
    check_attention({3, 70, 140, 5, 3, true, MaskKind::key_holes}, dtype);
  }
}

TEST_CASE("fused attention matches the reference with dropout (same Philox numbering)", "[cpu-reference][attention]") {
  manual_seed(27);
  for (DType dtype : {DType::f32, DType::f64}) {
    check_attention({2, 70, 131, 4, 6, false, MaskKind::none, 0.3}, dtype);
    check_attention({2, 70, 131, 4, 6, true, MaskKind::random, 0.5}, dtype);
  }
}

TEST_CASE("fused attention matches the reference: sparse layouts and ALiBi, both f32 paths", "[cpu-reference][attention]") {
  manual_seed(29);
  const SparsityLayout local{.kind = SparsityKind::local, .window = 50};
  const SparsityLayout band{.kind = SparsityKind::band, .window = 5, .dilation = 11};
  const SparsityLayout bigbird{.kind = SparsityKind::bigbird, .window = 7, .random_blocks = 2,
                               .global_tokens = 4, .seed = 9};
  check_attention_on_both_paths({.items = 2, .sq = 300, .sk = 300, .head_dim = 8, .value_dim = 8, .sparsity = local});
  check_attention_on_both_paths({.items = 2, .sq = 300, .sk = 260, .head_dim = 8, .value_dim = 5, .causal = true,
                                 .sparsity = band});
  check_attention_on_both_paths({.items = 2, .sq = 200, .sk = 300, .head_dim = 8, .value_dim = 8,
                                 .mask = MaskKind::padding, .sparsity = bigbird});
  check_attention_on_both_paths({.items = 4, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8, .causal = true,
                                 .dropout_p = 0.2, .sparsity = local, .alibi_heads = 2});
}

// Small problems on every path of f32: the tile kernels of cpu/fast/attention_tiles.h (where the
// CPU has AVX2; with AVX-512 products and with AVX2 ones) and the baseline path (BLAS products,
// SSE2 rows); f64 (BLAS, plain loops) beside them. Every sequence length of 1, 5,
// 33, 127, 130 with every head_dim of 1, 3, 16, 17, 32, 64, each pair with one of the variants in
// turn (no mask, causal, padding, where item n sees Sk - 37 n keys and none when that is <= 0, a
// random mask with a fully masked row plus causal, dropout), half of them with Sk != Sq and a
// third with value_dim = head_dim + 1.
TEST_CASE("fused attention matches the reference on small problems, tile kernels and baseline", "[cpu-reference][attention]") {
  manual_seed(28);
  const std::vector<int64_t> seqs = {1, 5, 33, 127, 130}, head_dims = {1, 3, 16, 17, 32, 64};
  int64_t index = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t head_dim : head_dims) {
      AttentionCase c{3, seqs[s], index % 2 ? seqs[(s + 2) % seqs.size()] : seqs[s], head_dim, head_dim};
      switch (index % 5) {
        case 0: break;
        case 1: c.causal = true; break;
        case 2: c.mask = MaskKind::padding; break;
        case 3: c.mask = MaskKind::random, c.causal = true; break;
        case 4: c.dropout_p = 0.25; break;
      }
      if (index % 3 == 0) c.value_dim = head_dim + 1;
      ++index;
      for (TilePath path : kTilePaths) {
        INFO(tile_path_name(path));
        const TilePathScope scope(path);
        check_attention(c, DType::f32);
      }
      check_attention(c, DType::f64);
    }
  }
}

// T5's learned relative bias: added to every score by its offset j - i, its gradient the sums of
// dS along the diagonals; over query and key tiles, causal bands, a padding mask, a sparse layout
// and interleaved heads, on both f32 paths.
TEST_CASE("fused attention matches the reference with a relative bias, its gradient included",
          "[cpu-reference][attention][relative]") {
  manual_seed(33);
  check_attention_on_both_paths({.items = 4, .sq = 150, .sk = 140, .head_dim = 8, .value_dim = 8,
                                 .relative_heads = 2});
  check_attention_on_both_paths({.items = 4, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8,
                                 .causal = true, .relative_heads = 4});
  check_attention_on_both_paths({.items = 6, .sq = 70, .sk = 200, .head_dim = 5, .value_dim = 3,
                                 .mask = MaskKind::padding, .sparse_grad = true,
                                 .relative_heads = 3});
  check_attention_on_both_paths({.items = 4, .sq = 150, .sk = 150, .head_dim = 8, .value_dim = 8,
                                 .causal = true, .dropout_p = 0.2,
                                 .sparsity = {.kind = SparsityKind::local, .window = 20},
                                 .relative_heads = 2});
  check_attention_on_both_paths({.items = 4, .sq = 70, .sk = 70, .head_dim = 8, .value_dim = 8,
                                 .causal = true, .heads = 2, .layout = HeadLayout::packed,
                                 .relative_heads = 2});
}
