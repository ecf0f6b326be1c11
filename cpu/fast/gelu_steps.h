#pragma once
// The exact GELU, x Phi(x), and its derivative Phi(x) + x phi(x), written once for the two
// instruction-set files that include this header: cpu/fast/elementwise_avx2.cpp (eight lanes) and
// cpu/fast/elementwise_avx512.cpp (sixteen). The AVX2 file derives the math; this file is its
// sequence of roundings. Each file passes its lanes as a struct of primitive operations (Lanes,
// below) and gets a copy compiled for its instruction set (internal linkage, the unnamed
// namespace: no instance is shared between the files, nor with the baseline code).
//
// Why one definition: the two kernels are claimed to give the same bits
// (tests/cpu/fast/test_elementwise_avx512.cpp), and CpuKernels picks one by the CPU it runs on, so
// a model's results must not depend on which. Two hand-written copies drifted once (a polynomial
// evaluated by Estrin's scheme in one and Horner's rule in the other: a last bit apart at x = -8).
// Here every step is an operation of Lanes that rounds once, in IEEE single precision, so the
// order of the steps alone decides the bits, and there is one order. The files are compiled
// without contracting a * b + c into an FMA (-ffp-contract=off, CMakeLists.txt), so that the
// compiler cannot fuse differently in one of them either.
//
// Lanes provides, for its vector of floats `Floats` and its lane mask `Mask`:
//   splat(v)                      v in every lane
//   add, sub, mul, div(a, b)      a op b, rounded once
//   fmadd(a, b, c)                a b + c, rounded once; fnmadd: c - a b; fmsub: a b - c
//   abs(a)                        |a| (the sign bit cleared)
//   max(a, b)                     the larger; b where either is NaN (maxps)
//   round_to_int(a)               to the nearest integer, ties to even, as a float
//   scale_by_power_of_2(y, n)     y 2^n for integral n in [-126, 127], rounded once (subnormal
//                                 results included); NaN where y is NaN
//   less(a, b)                    a < b (false where either is NaN)
//   select(mask, a, b)            a where mask, else b
//   zero_where(mask, a)           0 where mask, else a
#include <cstdint>

namespace tg::cpu {
namespace {

// Numerical Recipes' erfcc: erfc(z) = t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), with
// P(t) = c0 + c1 t + ... + c9 t^9, within 1.2e-7 relative for every z >= 0.
constexpr float kErfcCoefficients[10] = {-1.26551223f, 1.00002368f,  0.37409196f, 0.09678418f,
                                         -0.18628806f, 0.27886807f,  -1.13520398f, 1.48851587f,
                                         -0.82215223f, 0.17087277f};

// Cephes expf: ln 2 split in two (ln2_hi has 9 significant bits, so n ln2_hi is exact for
// |n| < 2^15), its degree-7 polynomial for e^r, and the argument below which e^x would be
// subnormal (0 instead).
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f, kLog2e = 1.44269504f;
constexpr float kExpFloor = -87.3f;
constexpr float kExpCoefficients[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                       4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

template <typename Lanes>
struct GeluSteps {
  using Floats = typename Lanes::Floats;

  // e^r for |r| <= ln 2 / 2 (and a little past): Cephes' polynomial, 1 + r + r^2 q(r), q by
  // Horner's rule.
  static Floats exp_reduced(Floats r) {
    Floats q = Lanes::splat(kExpCoefficients[0]);
    for (int i = 1; i < 6; ++i) q = Lanes::fmadd(q, r, Lanes::splat(kExpCoefficients[i]));
    return Lanes::fmadd(q, Lanes::mul(r, r), Lanes::add(r, Lanes::splat(1.0f)));
  }

  // n = round(x log2 e), the power of 2 of e^x.
  static Floats exp_exponent(Floats x) {
    return Lanes::round_to_int(Lanes::mul(x, Lanes::splat(kLog2e)));
  }

  // e^x for |x| < 2 (GELU's P, in [-1.27, 0]; NaN where x is, which stays NaN), so that there is
  // no edge to look for.
  static Floats exp_small(Floats x) {
    const Floats n = exp_exponent(x);
    Floats r = Lanes::fnmadd(n, Lanes::splat(kLn2Hi), x);  // x - n ln 2, in two parts
    r = Lanes::fnmadd(n, Lanes::splat(kLn2Lo), r);
    return Lanes::scale_by_power_of_2(exp_reduced(r), n);
  }

  // exp(big + small) for a float `big` <= 0 of any size and |small| < 1.5 (GELU's P - lo and -lo),
  // without rounding their sum: n comes from the rounded sum, but the reduction takes big alone
  // first. big - n ln2_hi is exact: both are multiples of ulp(big) (n ln2_hi is one of 2^-9, and
  // ulp(big) <= 2^-9 below 2^15), and the difference, about r - small, is under 2^24 of them (for
  // |big| < 1, where it may not be, its rounding is below 2^-24 absolute). small is added after,
  // where the two cancel down to r. 0 below kExpFloor, so that n >= -126; a NaN sum is not below,
  // and clamps to the floor (max returns its second operand): r is NaN, and so the result.
  static Floats exp_of_sum(Floats big, Floats small) {
    const Floats floor = Lanes::splat(kExpFloor);
    const Floats sum = Lanes::add(big, small);  // for n and the edge only
    const auto underflow = Lanes::less(sum, floor);
    const Floats n = exp_exponent(Lanes::max(sum, floor));
    Floats r = Lanes::fnmadd(n, Lanes::splat(kLn2Hi), big);  // big - n ln2_hi, exact
    r = Lanes::add(r, small);
    r = Lanes::fnmadd(n, Lanes::splat(kLn2Lo), r);
    return Lanes::zero_where(underflow, Lanes::scale_by_power_of_2(exp_reduced(r), n));
  }

  // P(t) by Estrin's scheme: the pairs c_2i + c_2i+1 t, joined by t^2, t^4 and t^8. Five steps
  // deep where Horner's rule is ten, so that more vectors fit the core's window at once (the AVX2
  // forward 6-9% faster on Zen 3).
  static Floats erfc_polynomial(Floats t) {
    const float* c = kErfcCoefficients;
    const auto pair = [&](int i) {  // c_i + c_i+1 t
      return Lanes::fmadd(Lanes::splat(c[i + 1]), t, Lanes::splat(c[i]));
    };
    const Floats t2 = Lanes::mul(t, t), t4 = Lanes::mul(t2, t2), t8 = Lanes::mul(t4, t4);
    const Floats c0_3 = Lanes::fmadd(pair(2), t2, pair(0));
    const Floats c4_7 = Lanes::fmadd(pair(6), t2, pair(4));
    return Lanes::fmadd(pair(8), t8, Lanes::fmadd(c4_7, t4, c0_3));
  }

  // erfc(|x| / sqrt 2) / 2 = half_t exp(minus_half_square - error / 2 + poly), where
  // x^2 = square + error (square = x x rounded, -square / 2 exact) and poly = P(t).
  struct HalfErfcParts {
    Floats half_t, minus_half_square, error, poly;
  };
  static HalfErfcParts half_erfc_parts(Floats x) {
    const Floats one = Lanes::splat(1.0f), half = Lanes::splat(0.5f);
    const Floats z = Lanes::mul(Lanes::abs(x), Lanes::splat(0.70710678f));
    const Floats t = Lanes::div(one, Lanes::fmadd(z, half, one));
    const Floats square = Lanes::mul(x, x);  // x^2 = square + error exactly
    // (error 0 where x^2 is not finite: inf - inf would make the tail, and gelu(+inf), NaN)
    const auto finite = Lanes::less(square, Lanes::splat(__builtin_inff()));
    const Floats error = Lanes::select(finite, Lanes::fmsub(x, x, square), Lanes::splat(0.0f));
    return {Lanes::mul(half, t), Lanes::mul(square, Lanes::splat(-0.5f)), error,
            erfc_polynomial(t)};
  }

  // Phi(x) from erfc(|x| / sqrt 2) / 2: itself for x < 0, 1 minus it otherwise (NaN stays NaN).
  static Floats cdf_from_half_erfc(Floats x, Floats half_erfc) {
    const auto negative = Lanes::less(x, Lanes::splat(0.0f));
    return Lanes::select(negative, half_erfc, Lanes::sub(Lanes::splat(1.0f), half_erfc));
  }

  // x Phi(x) with one exp, of -hi + (P - lo).
  static Floats gelu(Floats x) {
    const HalfErfcParts parts = half_erfc_parts(x);
    const Floats tail_exponent = Lanes::fnmadd(parts.error, Lanes::splat(0.5f), parts.poly);
    const Floats half_erfc =
        Lanes::mul(parts.half_t, exp_of_sum(parts.minus_half_square, tail_exponent));
    return Lanes::mul(x, cdf_from_half_erfc(x, half_erfc));
  }

  // Phi(x) + x phi(x): exp(-hi - lo) once for both, and exp(P). (exp(-square / 2) alone, without
  // lo, would be off by up to 4e-6 relative left of x = -11.3, where x^2 >= 128 and
  // |gelu'| < 1e-27.)
  static Floats gelu_grad(Floats x) {
    const HalfErfcParts parts = half_erfc_parts(x);
    const Floats minus_half_error = Lanes::mul(parts.error, Lanes::splat(-0.5f));
    const Floats gauss = exp_of_sum(parts.minus_half_square, minus_half_error);
    const Floats tail = exp_small(parts.poly);
    const Floats half_erfc = Lanes::mul(parts.half_t, Lanes::mul(gauss, tail));
    const Floats cdf = cdf_from_half_erfc(x, half_erfc);
    const Floats pdf = Lanes::mul(gauss, Lanes::splat(0.39894228f));  // 1 / sqrt(2 pi)
    return Lanes::fmadd(x, pdf, cdf);
  }

  // gelu, or gelu' when kDerivative.
  template <bool kDerivative>
  static Floats gelu_or_grad(Floats x) {
    return kDerivative ? gelu_grad(x) : gelu(x);
  }
};

}  // namespace
}  // namespace tg::cpu
