#pragma once
// Element types. f16 and bf16 are 16-bit storage types; arithmetic on them goes through f32.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "tapegrad/autograd/portable.h"

namespace tg {

// i8 and i32 hold quantized weights and activations and their products' accumulators
// (ops/quantize.h); appended last, so that the earlier values keep their numbers.
enum class DType : uint8_t { f32, f64, f16, bf16, i64, b8, i8, i32 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);      // "f32", "f64", "f16", "bf16", "i64", "bool", "i8", "i32"
bool is_floating(DType dtype);            // f32, f64, f16, bf16
bool is_half(DType dtype);                // f16, bf16: stored in 16 bits, computed in f32

// IEEE-754 half (binary16) and bfloat16 conversions, round-to-nearest-even, inf/NaN kept.
// Inline and branch-light: the f16/bf16 kernels call them once per element loaded or stored.
TG_HOST_DEVICE uint16_t f32_to_f16(float value);
TG_HOST_DEVICE float f16_to_f32(uint16_t bits);
TG_HOST_DEVICE uint16_t f32_to_bf16(float value);
TG_HOST_DEVICE float bf16_to_f32(uint16_t bits);

// f32 -> f16. Normal results: rebias the exponent (127 -> 15) and drop 13 mantissa bits after
// adding 0xfff plus the lowest kept bit, which rounds to nearest with ties to the even pattern (a
// carry may ripple into the exponent, up to infinity: correct). Results below 2^-14 (subnormal or
// zero): adding 0.5 puts the 10 kept bits at the bottom of an f32 mantissa (0.5's ulp is 2^-24,
// f16's smallest subnormal) and the FPU's own round-to-nearest-even does the rounding.
// |value| >= 65536 is inf (65520 up to it rounds there anyway); NaN stays a quiet NaN.
TG_HOST_DEVICE inline uint16_t f32_to_f16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  const auto sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  bits &= 0x7fffffffu;
  if (bits >= (127u + 16u) << 23) {  // 2^16 or more, inf or NaN
    if (bits > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((bits & 0x7fffffu) >> 13);
    return sign | 0x7c00u;
  }
  if (bits < (127u - 14u) << 23) {  // below 2^-14
    const float aligned = std::bit_cast<float>(bits) + 0.5f;
    return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(aligned) - std::bit_cast<uint32_t>(0.5f));
  }
  const uint32_t odd = (bits >> 13) & 1u;
  bits -= (127u - 15u) << 23;
  bits += 0xfffu + odd;
  return sign | static_cast<uint16_t>(bits >> 13);
}

// f16 -> f32, exact. Exponent and mantissa move up to f32's positions and the exponent is
// rebiased; inf/NaN get the all-ones exponent. A subnormal m * 2^-24 is first read as
// 2^-14 * (1 + m/1024), then 2^-14 is subtracted: the f32 subtraction normalises it exactly.
TG_HOST_DEVICE inline float f16_to_f32(uint16_t bits) {
  constexpr uint32_t kExponent = 0x7c00u << 13;
  uint32_t magnitude = static_cast<uint32_t>(bits & 0x7fffu) << 13;
  const uint32_t exponent = magnitude & kExponent;
  magnitude += (127u - 15u) << 23;
  if (exponent == kExponent) {
    magnitude += (128u - 16u) << 23;  // inf or NaN
  } else if (exponent == 0) {
    magnitude += 1u << 23;
    magnitude = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) - 0x1.0p-14f);
  }
  return std::bit_cast<float>(magnitude | (static_cast<uint32_t>(bits & 0x8000u) << 16));
}

// bf16 is the top half of an f32: round the low 16 bits away, ties to even.
TG_HOST_DEVICE inline uint16_t f32_to_bf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu)) {
    return static_cast<uint16_t>((bits >> 16) | 0x40u);  // quiet NaN stays NaN
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

TG_HOST_DEVICE inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace tg
