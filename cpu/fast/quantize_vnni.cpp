// The int8 product in AVX-512 VNNI (layouts in cpu/fast/quantize_kernels.h). This file alone is
// compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni (CMakeLists.txt), and
// cpu/fast/quantize.cpp calls it only where cpu::cpu_has_avx512_vnni(). As in
// cpu/fast/attention_tiles_avx2.cpp, it includes only <immintrin.h> and declarations, and its
// helpers have internal linkage, so that no code compiled for AVX-512 leaks into the baseline.
//
// vpdpbusd (_mm512_dpbusd_epi32) multiplies, in each of 16 i32 lanes, four unsigned bytes of one
// operand by four signed bytes of the other and adds the four products to the lane, with no
// saturation. Our A is signed, so it is packed as A + 128 in [0, 255]; every product is then
// (A + 128) B, and 128 sum_p B(j, p) is subtracted once per output. i32 arithmetic wraps, and the
// true result fits in i32 (k <= kMaxInt8Depth), so the result is exact even when the intermediate
// sums of (A + 128) B wrap: it equals the reference loop bit for bit.
//
// C is cut into blocks of up to 6 rows x 4 vectors (64 columns), each held in 24 of the 32
// registers over the whole depth: per group of 4 p, one load of each B vector, one broadcast of
// each row's 4 bytes of A, one vpdpbusd per (row, vector). The last vector of a row may stick out
// past column n: its store is masked (B was padded with zero columns, so it computed zeros there).
// The sums are stored as i32, or rescaled to f32 on the way out (ProductRows); for those f32
// results to equal the plain loop's, this file is compiled with -ffp-contract=off too.
#if defined(__x86_64__)
#include "tapegrad/cpu/fast/immintrin_avx512.h"  // <immintrin.h>, GCC bug 105593 silenced

#include "tapegrad/cpu/fast/quantize_kernels.h"  // declarations only

namespace tg::cpu::int8 {
namespace {

constexpr int kRows = 6, kVectors = 4;  // the largest block

// acc += the four u8 x s8 products of each lane: _mm512_dpbusd_epi32(acc, a, b), written as one
// instruction because GCC 12 compiles the intrinsic, on an array of accumulators, with two
// register copies around every vpdpbusd (acc into a scratch register and back): three instructions
// where one does, about a third of the block's speed. The asm keeps each accumulator in its own
// register ("+v": read and written in place).
inline void dot4_accumulate(__m512i& acc, __m512i a_u8, __m512i b_s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a_u8), "v"(b_s8));  // AT&T order: b, a, acc
}

// Row i's 16 sums of C, less the correction, at column `column` of dest (ProductRows): i32, or
// rescaled to f32 (col and shift: those columns' col_scale and shift, loaded once per vector).
inline void store_sums(const ProductRows& dest, int64_t i, int64_t column, __m512i sums,
                       __m512 col, __m512 shift, __mmask16 lanes) {
  if (dest.out == nullptr) return _mm512_mask_storeu_epi32(dest.c + i * dest.ldc + column, lanes, sums);
  __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), _mm512_set1_ps(dest.row_scale[i])), col);
  if (dest.shift) scaled = _mm512_add_ps(scaled, shift);  // (no + 0: it would turn -0 into +0)
  _mm512_mask_storeu_ps(dest.out + i * dest.ldo + column, lanes, scaled);
}

template <int kBlockRows, int kBlockVectors>
void block(const uint8_t* a, int64_t lda, const int8_t* b, int64_t panel_stride, int64_t groups,
           const int32_t* correction, const ProductRows& dest, int64_t row0, int64_t col0,
           __mmask16 last) {
  __m512i acc[kBlockRows][kBlockVectors];
#pragma GCC unroll 6
  for (int i = 0; i < kBlockRows; ++i) {
#pragma GCC unroll 4
    for (int v = 0; v < kBlockVectors; ++v) acc[i][v] = _mm512_setzero_si512();
  }
  for (int64_t g = 0; g < groups; ++g) {
    __m512i b_vec[kBlockVectors];
#pragma GCC unroll 4
    for (int v = 0; v < kBlockVectors; ++v) {
      b_vec[v] = _mm512_loadu_si512(b + v * panel_stride + g * (kVnniDepth * kVnniWidth));
    }
#pragma GCC unroll 6
    for (int i = 0; i < kBlockRows; ++i) {
      int word;  // row i's 4 bytes of this group, in every lane
      __builtin_memcpy(&word, a + i * lda + g * kVnniDepth, sizeof word);
      const __m512i a_vec = _mm512_set1_epi32(word);
#pragma GCC unroll 4
      for (int v = 0; v < kBlockVectors; ++v) dot4_accumulate(acc[i][v], a_vec, b_vec[v]);
    }
  }
#pragma GCC unroll 4
  for (int v = 0; v < kBlockVectors; ++v) {
    const __m512i correct = _mm512_loadu_si512(correction + v * kVnniWidth);
    const __mmask16 lanes = v == kBlockVectors - 1 ? last : __mmask16(0xFFFF);
    const int64_t column = col0 + v * kVnniWidth;
    __m512 col = _mm512_setzero_ps(), shift = _mm512_setzero_ps();
    if (dest.out) col = _mm512_maskz_loadu_ps(lanes, dest.col_scale + column);
    if (dest.shift) shift = _mm512_maskz_loadu_ps(lanes, dest.shift + column);
#pragma GCC unroll 6
    for (int i = 0; i < kBlockRows; ++i) {
      store_sums(dest, row0 + i, column, _mm512_sub_epi32(acc[i][v], correct), col, shift, lanes);
    }
  }
}

using BlockFn = void (*)(const uint8_t*, int64_t, const int8_t*, int64_t, int64_t, const int32_t*,
                         const ProductRows&, int64_t, int64_t, __mmask16);

// block<rows, vectors> for rows in 1..6 and vectors in 1..4, picked at run time.
template <int kBlockRows>
constexpr BlockFn kRowOfBlocks[kVectors] = {&block<kBlockRows, 1>, &block<kBlockRows, 2>,
                                            &block<kBlockRows, 3>, &block<kBlockRows, 4>};
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

}  // namespace

void gemm_rows_vnni(const uint8_t* a, int64_t rows, const int8_t* b, const int32_t* correction,
                    int64_t n, int64_t groups, const ProductRows& dest) {
  const int64_t panels = (n + kVnniWidth - 1) / kVnniWidth;
  const int64_t panel_stride = groups * kVnniDepth * kVnniWidth;  // bytes of B per panel
  const int64_t lda = groups * kVnniDepth;
  const int64_t tail = n - (panels - 1) * kVnniWidth;  // columns in the last panel, 1..16
  // Columns outer: the block's panels of B (4 x 16 KiB at k = 256) stay in L1 across the rows.
  for (int64_t p0 = 0; p0 < panels; p0 += kVectors) {
    const int64_t vectors = panels - p0 < kVectors ? panels - p0 : kVectors;
    const __mmask16 last = p0 + vectors == panels ? __mmask16((1u << tail) - 1) : __mmask16(0xFFFF);
    const int8_t* b_block = b + p0 * panel_stride;
    for (int64_t i0 = 0; i0 < rows; i0 += kRows) {
      const int64_t block_rows = rows - i0 < kRows ? rows - i0 : kRows;
      pick_block(block_rows, vectors)(a + i0 * lda, lda, b_block, panel_stride, groups,
                                      correction + p0 * kVnniWidth, dest, i0, p0 * kVnniWidth, last);
    }
  }
}

}  // namespace tg::cpu::int8

#else  // not x86-64: never called (cpu::cpu_has_avx512_vnni() is false), defined for the linker
#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/quantize_kernels.h"

namespace tg::cpu::int8 {
void gemm_rows_vnni(const uint8_t*, int64_t, const int8_t*, const int32_t*, int64_t, int64_t,
                    const ProductRows&) {
  fail("gemm_rows_vnni: not an x86-64 build");
}
}  // namespace tg::cpu::int8
#endif
