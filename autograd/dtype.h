#pragma once
// Element types. f16 and bf16 are 16-bit storage types; arithmetic on them goes through f32.
#include <cstddef>
#include <cstdint>
#include <string>

namespace tg {

enum class DType : uint8_t { f32, f64, f16, bf16, i64, b8 };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);      // "f32", "f64", "f16", "bf16", "i64", "bool"
bool is_floating(DType dtype);            // f32, f64, f16, bf16
bool is_half(DType dtype);                // f16, bf16: stored in 16 bits, computed in f32

// IEEE-754 half (binary16) and bfloat16 conversions, round-to-nearest-even, inf/NaN kept.
uint16_t f32_to_f16(float value);
float f16_to_f32(uint16_t bits);
uint16_t f32_to_bf16(float value);
float bf16_to_f32(uint16_t bits);

}  // namespace tg
