// Reference kernels (see cpu/reference.h): plain loops, the math in a comment beside each.
#include "tapegrad/cpu/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "tapegrad/autograd/philox.h"
#include "tapegrad/cpu/kernels.h"

namespace tg::cpu::reference {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- GEMM ----------------------------------------------------------------------------------------

template <typename T>
void gemm_items(const GemmBatch& g) {
  for (size_t item = 0; item < g.a_offsets.size(); ++item) {
    const T* a = static_cast<const T*>(g.a) + g.a_offsets[item];
    const T* b = static_cast<const T*>(g.b) + g.b_offsets[item];
    T* c = static_cast<T*>(g.c) + g.c_offsets[item];
    // op(A)[i, p] = A[i, p], or A[p, i] when A is stored transposed; op(B)[p, j] likewise.
    const auto op_a = [&](int64_t i, int64_t p) { return g.transpose_a ? a[p * g.lda + i] : a[i * g.lda + p]; };
    const auto op_b = [&](int64_t p, int64_t j) { return g.transpose_b ? b[j * g.ldb + p] : b[p * g.ldb + j]; };
    for (int64_t i = 0; i < g.m; ++i) {
      for (int64_t j = 0; j < g.n; ++j) {
        double dot = 0;  // (op(A) op(B))[i, j] = sum_p op(A)[i, p] op(B)[p, j]
        for (int64_t p = 0; p < g.k; ++p) dot += double(op_a(i, p)) * double(op_b(p, j));
        // C = alpha op(A) op(B) + beta C; with beta = 0, C is not read (as in BLAS)
        const double before = g.beta == 0 ? 0.0 : g.beta * double(c[i * g.ldc + j]);
        c[i * g.ldc + j] = T(g.alpha * dot + before);
      }
    }
  }
}

// ---- Softmax -------------------------------------------------------------------------------------

template <typename T>
void softmax_rows(const T* x, DimSplit s, bool log, T* out) {
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      // Row (o, i) is x[o, :, i]; its element k sits at (o n + k) inner + i.
      const auto at = [&](int64_t k) { return (o * s.n + k) * s.inner + i; };
      double m = kNegInf;  // m = max_k x_k, subtracted so that exp never overflows
      for (int64_t k = 0; k < s.n; ++k) m = max_or_nan(m, double(x[at(k)]));  // a NaN: NaN throughout
      if (m == kNegInf) {  // a fully masked row: softmax 0, log-softmax -inf
        for (int64_t k = 0; k < s.n; ++k) out[at(k)] = T(log ? kNegInf : 0.0);
        continue;
      }
      double l = 0;  // l = sum_k exp(x_k - m)
      for (int64_t k = 0; k < s.n; ++k) l += std::exp(double(x[at(k)]) - m);
      for (int64_t k = 0; k < s.n; ++k) {
        // softmax_k = exp(x_k - m) / l ; log-softmax_k = x_k - m - log l
        const double shifted = double(x[at(k)]) - m;
        out[at(k)] = T(log ? shifted - std::log(l) : std::exp(shifted) / l);
      }
    }
  }
}

// ---- Attention -----------------------------------------------------------------------------------
// Item n: q [Sq, head_dim], k [Sk, head_dim], v [Sk, value_dim], out [Sq, value_dim], each the
// [b, h] slice (n = b H + h) of a [B, H, S, width] tensor, wherever its strides put the rows.
//   s_ij = scale q_i . k_j - alibi_slope |i - j| + relative_bias[h, j - i + Sq - 1] (each term
//   where the problem has it), or -inf where query i may not see key j (causal
//   j > i, the sparse layout, or the mask)
//   P_ij = exp(s_ij - m_i) / l_i with m_i = max_j s_ij, l_i = sum_j exp(s_ij - m_i); lse_i = m_i + log l_i
//   out_i = sum_j P_ij Z_ij v_j, with Z_ij the dropout factor: 0 (dropped) or 1 / (1 - p)

template <typename T>
struct Attention {
  const AttentionProblem& p;
  int64_t items = p.q.size(0) * p.q.size(1), sq = p.q.size(2), sk = p.k.size(2);
  int64_t head_dim = p.q.size(3), value_dim = p.v.size(3);

  // Row i of item n in a [B, H, S, width] tensor t (its last dim of stride 1).
  static T* row(const Tensor& t, int64_t n, int64_t i) {
    const int64_t heads = t.size(1);
    return t.data_as<T>() + (n / heads) * t.strides()[0] + (n % heads) * t.strides()[1] +
           i * t.strides()[2];
  }
  const T* q(int64_t n, int64_t i) const { return row(p.q, n, i); }
  const T* k(int64_t n, int64_t j) const { return row(p.k, n, j); }
  const T* v(int64_t n, int64_t j) const { return row(p.v, n, j); }
  const SparsityView sparsity = sparsity_view(p.sparsity, p.sparsity_random, sq);

  // Query i of item n may see key j unless causal and j > i, outside the layout, or the mask is
  // false there.
  bool visible(int64_t n, int64_t i, int64_t j) const {
    if (p.causal && j > i) return false;
    if (!sparsity.visible(i, j)) return false;
    if (!p.mask.defined()) return true;
    return p.mask.data_as<bool>()[p.mask_offsets[n] + i * p.mask_row_stride + j * p.mask_col_stride];
  }

  // Z_nij = 0 when Philox number (n Sq + i) Sk + j of (seed, offset) is below p, else 1 / (1 - p).
  double dropout_factor(int64_t n, int64_t i, int64_t j) const {
    if (p.dropout_p == 0) return 1;
    const float u = philox_uniform(p.seed, p.offset, (n * sq + i) * sk + j);
    return u >= p.dropout_p ? 1 / (1 - p.dropout_p) : 0;
  }

  // The learned relative bias of item n's head at offset j - i, 0 without one.
  double relative(int64_t n, int64_t i, int64_t j) const {
    if (!p.relative_bias.defined()) return 0;
    const int64_t heads = p.relative_bias.size(0);
    return double(p.relative_bias.data_as<T>()[(n % heads) * (sq + sk - 1) + j - i + sq - 1]);
  }

  // probs[i Sk + j] = P_ij of item n (0 in a fully masked row) and lse[i] = m_i + log l_i
  // (-inf in a fully masked row).
  void probabilities(int64_t n, std::vector<double>& probs, std::vector<double>& lse) const {
    probs.assign(sq * sk, 0.0);
    lse.assign(sq, kNegInf);
    std::vector<double> s(sk);
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) {
        double dot = 0;  // s_ij = scale q_i . k_j
        for (int64_t c = 0; c < head_dim; ++c) dot += double(q(n, i)[c]) * double(k(n, j)[c]);
        const double bias = p.alibi_heads > 0 ? -alibi_slope(n % p.alibi_heads, p.alibi_heads) *
                                                    double(i > j ? i - j : j - i)
                                              : 0.0;
        s[j] = visible(n, i, j) ? p.scale * dot + bias + relative(n, i, j) : kNegInf;
      }
      const double m = *std::max_element(s.begin(), s.end());  // m_i = max_j s_ij
      if (m == kNegInf) continue;                              // nothing visible: P_i = 0
      double l = 0;                                            // l_i = sum_j exp(s_ij - m_i)
      for (int64_t j = 0; j < sk; ++j) l += std::exp(s[j] - m);
      for (int64_t j = 0; j < sk; ++j) probs[i * sk + j] = std::exp(s[j] - m) / l;
      lse[i] = m + std::log(l);
    }
  }

  void forward(const Tensor& out_tensor, const Tensor& lse_tensor) const {
    std::vector<double> probs, lse;
    for (int64_t n = 0; n < items; ++n) {
      probabilities(n, probs, lse);
      for (int64_t i = 0; i < sq; ++i) {
        T* out = row(out_tensor, n, i);
        for (int64_t c = 0; c < value_dim; ++c) {
          double total = 0;  // out_ic = sum_j P_ij Z_ij v_jc
          for (int64_t j = 0; j < sk; ++j) {
            total += probs[i * sk + j] * dropout_factor(n, i, j) * double(v(n, j)[c]);
          }
          out[c] = T(total);
        }
        lse_tensor.data_as<T>()[n * sq + i] = T(lse[i]);
      }
    }
  }

  // The relative bias's gradient: item n's dS summed along each diagonal j - i.
  void add_relative_grad(int64_t n, const std::vector<double>& d_scores) const {
    if (!p.relative_bias.defined() || !p.relative_bias_grad.defined()) return;
    T* grad = p.relative_bias_grad.data_as<T>() + n * (sq + sk - 1);
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = 0; j < sk; ++j) grad[j - i + sq - 1] += T(d_scores[i * sk + j]);
    }
  }

  // With dO the upstream gradient and P~ = P * Z:
  //   dV = P~^T dO,  dP_ij = Z_ij (dO_i . v_j),  D_i = sum_j P_ij dP_ij,  dS_ij = P_ij (dP_ij - D_i),
  //   dQ = scale dS K,  dK = scale dS^T Q
  void backward(const Tensor& grad_out, const Tensor& grad_q, const Tensor& grad_k,
                const Tensor& grad_v) const {
    std::vector<double> probs, lse, d_probs(sq * sk), d_scores(sq * sk);
    for (int64_t n = 0; n < items; ++n) {
      probabilities(n, probs, lse);
      const auto d_out = [&](int64_t i) { return row(grad_out, n, i); };
      const auto d_q = [&](int64_t i) { return row(grad_q, n, i); };
      const auto d_k = [&](int64_t j) { return row(grad_k, n, j); };
      const auto d_v = [&](int64_t j) { return row(grad_v, n, j); };
      for (int64_t j = 0; j < sk; ++j) {
        for (int64_t c = 0; c < value_dim; ++c) {
          double total = 0;  // dV_jc = sum_i P_ij Z_ij dO_ic
          for (int64_t i = 0; i < sq; ++i) {
            total += probs[i * sk + j] * dropout_factor(n, i, j) * double(d_out(i)[c]);
          }
          d_v(j)[c] += T(total);
        }
      }
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t j = 0; j < sk; ++j) {
          double dot = 0;  // dP_ij = Z_ij (dO_i . v_j)
          for (int64_t c = 0; c < value_dim; ++c) dot += double(d_out(i)[c]) * double(v(n, j)[c]);
          d_probs[i * sk + j] = dropout_factor(n, i, j) * dot;
        }
        double row_dot = 0;  // D_i = sum_j P_ij dP_ij
        for (int64_t j = 0; j < sk; ++j) row_dot += probs[i * sk + j] * d_probs[i * sk + j];
        for (int64_t j = 0; j < sk; ++j) {  // dS_ij = P_ij (dP_ij - D_i)
          d_scores[i * sk + j] = probs[i * sk + j] * (d_probs[i * sk + j] - row_dot);
        }
      }
      add_relative_grad(n, d_scores);
      for (int64_t i = 0; i < sq; ++i) {
        for (int64_t c = 0; c < head_dim; ++c) {
          double total = 0;  // dQ_ic = scale sum_j dS_ij k_jc
          for (int64_t j = 0; j < sk; ++j) total += d_scores[i * sk + j] * double(k(n, j)[c]);
          d_q(i)[c] += T(p.scale * total);
        }
      }
      for (int64_t j = 0; j < sk; ++j) {
        for (int64_t c = 0; c < head_dim; ++c) {
          double total = 0;  // dK_jc = scale sum_i dS_ij q_ic
          for (int64_t i = 0; i < sq; ++i) total += d_scores[i * sk + j] * double(q(n, i)[c]);
          d_k(j)[c] += T(p.scale * total);
        }
      }
    }
  }
};

}  // namespace

void gemm(const GemmBatch& batch) {
  dispatch_floating(batch.dtype, "reference gemm", [&](auto tag) { gemm_items<decltype(tag)>(batch); });
}

void softmax_dim(const Tensor& x, DimSplit split, bool log, const Tensor& out) {
  dispatch_floating(x.dtype(), "reference softmax_dim", [&](auto tag) {
    using T = decltype(tag);
    softmax_rows(x.data_as<T>(), split, log, out.data_as<T>());
  });
}

void attention_forward(const AttentionProblem& problem, const Tensor& out, const Tensor& logsumexp) {
  dispatch_floating(problem.q.dtype(), "reference attention_forward", [&](auto tag) {
    Attention<decltype(tag)>{problem}.forward(out, logsumexp);
  });
}

void attention_backward(const AttentionProblem& problem, const Tensor& grad_out,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) {
  dispatch_floating(problem.q.dtype(), "reference attention_backward", [&](auto tag) {
    Attention<decltype(tag)>{problem}.backward(grad_out, grad_q, grad_k, grad_v);
  });
}

}  // namespace tg::cpu::reference
