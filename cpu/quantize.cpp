// CPU int8 kernels: symmetric per-row quantization, the int8 x int8 -> int32 product, and the
// rescale back to f32 (formulas in autograd/kernels.h). Plain loops over rows, the thread pool
// across them: the readable reference that the CUDA kernels (cuda/quantize.cu) and the CPU's own
// vectorised fast paths (cpu/fast/quantize.h, taken where cpu::fast_paths_enabled()) are tested
// against, bit for bit.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>

#include "tapegrad/cpu/fast/quantize.h"
#include "tapegrad/cpu/kernels.h"
#include "tapegrad/runtime/features.h"

namespace tg::cpu {
namespace {

// Loops over at most this many elements (of the input, or multiply-adds of the plain product) run
// on the calling thread (the thread policy: runtime/threads.h).
constexpr int64_t kParallelInt8Elements = 1 << 14;

// The fast int8 kernels' instruction set, or none: the plain loops (FastPathsOff, or
// TAPEGRAD_INT8_KERNEL=plain, or a CPU without AVX2; cpu/fast/quantize.h). A bad variable throws.
std::optional<int8::Isa> int8_fast_isa() {
  const int8::Path path = int8::selected_path();
  if (!fast_paths_enabled() || path == int8::Path::plain) return std::nullopt;
  return path == int8::Path::avx512_vnni ? int8::Isa::avx512_vnni : int8::Isa::avx2;
}

}  // namespace

void CpuKernels::quantize_rows(const Tensor& x, double fixed_scale, int levels, const Tensor& q,
                               const Tensor& scale) {
  const int64_t rows = x.size(0), cols = x.size(1);
  const float* in = x.data_as<float>();
  int8_t* out = q.data_as<int8_t>();
  float* scales = scale.data_as<float>();
  if (int8_fast_isa()) return int8::quantize_rows(in, rows, cols, fixed_scale, levels, out, scales);
  const float steps = static_cast<float>(levels);
  parallel_for(rows, grain_for(cols, kParallelInt8Elements), [&](int64_t first, int64_t past) {
    for (int64_t r = first; r < past; ++r) {
      const float* row = in + r * cols;
      float row_scale = static_cast<float>(fixed_scale);
      if (fixed_scale <= 0) {
        float largest = 0;  // max |x| over the finite entries (fmax skips NaN)
        for (int64_t c = 0; c < cols; ++c) {
          if (std::isfinite(row[c])) largest = std::fmax(largest, std::fabs(row[c]));
        }
        // Never below the smallest normal f32: a denormal row's largest / 127 would be 0 or
        // denormal (a scale the loader refuses, or one that flush-to-zero hardware reads as 0).
        row_scale = largest > 0 ? std::max(largest / steps, 0x1p-126f) : 1.0f;
      }
      scales[r] = row_scale;
      const float inverse = 1.0f / row_scale;  // (ops/quantize.h: a product, not a quotient)
      for (int64_t c = 0; c < cols; ++c) {
        const float scaled = row[c] * inverse;  // q = round(x (1 / scale)), clamped
        const float clamped = std::isnan(scaled) ? 0.0f : std::clamp(scaled, -steps, steps);
        out[r * cols + c] = static_cast<int8_t>(std::nearbyint(clamped));
      }
    }
  });
}

// 63 on the AVX2 path, whose product is fastest on 7-bit activations (cpu/fast/quantize.h); the
// plain loops stand in for it with the same numbers in a FastPathsOff scope.
int CpuKernels::int8_activation_levels() {
  return int8::selected_path() == int8::Path::avx2 ? int8::kAvx2ActivationLevels : 127;
}

// 63 on the AVX2 path too, whose product on 7-bit activations takes a third fewer multiplies
// when the weight is 7-bit as well (cpu/fast/quantize_kernels.h).
int CpuKernels::int8_weight_levels() {
  return int8::selected_path() == int8::Path::avx2 ? int8::kAvx2WeightLevels : 127;
}

void CpuKernels::gemm_i8(const Tensor& a, const Tensor& b, const Tensor& acc) {
  const int64_t m = a.size(0), k = a.size(1), n = b.size(0);
  const int8_t* lhs = a.data_as<int8_t>();
  const int8_t* rhs = b.data_as<int8_t>();
  int32_t* out = acc.data_as<int32_t>();
  if (const auto isa = int8_fast_isa()) {
    const int8::BOwner owner{b.storage(), b.version()};  // b kept packed, once per version
    return int8::gemm(lhs, rhs, out, m, n, k, *isa, &owner);
  }
  const int64_t grain = grain_for(static_cast<double>(n) * k, kParallelInt8Elements);
  parallel_for(m, grain, [&](int64_t first, int64_t past) {
    for (int64_t i = first; i < past; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        int32_t sum = 0;  // acc_ij = sum_p a_ip b_jp
        for (int64_t p = 0; p < k; ++p) sum += int32_t{lhs[i * k + p]} * int32_t{rhs[j * k + p]};
        out[i * n + j] = sum;
      }
    }
  });
}

void CpuKernels::dequantize_product(const Tensor& acc, const Tensor& row_scale,
                                    const Tensor& col_scale, const Tensor& bias, const Tensor& out) {
  const int64_t m = acc.size(0), n = acc.size(1);
  const int32_t* in = acc.data_as<int32_t>();
  const float* rows = row_scale.data_as<float>();
  const float* cols = col_scale.data_as<float>();
  const float* shift = bias.defined() ? bias.data_as<float>() : nullptr;
  float* result = out.data_as<float>();
  if (int8_fast_isa()) return int8::dequantize_product(in, m, n, rows, cols, shift, result);
  parallel_for(m, grain_for(n, kParallelInt8Elements), [&](int64_t first, int64_t past) {
    for (int64_t i = first; i < past; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float scaled = (static_cast<float>(in[i * n + j]) * rows[i]) * cols[j];
        result[i * n + j] = shift ? scaled + shift[j] : scaled;
      }
    }
  });
}

void CpuKernels::quantized_product(const Tensor& a, const Tensor& b, const Tensor& row_scale,
                                   const Tensor& col_scale, const Tensor& bias, const Tensor& out) {
  const auto isa = int8_fast_isa();
  if (!isa) return Kernels::quantized_product(a, b, row_scale, col_scale, bias, out);  // 2 loops
  const int8::BOwner owner{b.storage(), b.version()};  // b kept packed, once per version
  int8::quantized_product(a.data_as<int8_t>(), b.data_as<int8_t>(), a.size(0), b.size(0), a.size(1),
                          *isa, row_scale.data_as<float>(), col_scale.data_as<float>(),
                          bias.defined() ? bias.data_as<float>() : nullptr, out.data_as<float>(),
                          &owner);
}

void CpuKernels::quantized_linear(const Tensor& x, double fixed_scale, int levels, const Tensor& b,
                                  const Tensor& col_scale, const Tensor& bias, const Tensor& out) {
  const auto isa = int8_fast_isa();
  if (!isa || !int8::quantized_linear_takes(*isa, levels)) {  // quantize_rows, quantized_product
    return Kernels::quantized_linear(x, fixed_scale, levels, b, col_scale, bias, out);
  }
  const int64_t m = x.size(0);
  const Tensor row_scale = empty({m}, DType::f32, kCPU);
  const int8::BOwner owner{b.storage(), b.version()};  // b kept packed, once per version
  int8::quantized_linear(x.data_as<float>(), b.data_as<int8_t>(), m, b.size(0), x.size(1), *isa,
                         fixed_scale, levels, col_scale.data_as<float>(),
                         bias.defined() ? bias.data_as<float>() : nullptr,
                         row_scale.data_as<float>(), out.data_as<float>(), &owner);
}

}  // namespace tg::cpu
