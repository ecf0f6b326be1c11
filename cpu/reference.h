#pragma once
// Reference kernels: the math of the fast CPU kernels written as plain loops, to be read and to
// check the fast ones against (tests/cpu/test_reference.cpp). Same arguments and results as
// the entry points of the kernel interface (autograd/kernels.h) they mirror, f32 and f64 only:
//
//   reference            fast kernel                      what makes the fast one fast
//   gemm                 CpuKernels::gemm                 OpenBLAS, split over the thread pool
//                        (cpu/fast/blas.cpp)
//   softmax_dim          CpuKernels::softmax_dim          the thread pool over rows
//                        (cpu/reduce.cpp)
//   attention_forward    CpuKernels::attention_forward    query / key tiles, online softmax,
//   attention_backward   CpuKernels::attention_backward   f32 tile products and exp in AVX2
//                        (cpu/fast/attention.cpp)          (cpu/fast/attention_tiles.h), else
//                                                         BLAS and SIMD exp (cpu/fast/simd.h)
//
// No blocking, no SIMD, no threads, no BLAS; O(m n k) GEMM and O(Sq Sk) memory for attention.
// Every sum accumulates in double, so in f32 a difference from the fast kernel is the fast
// kernel's rounding (or a bug), not the reference's.
#include "tapegrad/autograd/kernels.h"

namespace tg::cpu::reference {

// C[i] = alpha op(A[i]) op(B[i]) + beta C[i] for each batch item (GemmBatch, autograd/kernels.h).
void gemm(const GemmBatch& batch);

// (Log-)softmax over the middle axis of contiguous x [outer, n, inner]; a row of only -inf gives
// 0 (softmax) or -inf (log-softmax), as CpuKernels::softmax_dim.
void softmax_dim(const Tensor& x, DimSplit split, bool log, const Tensor& out);

// out [B, H, Sq, dv] (item n = b H + h) and logsumexp [N, Sq] of AttentionProblem (autograd/kernels.h): masks, causal,
// dropout with the kernel's Philox numbering. A fully masked row gives out 0 and lse -inf.
void attention_forward(const AttentionProblem& problem, const Tensor& out, const Tensor& logsumexp);

// Adds the gradients of sum(out * grad_out) into grad_q, grad_k, grad_v (zero-filled by the
// caller), recomputing the probabilities from q, k, v.
void attention_backward(const AttentionProblem& problem, const Tensor& grad_out,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v);

}  // namespace tg::cpu::reference
