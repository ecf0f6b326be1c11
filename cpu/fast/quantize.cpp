// The fast paths of the CPU int8 kernels (cpu/fast/quantize.h): choosing the instruction set, packing
// the operands into the layouts of cpu/fast/quantize_kernels.h, and spreading rows over the threads.
#include "tapegrad/cpu/fast/quantize.h"

#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/quantize_kernels.h"
#include "tapegrad/cpu/features.h"
#include "tapegrad/cpu/thread_pool.h"

namespace tg::cpu::int8 {
namespace {

// Rows of A a thread packs and multiplies at a time: a multiple of the kernels' 6- and 4-row blocks,
// small enough that the packed rows (48 x 256 bytes at k = 256) stay in L1 beside B's panels.
constexpr int64_t kChunkRows = 48;
// The work thresholds (the thread policy: autograd/threads.h): products of at most this many
// multiply-adds run on the calling thread (waking a thread costs microseconds), and so do row
// loops over at most kParallelInt8Elements elements in all, as in the plain cpu/quantize.cpp.
constexpr int64_t kParallelInt8Work = int64_t{1} << 20;
constexpr int64_t kParallelInt8Elements = int64_t{1} << 14;

// One panel of B [n, k]: columns [panel kWidth, + kWidth) in groups of kDepth p (layout in
// cpu/fast/quantize_kernels.h), into `out`; and kCorrection sum_p B(j, p) for each of its columns j
// into `correction`. Both must be zero on entry: the padding (columns past n, p past k) is skipped.
template <typename T, int kWidth, int kDepth, int32_t kCorrection>
void pack_b_panel(const int8_t* b, int64_t n, int64_t k, int64_t groups, int64_t panel, T* out,
                  int32_t* correction) {
  const int64_t first = panel * kWidth;
  const int64_t columns = n - first < kWidth ? n - first : kWidth;
  for (int64_t column = 0; column < columns; ++column) {
    const int8_t* row = b + (first + column) * k;
    int32_t sum = 0;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t t = 0; t < kDepth && g * kDepth + t < k; ++t) {
        out[(g * kWidth + column) * kDepth + t] = static_cast<T>(row[g * kDepth + t]);
        sum += row[g * kDepth + t];
      }
    }
    // 128 sum, wrapped to 32 bits as the kernels' i32 sums wrap (exact in the end, autograd/kernels.h);
    // the product is taken unsigned, where wrapping is defined: |sum| <= 128 k reaches 2^24.
    correction[column] = static_cast<int32_t>(static_cast<uint32_t>(kCorrection) * static_cast<uint32_t>(sum));
  }
}

// Rows [0, rows) of A [., k] into rows of groups x kDepth entries, convert(A(i, p)), zero-padded.
template <typename T, int kDepth, typename Convert>
void pack_a_rows(const int8_t* a, int64_t rows, int64_t k, int64_t groups, Convert convert, T* out) {
  const int64_t depth = groups * kDepth;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t p = 0; p < k; ++p) out[i * depth + p] = convert(a[i * k + p]);
    for (int64_t p = k; p < depth; ++p) out[i * depth + p] = T{0};
  }
}

// The product in two loops on the pool: the threads pack B's panels (and its correction), then
// take C's rows in chunks of kChunkRows, each packing its chunk of A (TA: convert(A(i, p))) into a
// buffer of its own and calling multiply(packed chunk, rows, C's first row of the chunk, packed B,
// correction).
template <typename TA, typename TB, int kWidth, int kDepth, int32_t kCorrection, typename Convert,
          typename Multiply>
void packed_product(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k,
                    Convert convert, Multiply multiply) {
  const int64_t groups = (k + kDepth - 1) / kDepth;
  const int64_t panels = (n + kWidth - 1) / kWidth;
  const int64_t chunks = (m + kChunkRows - 1) / kChunkRows;
  const int64_t panel_size = groups * kWidth * kDepth;
  std::vector<TB> b_packed(panels * panel_size);      // zeros: the padding stays so
  std::vector<int32_t> correction(panels * kWidth);  // zeros
  // Both loops split when the product is above its threshold (packing B, a small part of the
  // work, then one panel a chunk).
  const int64_t grain = grain_for(static_cast<double>(kChunkRows) * n * k, kParallelInt8Work);
  const bool product_splits = chunks > grain;
  parallel_for(panels, product_splits ? 1 : panels, [&](int64_t first_panel, int64_t past_panel) {
    for (int64_t panel = first_panel; panel < past_panel; ++panel) {
      pack_b_panel<TB, kWidth, kDepth, kCorrection>(b, n, k, groups, panel,
                                                    b_packed.data() + panel * panel_size,
                                                    correction.data() + panel * kWidth);
    }
  });  // parallel_for returns when every panel is packed: B is ready before any multiply
  parallel_for(chunks, grain, [&](int64_t first_chunk, int64_t past_chunk) {
    std::vector<TA> a_packed(kChunkRows * groups * kDepth);
    for (int64_t chunk = first_chunk; chunk < past_chunk; ++chunk) {
      const int64_t first = chunk * kChunkRows;
      const int64_t rows = m - first < kChunkRows ? m - first : kChunkRows;
      pack_a_rows<TA, kDepth>(a + first * k, rows, k, groups, convert, a_packed.data());
      multiply(a_packed.data(), rows, c + first * n, b_packed.data(), correction.data());
    }
  });
}

// VNNI: A + 128 as u8, B as s8, and the correction 128 sum_p B(j, p) that takes the + 128 back.
void gemm_vnni(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k) {
  const int64_t groups = (k + kVnniDepth - 1) / kVnniDepth;
  const auto plus_128 = [](int8_t v) { return static_cast<uint8_t>(v + 128); };
  packed_product<uint8_t, int8_t, kVnniWidth, kVnniDepth, 128>(
      a, b, c, m, n, k, plus_128,
      [&](const uint8_t* rows_a, int64_t rows, int32_t* rows_c, const int8_t* b_packed,
          const int32_t* correction) {
        gemm_rows_vnni(rows_a, rows, b_packed, correction, n, groups, rows_c, n);
      });
}

// AVX2: both widened to i16; no correction.
void gemm_avx2(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k) {
  const int64_t groups = (k + kAvx2Depth - 1) / kAvx2Depth;
  const auto widen = [](int8_t v) { return static_cast<int16_t>(v); };
  packed_product<int16_t, int16_t, kAvx2Width, kAvx2Depth, 0>(
      a, b, c, m, n, k, widen,
      [&](const int16_t* rows_a, int64_t rows, int32_t* rows_c, const int16_t* b_packed, const int32_t*) {
        gemm_rows_avx2(rows_a, rows, b_packed, n, groups, rows_c, n);
      });
}

}  // namespace

bool isa_supported(Isa isa) {
  return isa == Isa::avx512_vnni ? cpu_has_avx512_vnni() : cpu_has_avx2_fma();
}

Isa best_isa() { return cpu_has_avx512_vnni() ? Isa::avx512_vnni : Isa::avx2; }

const char* isa_name(Isa isa) { return isa == Isa::avx512_vnni ? "AVX-512 VNNI" : "AVX2"; }

void gemm(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k, Isa isa) {
  TG_CHECK(isa_supported(isa), "int8 gemm: this CPU has no ", isa_name(isa));
  if (m == 0 || n == 0) return;
  if (isa == Isa::avx512_vnni) {
    gemm_vnni(a, b, c, m, n, k);
  } else {
    gemm_avx2(a, b, c, m, n, k);
  }
}

void quantize_rows(const float* x, int64_t rows, int64_t cols, double fixed_scale, int8_t* q,
                   float* scale) {
  const bool per_row = fixed_scale <= 0;  // as the plain loop decides (a tiny scale may round to 0.0f)
  const float fixed = static_cast<float>(fixed_scale);
  parallel_for(rows, grain_for(cols, kParallelInt8Elements), [&](int64_t first, int64_t past) {
    for (int64_t r = first; r < past; ++r) {
      scale[r] = quantize_row_avx2(x + r * cols, cols, per_row, fixed, q + r * cols);
    }
  });
}

void dequantize_product(const int32_t* acc, int64_t m, int64_t n, const float* row_scale,
                        const float* col_scale, const float* bias, float* out) {
  parallel_for(m, grain_for(n, kParallelInt8Elements), [&](int64_t first, int64_t past) {
    for (int64_t i = first; i < past; ++i) {
      dequantize_row_avx2(acc + i * n, n, row_scale[i], col_scale, bias, out + i * n);
    }
  });
}

}  // namespace tg::cpu::int8
