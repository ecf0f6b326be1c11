#pragma once
// The C++ type each dtype is stored as, shared by the CPU and CUDA kernels: f16 and bf16 are 16-bit
// storage (struct Half, struct BFloat16) computed through f32. convert<To>(value) is the one
// element conversion both devices use (TG_HOST_DEVICE), so they round identically.
#include <cstdint>
#include <type_traits>

#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/portable.h"

namespace tg {

struct Half { uint16_t bits; };
struct BFloat16 { uint16_t bits; };

// value as type To: half types through f32 (a double is rounded to f32 first, then to 16 bits),
// bool as value != 0, a floating value into i8, i32 or i64 truncated toward zero and saturated at
// the type's range (NaN gives 0: a plain cast would be undefined there), everything else
// static_cast.
template <typename To, typename From>
TG_HOST_DEVICE inline To convert(From value) {
  if constexpr (std::is_same_v<From, Half>) return convert<To>(f16_to_f32(value.bits));
  else if constexpr (std::is_same_v<From, BFloat16>) return convert<To>(bf16_to_f32(value.bits));
  else if constexpr (std::is_same_v<To, Half>) return Half{f32_to_f16(static_cast<float>(value))};
  else if constexpr (std::is_same_v<To, BFloat16>) return BFloat16{f32_to_bf16(static_cast<float>(value))};
  else if constexpr (std::is_same_v<To, bool>) return value != From{};
  else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    // 2^(bits - 1), the first value past the top, is exact in a double for every width (the
    // top itself, 2^63 - 1, is not, so the comparisons are made against this one).
    constexpr uint64_t past_top = uint64_t{1} << (8 * sizeof(To) - 1);
    constexpr To highest = static_cast<To>(past_top - 1);
    const double x = static_cast<double>(value);
    if (!(x == x)) return To{0};  // NaN
    if (x >= static_cast<double>(past_top)) return highest;
    if (x <= -static_cast<double>(past_top)) return static_cast<To>(-highest - 1);
    return static_cast<To>(x);
  } else return static_cast<To>(value);
}

// Host side: calls body(T{}) with T the C++ type stored for dtype.
template <typename Body>
void dispatch_any(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::f32: body(float{}); return;
    case DType::f64: body(double{}); return;
    case DType::f16: body(Half{}); return;
    case DType::bf16: body(BFloat16{}); return;
    case DType::i64: body(int64_t{}); return;
    case DType::b8: body(bool{}); return;
    case DType::i8: body(int8_t{}); return;
    case DType::i32: body(int32_t{}); return;
  }
}

}  // namespace tg
