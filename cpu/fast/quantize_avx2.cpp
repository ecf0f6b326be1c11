// The int8 kernels in AVX2 (layouts and contracts in cpu/fast/quantize_kernels.h): the product on CPUs
// without AVX-512 VNNI, and one row of quantize_rows / dequantize_product on every AVX2 CPU. This
// file alone is compiled with -mavx2 -ffp-contract=off (CMakeLists.txt): no FMA, and no fusing of
// a * b + c, since the f32 results must equal the plain loops' of cpu/quantize.cpp bit for
// bit. It includes only <immintrin.h> and declarations (see cpu/fast/attention_tiles_avx2.cpp).
//
// The product: A and B were sign-extended to i16. vpmaddwd (_mm256_madd_epi16) multiplies 16
// i16 pairs and adds adjacent products into 8 i32 lanes: |(-128)(-128) + (-128)(-128)| = 2^15,
// exact. (vpmaddubsw, the u8 x s8 instruction, adds into *saturating* i16: 255 x 127 x 2
// overflows, so it cannot be used with full-range values.) C is cut into blocks of up to 6 rows x
// 2 vectors (16 columns) in 12 of the 16 registers; per group of 2 p, one load of each B vector,
// one broadcast of each row's 2 values of A, and a madd + add per (row, vector).
//
// Rounding: _mm256_cvtps_epi32 rounds by the MXCSR mode (to nearest, ties to even, by default)
// as std::nearbyint does by the current mode, so the two agree in any mode.
#if defined(__x86_64__)
#include <immintrin.h>

#include "tapegrad/cpu/fast/quantize_kernels.h"  // declarations only

namespace tg::cpu::int8 {
namespace {

// The largest block of the product: 12 accumulators, 2 vectors of B, the broadcast and a product
// fill the 16 registers (madd_accumulate keeps them there).
constexpr int kRows = 6, kVectors = 2;

// acc += _mm256_madd_epi16(a, b), written as two instructions because GCC 12 compiles the
// intrinsics, on an array of accumulators, with a register copy after every add (acc into a
// scratch register and back): a third more instructions in the inner loop, and about 40% of the
// block's speed. The asm keeps each accumulator in its own register ("+x": read and written in
// place; "=&x": a scratch register for the product).
inline void madd_accumulate(__m256i& acc, __m256i a, __m256i b) {
  __m256i product;
  asm("vpmaddwd %3, %2, %1\n\tvpaddd %1, %0, %0" : "+x"(acc), "=&x"(product) : "x"(a), "x"(b));
}

// All bits set in the lanes below `count` (0..8), as maskload / maskstore want.
__m256i lanes_below(int64_t count) {
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), lane);
}

template <int kBlockRows, int kBlockVectors>
void block(const int16_t* a, int64_t lda, const int16_t* b, int64_t panel_stride, int64_t groups,
           int32_t* c, int64_t ldc, __m256i last) {
  __m256i acc[kBlockRows][kBlockVectors];
#pragma GCC unroll 6
  for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) acc[i][v] = _mm256_setzero_si256();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i b_vec[kBlockVectors];
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) {
      b_vec[v] = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(b + v * panel_stride + g * (kAvx2Depth * kAvx2Width)));
    }
#pragma GCC unroll 6
    for (int i = 0; i < kBlockRows; ++i) {
      int pair;  // row i's 2 values of this group, in every lane
      __builtin_memcpy(&pair, a + i * lda + g * kAvx2Depth, sizeof pair);
      const __m256i a_vec = _mm256_set1_epi32(pair);
#pragma GCC unroll 2
      for (int v = 0; v < kBlockVectors; ++v) {
        madd_accumulate(acc[i][v], a_vec, b_vec[v]);
      }
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) {
      int* out = reinterpret_cast<int*>(c + i * ldc + v * kAvx2Width);
      if (v == kBlockVectors - 1) {
        _mm256_maskstore_epi32(out, last, acc[i][v]);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), acc[i][v]);
      }
    }
  }
}

using BlockFn = void (*)(const int16_t*, int64_t, const int16_t*, int64_t, int64_t, int32_t*,
                         int64_t, __m256i);

// block<rows, vectors> for rows in 1..6 and vectors in 1..2, picked at run time.
template <int kBlockRows>
constexpr BlockFn kRowOfBlocks[kVectors] = {&block<kBlockRows, 1>, &block<kBlockRows, 2>};
BlockFn pick_block(int64_t rows, int64_t vectors) {
  switch (rows) {
    case 1: return kRowOfBlocks<1>[vectors - 1];
    case 2: return kRowOfBlocks<2>[vectors - 1];
    case 3: return kRowOfBlocks<3>[vectors - 1];
    case 4: return kRowOfBlocks<4>[vectors - 1];
    case 5: return kRowOfBlocks<5>[vectors - 1];
    default: return kRowOfBlocks<6>[vectors - 1];
  }
}

// The 7-bit product's largest block: 10 accumulators, 2 vectors of B, the broadcast, the pair
// sums and the vector of ones in 15 of the 16 registers.
constexpr int kBytesRows = 5, kBytesVectors = 2;

// acc += the four u8 x s8 products of each i32 lane: vpmaddubsw (exact on 7-bit a, see
// cpu/fast/quantize_kernels.h), vpmaddwd by `ones`, vpaddd; in asm for the reason of
// madd_accumulate.
inline void dot4_accumulate_avx2(__m256i& acc, __m256i a_u8, __m256i b_s8, __m256i ones) {
  __m256i pairs;
  asm("vpmaddubsw %3, %2, %1\n\tvpmaddwd %4, %1, %1\n\tvpaddd %1, %0, %0"
      : "+x"(acc), "=&x"(pairs)
      : "x"(a_u8), "x"(b_s8), "x"(ones));
}

// Row i's 8 sums of C, less the correction, at column `column` of dest (ProductRows): i32, or
// rescaled to f32 as dequantize_row_avx2 does (col and shift loaded once per vector), with a
// non-temporal store when `stream`. Only a vector that may stick out past column n is stored
// masked (vpmaskmov stores are slow on some CPUs).
inline void store_sums(const ProductRows& dest, int64_t i, int64_t column, __m256i sums,
                       __m256 col, __m256 shift, bool masked, __m256i lanes, bool stream) {
  if (dest.out == nullptr) {
    int32_t* to = dest.c + i * dest.ldc + column;
    if (masked) return _mm256_maskstore_epi32(reinterpret_cast<int*>(to), lanes, sums);
    return _mm256_storeu_si256(reinterpret_cast<__m256i*>(to), sums);
  }
  const __m256 row = _mm256_set1_ps(dest.row_scale[i]);
  __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), row), col);
  if (dest.shift) scaled = _mm256_add_ps(scaled, shift);  // (no + 0: it would turn -0 into +0)
  float* to = dest.out + i * dest.ldo + column;
  if (stream) return _mm256_stream_ps(to, scaled);
  if (masked) return _mm256_maskstore_ps(to, lanes, scaled);
  _mm256_storeu_ps(to, scaled);
}

// Row i's sums of a block, less the correction, stored (store_sums) at dest's rows row0 + i,
// columns col0 + 8 v, a row at a time. A block of two whole vectors is a whole line of each row
// (col0 is a multiple of 16), streamed where dest.stream_out. Inlined, so that the accumulators
// stay in registers.
template <int kBlockRows, int kBlockVectors>
__attribute__((always_inline)) inline void store_block(
    const __m256i (&acc)[kBlockRows][kBlockVectors], const int32_t* correction,
    const ProductRows& dest, int64_t row0, int64_t col0, __m256i last) {
  const bool whole_lines =
      kBlockVectors == 2 && _mm256_movemask_ps(_mm256_castsi256_ps(last)) == 0xFF;
  const bool stream = dest.stream_out && whole_lines;
  __m256i correct[kBlockVectors], lanes[kBlockVectors];
  __m256 col[kBlockVectors], shift[kBlockVectors];
#pragma GCC unroll 2
  for (int v = 0; v < kBlockVectors; ++v) {
    correct[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(correction + v * 8));
    lanes[v] = v == kBlockVectors - 1 ? last : _mm256_set1_epi32(-1);
    const int64_t column = col0 + v * kAvx2BytesWidth;
    col[v] = dest.out ? _mm256_maskload_ps(dest.col_scale + column, lanes[v]) : _mm256_setzero_ps();
    shift[v] = dest.shift ? _mm256_maskload_ps(dest.shift + column, lanes[v]) : _mm256_setzero_ps();
  }
#pragma GCC unroll 5
  for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) {
      const __m256i sums = _mm256_sub_epi32(acc[i][v], correct[v]);
      store_sums(dest, row0 + i, col0 + v * kAvx2BytesWidth, sums, col[v], shift[v],
                 v == kBlockVectors - 1, lanes[v], stream);
    }
  }
}

// Row i's 4 bytes of group g, in every lane.
inline __m256i broadcast_group(const uint8_t* a, int64_t lda, int i, int64_t g) {
  int word;
  __builtin_memcpy(&word, a + i * lda + g * kAvx2BytesDepth, sizeof word);
  return _mm256_set1_epi32(word);
}

// Vector v of B's group g (8 columns x 4 p).
inline __m256i load_group(const int8_t* b, int64_t panel_stride, int v, int64_t g) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(
      b + v * panel_stride + g * (kAvx2BytesDepth * kAvx2BytesWidth)));
}

// One block of the 7-bit product: rows x vectors of C over the whole depth, less the correction.
template <int kBlockRows, int kBlockVectors>
void block_bytes(const uint8_t* a, int64_t lda, const int8_t* b, int64_t panel_stride,
                 int64_t groups, const int32_t* correction, const ProductRows& dest, int64_t row0,
                 int64_t col0, __m256i last) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i acc[kBlockRows][kBlockVectors];
#pragma GCC unroll 5
  for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) acc[i][v] = _mm256_setzero_si256();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m256i b_vec[kBlockVectors];
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) b_vec[v] = load_group(b, panel_stride, v, g);
#pragma GCC unroll 5
    for (int i = 0; i < kBlockRows; ++i) {
      const __m256i a_vec = broadcast_group(a, lda, i, g);
#pragma GCC unroll 2
      for (int v = 0; v < kBlockVectors; ++v) {
        dot4_accumulate_avx2(acc[i][v], a_vec, b_vec[v], ones);
      }
    }
  }
  store_block(acc, correction, dest, row0, col0, last);
}

// The 7-bit x 7-bit product's largest block: 8 accumulators, 2 groups of 2 vectors of B, the two
// groups' broadcasts and two products in the 16 registers (the vector of ones is read from memory).
constexpr int kPairRows = 4, kPairVectors = 2;

// acc += the eight u8 x s8 products of each i32 lane over two groups, with one vpmaddwd where
// dot4_accumulate_avx2 takes two: a vpmaddubsw a group, their i16 sums added with vpaddw, then
// vpmaddwd by `ones` and vpaddd. Exact on 7-bit B (cpu/fast/quantize_kernels.h): each vpmaddubsw
// sum is within 127 * 64 * 2 = 16256 of 0, so two of them are within 32512 and fit an i16.
inline void dot8_accumulate_avx2(__m256i& acc, __m256i a0, __m256i a1, __m256i b0, __m256i b1,
                                 const __m256i& ones) {
  __m256i pairs0, pairs1;
  asm("vpmaddubsw %5, %3, %1\n\tvpmaddubsw %6, %4, %2\n\tvpaddw %2, %1, %1\n\t"
      "vpmaddwd %7, %1, %1\n\tvpaddd %1, %0, %0"
      : "+x"(acc), "=&x"(pairs0), "=&x"(pairs1)
      : "x"(a0), "x"(a1), "x"(b0), "x"(b1), "m"(ones));
}

// One block of the 7-bit x 7-bit product: groups two at a time (dot8_accumulate_avx2), an odd
// last one alone (dot4_accumulate_avx2). Stored as block_bytes stores.
template <int kBlockRows, int kBlockVectors>
void block_pairs(const uint8_t* a, int64_t lda, const int8_t* b, int64_t panel_stride,
                 int64_t groups, const int32_t* correction, const ProductRows& dest, int64_t row0,
                 int64_t col0, __m256i last) {
  alignas(32) static const int16_t ones_i16[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
  const __m256i& ones = *reinterpret_cast<const __m256i*>(ones_i16);
  __m256i acc[kBlockRows][kBlockVectors];
#pragma GCC unroll 4
  for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) acc[i][v] = _mm256_setzero_si256();
  }
  int64_t g = 0;
  for (; g + 2 <= groups; g += 2) {
    __m256i b_first[kBlockVectors], b_second[kBlockVectors];
#pragma GCC unroll 2
    for (int v = 0; v < kBlockVectors; ++v) {
      b_first[v] = load_group(b, panel_stride, v, g);
      b_second[v] = load_group(b, panel_stride, v, g + 1);
    }
#pragma GCC unroll 4
    for (int i = 0; i < kBlockRows; ++i) {
      const __m256i a_first = broadcast_group(a, lda, i, g);
      const __m256i a_second = broadcast_group(a, lda, i, g + 1);
#pragma GCC unroll 2
      for (int v = 0; v < kBlockVectors; ++v) {
        dot8_accumulate_avx2(acc[i][v], a_first, a_second, b_first[v], b_second[v], ones);
      }
    }
  }
  if (g < groups) {
#pragma GCC unroll 4
    for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 2
      for (int v = 0; v < kBlockVectors; ++v) {
        dot4_accumulate_avx2(acc[i][v], broadcast_group(a, lda, i, g),
                             load_group(b, panel_stride, v, g), ones);
      }
    }
  }
  store_block(acc, correction, dest, row0, col0, last);
}

using BytesBlockFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t,
                              const int32_t*, const ProductRows&, int64_t, int64_t, __m256i);

// block_bytes<rows, vectors> for rows in 1..5 and block_pairs<rows, vectors> for rows in 1..4,
// vectors in 1..2, picked at run time.
template <int kBlockRows>
constexpr BytesBlockFn kRowOfBytesBlocks[kBytesVectors] = {&block_bytes<kBlockRows, 1>,
                                                           &block_bytes<kBlockRows, 2>};
template <int kBlockRows>
constexpr BytesBlockFn kRowOfPairBlocks[kPairVectors] = {&block_pairs<kBlockRows, 1>,
                                                         &block_pairs<kBlockRows, 2>};
BytesBlockFn pick_bytes_block(int64_t rows, int64_t vectors, bool seven_bit_b) {
  if (seven_bit_b) {
    switch (rows) {
      case 1: return kRowOfPairBlocks<1>[vectors - 1];
      case 2: return kRowOfPairBlocks<2>[vectors - 1];
      case 3: return kRowOfPairBlocks<3>[vectors - 1];
      default: return kRowOfPairBlocks<4>[vectors - 1];
    }
  }
  switch (rows) {
    case 1: return kRowOfBytesBlocks<1>[vectors - 1];
    case 2: return kRowOfBytesBlocks<2>[vectors - 1];
    case 3: return kRowOfBytesBlocks<3>[vectors - 1];
    case 4: return kRowOfBytesBlocks<4>[vectors - 1];
    default: return kRowOfBytesBlocks<5>[vectors - 1];
  }
}

// The largest of the eight lanes.
float max_of_lanes(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

// round(clamp(x (1 / scale))) of the plain loop, eight lanes (`inverse`: 1 / scale, rounded once):
// NaN -> 0, +-inf and beyond -> +-levels.
__m256i quantize_lanes(__m256 x, __m256 inverse, __m256 levels) {
  const __m256 scaled = _mm256_mul_ps(x, inverse);
  const __m256 is_number = _mm256_cmp_ps(scaled, scaled, _CMP_ORD_Q);
  const __m256 below = _mm256_sub_ps(_mm256_setzero_ps(), levels);
  const __m256 clamped = _mm256_min_ps(_mm256_max_ps(scaled, below), levels);
  return _mm256_cvtps_epi32(_mm256_and_ps(clamped, is_number));  // NaN: all bits 0, +0.0
}

// The same for one element, as the plain loop writes it.
int8_t quantize_one(float x, float inverse, float levels) {
  const float scaled = x * inverse;
  if (scaled != scaled) return 0;
  const float clamped = scaled < -levels ? -levels : scaled > levels ? levels : scaled;
  return static_cast<int8_t>(_mm_cvtss_si32(_mm_set_ss(clamped)));  // nearest, ties to even
}

}  // namespace

void gemm_rows_avx2(const int16_t* a, int64_t rows, const int16_t* b, int64_t n, int64_t groups,
                    int32_t* c, int64_t ldc) {
  const int64_t panels = (n + kAvx2Width - 1) / kAvx2Width;
  const int64_t panel_stride = groups * kAvx2Depth * kAvx2Width;  // i16 of B per panel
  const int64_t lda = groups * kAvx2Depth;
  const int64_t tail = n - (panels - 1) * kAvx2Width;  // columns in the last panel, 1..8
  for (int64_t p0 = 0; p0 < panels; p0 += kVectors) {
    const int64_t vectors = panels - p0 < kVectors ? panels - p0 : kVectors;
    const __m256i last = lanes_below(p0 + vectors == panels ? tail : kAvx2Width);
    const int16_t* b_block = b + p0 * panel_stride;
    for (int64_t i0 = 0; i0 < rows; i0 += kRows) {
      const int64_t block_rows = rows - i0 < kRows ? rows - i0 : kRows;
      pick_block(block_rows, vectors)(a + i0 * lda, lda, b_block, panel_stride, groups,
                                      c + i0 * ldc + p0 * kAvx2Width, ldc, last);
    }
  }
}

void gemm_rows_avx2_bytes(const uint8_t* a, int64_t rows, const int8_t* b,
                          const int32_t* correction, int64_t n, int64_t groups, bool seven_bit_b,
                          const ProductRows& dest) {
  static_assert(kPairVectors == kBytesVectors, "both kernels step over the panels alike");
  const int64_t rows_per_block = seven_bit_b ? kPairRows : kBytesRows;
  const int64_t panels = (n + kAvx2BytesWidth - 1) / kAvx2BytesWidth;
  const int64_t panel_stride = groups * kAvx2BytesDepth * kAvx2BytesWidth;  // bytes of B a panel
  const int64_t lda = groups * kAvx2BytesDepth;
  const int64_t tail = n - (panels - 1) * kAvx2BytesWidth;  // columns in the last panel, 1..8
  for (int64_t p0 = 0; p0 < panels; p0 += kBytesVectors) {
    const int64_t vectors = panels - p0 < kBytesVectors ? panels - p0 : kBytesVectors;
    const __m256i last = lanes_below(p0 + vectors == panels ? tail : kAvx2BytesWidth);
    const int8_t* b_block = b + p0 * panel_stride;
    for (int64_t i0 = 0; i0 < rows; i0 += rows_per_block) {
      const int64_t block_rows = rows - i0 < rows_per_block ? rows - i0 : rows_per_block;
      const BytesBlockFn block = pick_bytes_block(block_rows, vectors, seven_bit_b);
      block(a + i0 * lda, lda, b_block, panel_stride, groups, correction + p0 * kAvx2BytesWidth,
            dest, i0, p0 * kAvx2BytesWidth, last);
    }
  }
  if (dest.stream_out) _mm_sfence();  // the streamed lines reach memory before the rows are read
}

float quantize_row_avx2(const float* row, int64_t cols, bool per_row, float fixed_scale,
                        float levels, uint8_t offset, uint8_t* out) {
  float scale = fixed_scale;
  if (per_row) {  // max |x| over the finite entries, in four running maxima (one is latency bound)
    const __m256 sign = _mm256_set1_ps(-0.0f), infinity = _mm256_set1_ps(__builtin_inff());
    const auto finite_magnitude = [&](const float* at) {
      const __m256 magnitude = _mm256_andnot_ps(sign, _mm256_loadu_ps(at));
      return _mm256_and_ps(magnitude, _mm256_cmp_ps(magnitude, infinity, _CMP_LT_OQ));  // NaN: 0
    };
    __m256 largest[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                         _mm256_setzero_ps()};
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32) {
#pragma GCC unroll 4
      for (int u = 0; u < 4; ++u) largest[u] = _mm256_max_ps(largest[u], finite_magnitude(row + c + 8 * u));
    }
    for (; c + 8 <= cols; c += 8) largest[0] = _mm256_max_ps(largest[0], finite_magnitude(row + c));
    float row_largest = max_of_lanes(_mm256_max_ps(_mm256_max_ps(largest[0], largest[1]),
                                                   _mm256_max_ps(largest[2], largest[3])));
    for (; c < cols; ++c) {
      const float magnitude = __builtin_fabsf(row[c]);
      if (magnitude < __builtin_inff() && magnitude > row_largest) row_largest = magnitude;
    }
    const float per_row_scale = row_largest / levels;  // at least 2^-126, as the plain loop's
    scale = row_largest > 0 ? (per_row_scale > 0x1p-126f ? per_row_scale : 0x1p-126f) : 1.0f;
  }
  const float inverse = 1.0f / scale;  // a product per entry, not a quotient (ops/quantize.h)
  const __m256 inverse_vec = _mm256_set1_ps(inverse), levels_vec = _mm256_set1_ps(levels);
  const __m256i offset_bytes = _mm256_set1_epi8(static_cast<char>(offset));
  // 32 at a time: four vectors of i32 narrowed to 32 bytes. The two packs work within 128-bit
  // halves, which leaves the dwords in the order 0 4 1 5 2 6 3 7; the permute puts them back.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  int64_t c = 0;
  for (; c + 32 <= cols; c += 32) {
    const __m256i q0 = quantize_lanes(_mm256_loadu_ps(row + c), inverse_vec, levels_vec);
    const __m256i q1 = quantize_lanes(_mm256_loadu_ps(row + c + 8), inverse_vec, levels_vec);
    const __m256i q2 = quantize_lanes(_mm256_loadu_ps(row + c + 16), inverse_vec, levels_vec);
    const __m256i q3 = quantize_lanes(_mm256_loadu_ps(row + c + 24), inverse_vec, levels_vec);
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
    const __m256i ordered = _mm256_permutevar8x32_epi32(bytes, order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c), _mm256_add_epi8(ordered, offset_bytes));
  }
  for (; c < cols; ++c) out[c] = static_cast<uint8_t>(quantize_one(row[c], inverse, levels) + offset);
  return scale;
}

void dequantize_row_avx2(const int32_t* acc, int64_t n, float row_scale, const float* col_scale,
                         const float* shift, float* out) {
  const __m256 row_vec = _mm256_set1_ps(row_scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 value = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc + j)));
    __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(value, row_vec), _mm256_loadu_ps(col_scale + j));
    if (shift) scaled = _mm256_add_ps(scaled, _mm256_loadu_ps(shift + j));
    _mm256_storeu_ps(out + j, scaled);
  }
  for (; j < n; ++j) {
    const float scaled = (static_cast<float>(acc[j]) * row_scale) * col_scale[j];
    out[j] = shift ? scaled + shift[j] : scaled;
  }
}

}  // namespace tg::cpu::int8

#else  // not x86-64: never called (cpu::fast_paths_enabled() is false), defined for the linker
#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/quantize_kernels.h"

namespace tg::cpu::int8 {
void gemm_rows_avx2(const int16_t*, int64_t, const int16_t*, int64_t, int64_t, int32_t*, int64_t) {
  fail("gemm_rows_avx2: not an x86-64 build");
}
void gemm_rows_avx2_bytes(const uint8_t*, int64_t, const int8_t*, const int32_t*, int64_t, int64_t,
                          bool, const ProductRows&) {
  fail("gemm_rows_avx2_bytes: not an x86-64 build");
}
float quantize_row_avx2(const float*, int64_t, bool, float, float, uint8_t, uint8_t*) {
  fail("quantize_row_avx2: not an x86-64 build");
}
void dequantize_row_avx2(const int32_t*, int64_t, float, const float*, const float*, float*) {
  fail("dequantize_row_avx2: not an x86-64 build");
}
}  // namespace tg::cpu::int8
#endif
