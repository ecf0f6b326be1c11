#pragma once
// Comparisons, logic and triangles in PyTorch's names: eq, ne, lt, le, gt, ge (and the operators
// ==, !=, <, <=, >, >=), logical_not/and/or (~, &, | on bool tensors), isnan, isinf, triu, tril.
//
// A comparison or a logical op takes tensors of any dtype, broadcasts them as PyTorch does and
// gives a bool tensor, recorded on no tape (a comparison has no gradient). Two dtypes are promoted
// first, as PyTorch promotes them: bool < integer < floating; two integers compare as the wider,
// an integer and a floating tensor as the floating one, f16 with bf16 as f32, f32 with f64 as f64.
// A number compared with a floating tensor is rounded to the tensor's dtype (an f16 x holding 0.1
// gives x == 0.1 true); with an integer or bool tensor it keeps the tensor's dtype when it is a
// whole number the dtype holds, and compares in f64 otherwise (counts < 0.5, flags == 2).
// NaN compares false with everything and unequal to itself; -0 == 0.
#include "tapegrad/autograd/tensor.h"

namespace tg {

Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// Logic reads every dtype as "is not zero" (NaN is not zero, so it is true).
Tensor logical_not(const Tensor& x);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

// False for integer and bool tensors.
Tensor isnan(const Tensor& x);
Tensor isinf(const Tensor& x);

// x with the elements below (triu) or above (tril) a diagonal of its last two dims set to 0, as
// torch.triu and torch.tril: triu keeps row i, column j where j - i >= diagonal, tril where
// j - i <= diagonal (diagonal 0 is the main one, 1 the one above it, -1 the one below). Any dtype,
// any leading (batch) dims. Differentiable for a floating x: the gradient is 0 where x was zeroed.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);

inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator==(const Tensor& a, double b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, double b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, double b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, double b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, double b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, double b) { return ge(a, b); }
// A number on the left: the same comparison seen from the tensor's side (2 < x is x > 2).
inline Tensor operator==(double a, const Tensor& b) { return eq(b, a); }
inline Tensor operator!=(double a, const Tensor& b) { return ne(b, a); }
inline Tensor operator<(double a, const Tensor& b) { return gt(b, a); }
inline Tensor operator<=(double a, const Tensor& b) { return ge(b, a); }
inline Tensor operator>(double a, const Tensor& b) { return lt(b, a); }
inline Tensor operator>=(double a, const Tensor& b) { return le(b, a); }

// PyTorch's ~, & and | on bool tensors (masks): logical_not, logical_and, logical_or. On other
// dtypes PyTorch's are bitwise, which tapegrad does not have, so these refuse them, naming the op.
Tensor operator~(const Tensor& mask);
Tensor operator&(const Tensor& a, const Tensor& b);
Tensor operator|(const Tensor& a, const Tensor& b);

}  // namespace tg
