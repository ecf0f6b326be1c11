// dtypes: sizes, names, and the f16 / bf16 conversions checked exhaustively against an
// independent decoding formula and an independent nearest-value search.
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/tensor.h"

using namespace tg;

namespace {

// A 16-bit float format with `exponent_bits` exponent bits and `mantissa_bits` mantissa bits.
struct Format {
  int exponent_bits;
  int mantissa_bits;
  int bias() const { return (1 << (exponent_bits - 1)) - 1; }
  uint32_t exponent_mask() const { return (1u << exponent_bits) - 1; }
  uint16_t inf_bits() const { return static_cast<uint16_t>(exponent_mask() << mantissa_bits); }
};
constexpr Format kHalf{5, 10};
constexpr Format kBFloat{8, 7};

// sign * 2^(e - bias) * (1 + m / 2^M) for normals, sign * 2^(1 - bias) * (m / 2^M) for
// subnormals, +-inf and NaN for the all-ones exponent. Computed in double.
double decode_reference(uint16_t bits, Format f) {
  const bool negative = (bits >> 15) & 1u;
  const uint32_t exponent = (bits >> f.mantissa_bits) & f.exponent_mask();
  const uint32_t mantissa = bits & ((1u << f.mantissa_bits) - 1);
  const double sign = negative ? -1.0 : 1.0;
  const double fraction = static_cast<double>(mantissa) / std::pow(2.0, f.mantissa_bits);
  if (exponent == f.exponent_mask()) {
    return mantissa == 0 ? sign * std::numeric_limits<double>::infinity()
                         : std::numeric_limits<double>::quiet_NaN();
  }
  if (exponent == 0) return sign * std::pow(2.0, 1 - f.bias()) * fraction;
  return sign * std::pow(2.0, static_cast<int>(exponent) - f.bias()) * (1.0 + fraction);
}

bool is_nan_bits(uint16_t bits, Format f) {
  return ((bits >> f.mantissa_bits) & f.exponent_mask()) == f.exponent_mask() &&
         (bits & ((1u << f.mantissa_bits) - 1)) != 0;
}

// Round-to-nearest-even by search: the non-negative finite values of the format are increasing
// in their bit patterns 0 .. inf_bits - 1, and the "next value" after the largest finite one is
// 2^(emax + 1), where the pattern inf_bits sits. Pick the nearer neighbour, ties to the even
// pattern; anything at or past the inf pattern's value is infinity.
class NearestReference {
 public:
  explicit NearestReference(Format f) : format_(f) {
    for (uint32_t bits = 0; bits < f.inf_bits(); ++bits) {
      table_.push_back(decode_reference(static_cast<uint16_t>(bits), f));
    }
    table_.push_back(std::pow(2.0, f.bias() + 1));  // where rounding reaches infinity
  }

  // Returns the expected bits, or nullopt-like 0xffff for NaN input (checked separately).
  uint16_t round(float value) const {
    const uint16_t sign = std::signbit(value) ? 0x8000 : 0;
    const double magnitude = std::fabs(static_cast<double>(value));
    if (std::isinf(magnitude)) return sign | format_.inf_bits();
    // First index whose value is > magnitude.
    const auto upper = std::upper_bound(table_.begin(), table_.end(), magnitude);
    if (upper == table_.end()) return sign | format_.inf_bits();
    const size_t hi = static_cast<size_t>(upper - table_.begin());
    const size_t lo = hi - 1;  // table_[0] = 0 <= magnitude, so hi >= 1
    const double below = magnitude - table_[lo];
    const double above = table_[hi] - magnitude;
    size_t pick;
    if (below < above) pick = lo;
    else if (above < below) pick = hi;
    else pick = (lo % 2 == 0) ? lo : hi;
    return sign | static_cast<uint16_t>(pick);  // pick == inf_bits means infinity
  }

 private:
  Format format_;
  std::vector<double> table_;
};

bool same_float(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

}  // namespace

TEST_CASE("dtype: sizes, names and floating kinds", "[dtype]") {
  REQUIRE(dtype_size(DType::f32) == 4);
  REQUIRE(dtype_size(DType::f64) == 8);
  REQUIRE(dtype_size(DType::f16) == 2);
  REQUIRE(dtype_size(DType::bf16) == 2);
  REQUIRE(dtype_size(DType::i64) == 8);
  REQUIRE(dtype_size(DType::b8) == 1);
  REQUIRE(std::string(dtype_name(DType::f32)) == "f32");
  REQUIRE(std::string(dtype_name(DType::f64)) == "f64");
  REQUIRE(std::string(dtype_name(DType::f16)) == "f16");
  REQUIRE(std::string(dtype_name(DType::bf16)) == "bf16");
  REQUIRE(std::string(dtype_name(DType::i64)) == "i64");
  REQUIRE(std::string(dtype_name(DType::b8)) == "bool");
  REQUIRE(is_floating(DType::f32));
  REQUIRE(is_floating(DType::f64));
  REQUIRE(is_floating(DType::f16));
  REQUIRE(is_floating(DType::bf16));
  REQUIRE_FALSE(is_floating(DType::i64));
  REQUIRE_FALSE(is_floating(DType::b8));
}

TEST_CASE("dtype: f16_to_f32 matches the reference formula for all 65536 patterns", "[dtype][f16]") {
  int64_t mismatches = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const double expected = decode_reference(h, kHalf);
    const float got = f16_to_f32(h);
    if (std::isnan(expected)) {
      if (!std::isnan(got)) ++mismatches;
      continue;
    }
    // Every half is exactly representable in f32, including the sign of zero.
    if (!same_float(got, static_cast<float>(expected))) {
      if (mismatches < 10) FAIL_CHECK("f16 bits 0x" << std::hex << bits << ": got " << got
                                                    << ", expected " << expected);
      ++mismatches;
    }
  }
  REQUIRE(mismatches == 0);
  // A few anchors written out by hand.
  REQUIRE(f16_to_f32(0x3c00) == 1.0f);
  REQUIRE(f16_to_f32(0xc000) == -2.0f);
  REQUIRE(f16_to_f32(0x7bff) == 65504.0f);
  REQUIRE(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));   // smallest normal
  REQUIRE(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));   // smallest subnormal
  REQUIRE(f16_to_f32(0x03ff) == std::ldexp(1023.0f, -24));  // largest subnormal
  REQUIRE(f16_to_f32(0x3555) == Approx(0.33325195f));
  REQUIRE(std::signbit(f16_to_f32(0x8000)));
  REQUIRE(f16_to_f32(0x7c00) == std::numeric_limits<float>::infinity());
  REQUIRE(f16_to_f32(0xfc00) == -std::numeric_limits<float>::infinity());
  REQUIRE(std::isnan(f16_to_f32(0x7e00)));
  REQUIRE(std::isnan(f16_to_f32(0x7c01)));
}

TEST_CASE("dtype: bf16_to_f32 matches the reference formula for all 65536 patterns", "[dtype][bf16]") {
  int64_t mismatches = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const double expected = decode_reference(h, kBFloat);
    const float got = bf16_to_f32(h);
    if (std::isnan(expected)) {
      if (!std::isnan(got)) ++mismatches;
      continue;
    }
    if (!same_float(got, static_cast<float>(expected))) {
      if (mismatches < 10) FAIL_CHECK("bf16 bits 0x" << std::hex << bits << ": got " << got
                                                     << ", expected " << expected);
      ++mismatches;
    }
  }
  REQUIRE(mismatches == 0);
  REQUIRE(bf16_to_f32(0x3f80) == 1.0f);
  REQUIRE(bf16_to_f32(0xc040) == -3.0f);
  REQUIRE(bf16_to_f32(0x7f7f) == std::ldexp(255.0f, 120));  // largest finite: (2 - 2^-7) * 2^127
  REQUIRE(bf16_to_f32(0x0001) == std::ldexp(1.0f, -133));   // smallest subnormal
  REQUIRE(bf16_to_f32(0x7f80) == std::numeric_limits<float>::infinity());
  REQUIRE(std::isnan(bf16_to_f32(0x7fc0)));
}

TEST_CASE("dtype: f16 round trip is exact for every non-NaN pattern; NaN stays NaN", "[dtype][f16]") {
  int64_t mismatches = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const uint16_t back = f32_to_f16(f16_to_f32(h));
    if (is_nan_bits(h, kHalf)) {
      if (!is_nan_bits(back, kHalf) || (back & 0x8000) != (h & 0x8000)) ++mismatches;
    } else if (back != h) {
      if (mismatches < 10) FAIL_CHECK("f16 0x" << std::hex << bits << " came back as 0x" << back);
      ++mismatches;
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtype: bf16 round trip is exact for every non-NaN pattern; NaN stays NaN", "[dtype][bf16]") {
  int64_t mismatches = 0;
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = static_cast<uint16_t>(bits);
    const uint16_t back = f32_to_bf16(bf16_to_f32(h));
    if (is_nan_bits(h, kBFloat)) {
      if (!is_nan_bits(back, kBFloat) || (back & 0x8000) != (h & 0x8000)) ++mismatches;
    } else if (back != h) {
      if (mismatches < 10) FAIL_CHECK("bf16 0x" << std::hex << bits << " came back as 0x" << back);
      ++mismatches;
    }
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtype: f16 rounds exact halfway points to the even pattern", "[dtype][f16][rounding]") {
  // Every pair of adjacent finite halves (subnormal and normal, both signs): the midpoint has
  // at most 12 significant bits, so it is exact in f32. Ties go to the even mantissa; a hair
  // below goes down, a hair above goes up.
  int64_t checked = 0;
  for (uint32_t bits = 0; bits < 0x7bff; ++bits) {
    const double low = decode_reference(static_cast<uint16_t>(bits), kHalf);
    const double high = decode_reference(static_cast<uint16_t>(bits + 1), kHalf);
    const double midpoint = 0.5 * (low + high);
    const auto mid = static_cast<float>(midpoint);
    REQUIRE(static_cast<double>(mid) == midpoint);
    const uint16_t even = (bits % 2 == 0) ? bits : bits + 1;
    for (const float sign : {1.0f, -1.0f}) {
      const uint16_t sign_bits = sign < 0 ? 0x8000 : 0;
      const float m = sign * mid;
      if (f32_to_f16(m) != (sign_bits | even)) {
        FAIL("midpoint " << m << " between 0x" << std::hex << bits << " and 0x" << bits + 1
                         << " gave 0x" << f32_to_f16(m));
      }
      const float below = std::nextafter(m, 0.0f);
      const float above = std::nextafter(m, sign * std::numeric_limits<float>::infinity());
      REQUIRE(f32_to_f16(below) == (sign_bits | bits));
      REQUIRE(f32_to_f16(above) == (sign_bits | (bits + 1)));
      ++checked;
    }
  }
  REQUIRE(checked == 2 * 0x7bff);
  // Hand-picked ties: 1 + 2^-11 lies between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): -> 0x3c00.
  REQUIRE(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  // 1 + 3 * 2^-11 lies between 0x3c01 (odd) and 0x3c02 (even): -> 0x3c02.
  REQUIRE(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // 2049 lies between 2048 (0x6800) and 2050 (0x6801): -> 2048; 2051 -> 2052 (0x6802).
  REQUIRE(f32_to_f16(2049.0f) == 0x6800);
  REQUIRE(f32_to_f16(2051.0f) == 0x6802);
}

TEST_CASE("dtype: f16 overflow and infinities", "[dtype][f16][rounding]") {
  const float inf = std::numeric_limits<float>::infinity();
  REQUIRE(f32_to_f16(65504.0f) == 0x7bff);
  // Halfway between 65504 and 65536 (= 2^16, where the next pattern would be) is 65520:
  // below it rounds to the largest finite half, at it (tie, 0x7bff is odd) and above to inf.
  REQUIRE(f32_to_f16(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  REQUIRE(f32_to_f16(65519.0f) == 0x7bff);
  REQUIRE(f32_to_f16(65520.0f) == 0x7c00);
  REQUIRE(f32_to_f16(65536.0f) == 0x7c00);
  REQUIRE(f32_to_f16(1e5f) == 0x7c00);
  REQUIRE(f32_to_f16(std::numeric_limits<float>::max()) == 0x7c00);
  REQUIRE(f32_to_f16(-65520.0f) == 0xfc00);
  REQUIRE(f32_to_f16(-65504.0f) == 0xfbff);
  REQUIRE(f32_to_f16(inf) == 0x7c00);
  REQUIRE(f32_to_f16(-inf) == 0xfc00);
  const uint16_t nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  REQUIRE(is_nan_bits(nan, kHalf));
  // A signalling NaN whose payload lives only in the low 13 bits must not become infinity.
  const uint16_t low_payload = f32_to_f16(std::bit_cast<float>(0x7f800001u));
  REQUIRE(is_nan_bits(low_payload, kHalf));
}

TEST_CASE("dtype: f16 subnormal rounding and underflow", "[dtype][f16][rounding]") {
  const float tiny = std::ldexp(1.0f, -24);  // smallest subnormal half, pattern 0x0001
  REQUIRE(f32_to_f16(tiny) == 0x0001);
  REQUIRE(f32_to_f16(0.5f * tiny) == 0x0000);                        // tie with 0 -> even (0)
  REQUIRE(f32_to_f16(std::nextafter(0.5f * tiny, 1.0f)) == 0x0001);  // just above the tie
  REQUIRE(f32_to_f16(0.25f * tiny) == 0x0000);
  REQUIRE(f32_to_f16(1.5f * tiny) == 0x0002);   // tie between 1 and 2 -> 2
  REQUIRE(f32_to_f16(2.5f * tiny) == 0x0002);   // tie between 2 and 3 -> 2
  REQUIRE(f32_to_f16(3.5f * tiny) == 0x0004);   // tie between 3 and 4 -> 4
  REQUIRE(f32_to_f16(-0.5f * tiny) == 0x8000);  // negative underflow keeps the sign
  REQUIRE(f32_to_f16(-1.5f * tiny) == 0x8002);
  // The largest subnormal rounding up into the smallest normal: 1023.5 * 2^-24 -> 1024 * 2^-24.
  REQUIRE(f32_to_f16(1023.5f * tiny) == 0x0400);
  REQUIRE(f32_to_f16(1022.5f * tiny) == 0x03fe);
  // f32 subnormals and zeros.
  REQUIRE(f32_to_f16(std::numeric_limits<float>::denorm_min()) == 0x0000);
  REQUIRE(f32_to_f16(-std::numeric_limits<float>::denorm_min()) == 0x8000);
  REQUIRE(f32_to_f16(0.0f) == 0x0000);
  REQUIRE(f32_to_f16(-0.0f) == 0x8000);
}

TEST_CASE("dtype: f32_to_f16 agrees with a nearest-value search on sampled f32 patterns", "[dtype][f16][rounding]") {
  const NearestReference reference(kHalf);
  int64_t mismatches = 0, checked = 0;
  // A stride through all 2^32 patterns plus a dense sweep around the f16 range.
  auto check_bits = [&](uint32_t bits) {
    const float value = std::bit_cast<float>(bits);
    if (std::isnan(value)) {
      if (!is_nan_bits(f32_to_f16(value), kHalf)) ++mismatches;
      return;
    }
    ++checked;
    const uint16_t expected = reference.round(value);
    const uint16_t got = f32_to_f16(value);
    if (got != expected) {
      if (mismatches < 10) FAIL_CHECK("f32 0x" << std::hex << bits << " (" << value << "): got 0x"
                                               << got << ", expected 0x" << expected);
      ++mismatches;
    }
  };
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 4093) check_bits(static_cast<uint32_t>(bits));
  // Exponents from 2^-26 to 2^16 (f32 biased exponents 101 .. 143), every 1021st mantissa.
  for (uint32_t exponent = 101; exponent <= 143; ++exponent) {
    for (uint32_t mantissa = 0; mantissa < (1u << 23); mantissa += 1021) {
      check_bits((exponent << 23) | mantissa);
      check_bits(0x80000000u | (exponent << 23) | mantissa);
    }
  }
  REQUIRE(mismatches == 0);
  REQUIRE(checked > 1000000);
}

TEST_CASE("dtype: bf16 rounding to nearest even", "[dtype][bf16][rounding]") {
  // 1 + 2^-8 is halfway between 1 (0x3f80, even) and 1 + 2^-7 (0x3f81): -> 0x3f80.
  REQUIRE(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 0x3f81 (odd) and 0x3f82: -> 0x3f82.
  REQUIRE(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  REQUIRE(f32_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)) == 0x3f81);
  // The largest finite f32 is past the halfway point to 2^128: rounds to infinity.
  REQUIRE(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7f80);
  REQUIRE(f32_to_bf16(-std::numeric_limits<float>::max()) == 0xff80);
  REQUIRE(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  REQUIRE(f32_to_bf16(-0.0f) == 0x8000);
  REQUIRE(is_nan_bits(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()), kBFloat));
  // A NaN whose payload is only in the low 16 bits must stay NaN (not become infinity).
  REQUIRE(is_nan_bits(f32_to_bf16(std::bit_cast<float>(0x7f800001u)), kBFloat));
  REQUIRE(is_nan_bits(f32_to_bf16(std::bit_cast<float>(0xff800001u)), kBFloat));

  // Every adjacent pair of finite bf16 values: midpoint ties to even, neighbours go their way.
  for (uint32_t bits = 0; bits < 0x7f7f; ++bits) {
    const double low = decode_reference(static_cast<uint16_t>(bits), kBFloat);
    const double high = decode_reference(static_cast<uint16_t>(bits + 1), kBFloat);
    const auto mid = static_cast<float>(0.5 * (low + high));
    REQUIRE(static_cast<double>(mid) == 0.5 * (low + high));
    const uint16_t even = (bits % 2 == 0) ? bits : bits + 1;
    if (f32_to_bf16(mid) != even) FAIL("bf16 midpoint after 0x" << std::hex << bits);
    if (f32_to_bf16(std::nextafter(mid, 0.0f)) != bits) FAIL("bf16 below midpoint 0x" << std::hex << bits);
    if (f32_to_bf16(std::nextafter(mid, std::numeric_limits<float>::infinity())) != bits + 1) FAIL("bf16 above midpoint 0x" << std::hex << bits);
  }

  const NearestReference reference(kBFloat);
  int64_t mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xffffffffull; bits += 2039) {
    const float value = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    if (f32_to_bf16(value) != reference.round(value)) ++mismatches;
  }
  REQUIRE(mismatches == 0);
}

TEST_CASE("dtype: tensors convert through f16 and bf16 with rounding", "[dtype]") {
  // 0.1 -> nearest half 1638 * 2^-14 = 0.0999755859375 (pattern 0x2e66);
  // 0.1 -> nearest bf16 205 * 2^-11 = 0.10009765625 (pattern 0x3dcd).
  Tensor x = from_values({0.1, 65520.0, -2.5, 1.0 / 3.0}, {4});
  Tensor half = x.to(DType::f16);
  REQUIRE(half.dtype() == DType::f16);
  REQUIRE(half.data_as<uint16_t>()[0] == 0x2e66);
  const std::vector<double> h = half.to_host_f64();
  REQUIRE(h[0] == 0.0999755859375);
  REQUIRE(std::isinf(h[1]));
  REQUIRE(h[2] == -2.5);
  REQUIRE(h[3] == 1365.0 / 4096.0);  // 1/3 ~ 0x3555 = (1 + 341/1024) / 4
  Tensor brain = x.to(DType::bf16);
  REQUIRE(brain.data_as<uint16_t>()[0] == 0x3dcd);
  const std::vector<double> b = brain.to_host_f64();
  REQUIRE(b[0] == 0.10009765625);
  REQUIRE(b[1] == 65536.0);
  REQUIRE(b[2] == -2.5);
  REQUIRE(b[3] == 171.0 / 512.0);  // 1/3 ~ (1 + 43/128) / 4, pattern 0x3eab
}

TEST_CASE("i8 and i32: sizes, names, and conversions that saturate instead of wrapping", "[dtype]") {
  REQUIRE(dtype_size(DType::i8) == 1);
  REQUIRE(dtype_size(DType::i32) == 4);
  REQUIRE(std::string(dtype_name(DType::i8)) == "i8");
  REQUIRE(std::string(dtype_name(DType::i32)) == "i32");
  REQUIRE_FALSE(is_floating(DType::i8));
  // f64 -> i8: truncated toward zero, saturated, NaN -> 0; and back exactly
  const Tensor x = from_values({-1e9, -128.9, -2.7, -0.5, 0.5, 2.7, 126.99, 1e9, std::nan("")}, {9}, DType::f64);
  REQUIRE(x.to(DType::i8).to_host_i64() == std::vector<int64_t>{-128, -128, -2, 0, 0, 2, 126, 127, 0});
  REQUIRE(x.to(DType::i32).to_host_i64() ==
          std::vector<int64_t>{-1000000000, -128, -2, 0, 0, 2, 126, 1000000000, 0});
  REQUIRE(from_values({3e10, -3e10}, {2}, DType::f32).to(DType::i32).to_host_i64() ==
          std::vector<int64_t>{2147483647, -2147483648LL});
  REQUIRE(from_indices({-128, 127}, {2}).to(DType::i8).to_host_f64() == std::vector<double>{-128, 127});
}

TEST_CASE("dtype: a floating value into an integer dtype truncates and saturates, NaN gives 0",
          "[dtype]") {
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  // 2^63 is the first double past i64's top; 2^63 - 1024 the last one below it
  const std::vector<double> values = {2.9, -2.9, 0x1p63, 0x1p63 - 1024, -0x1p63, -0x1p64, 1e300, -inf, nan};
  const Tensor as_i64 = from_values(values, {9}, DType::f64).to(DType::i64);
  CHECK(as_i64.to_host_i64() == std::vector<int64_t>{2, -2, kMax, kMax - 1023,
                                                     kMin, kMin, kMax, kMin, 0});
  const Tensor as_i32 = from_values({3e9, -3e9, -7.5, nan}, {4}, DType::f32).to(DType::i32);
  CHECK(as_i32.to_host_i64() == std::vector<int64_t>{2147483647, -2147483648LL, -7, 0});
  const Tensor as_i8 = from_values({200, -200, 127.9, -128.5}, {4}).to(DType::i8);
  CHECK(as_i8.to_host_i64() == std::vector<int64_t>{127, -128, 127, -128});
}
