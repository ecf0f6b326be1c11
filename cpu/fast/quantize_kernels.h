#pragma once
// The vectorised int8 kernels behind cpu/fast/quantize.h, one instruction set per file:
//   cpu/fast/quantize_vnni.cpp  (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni)
//   cpu/fast/quantize_avx2.cpp  (compiled with -mavx2 -ffp-contract=off)
// Declarations only: those files include nothing else (see cpu/fast/attention_tiles_avx2.cpp for
// why). They work on operands that cpu/fast/quantize.cpp has packed; the layouts are written here.
//
// The products compute rows [0, rows) of C [rows, n] i32 (leading dimension ldc) from a packed
// block of A's rows and all of packed B. The depth k is cut into `groups` groups of kDepth (4 for
// VNNI, 2 for AVX2) consecutive p, zero-padded at the end; B's columns are cut into panels of
// kWidth (16 for VNNI, 8 for AVX2), zero-padded at the end:
//
//   A packed   a[i * groups * kDepth + g * kDepth + t]          = A(i, g kDepth + t)
//   B packed   b[((panel * groups + g) * kWidth + j) * kDepth + t] = B(panel kWidth + j, g kDepth + t)
//
// so one vector load of B gives, for kWidth columns, kDepth consecutive p each, and one 32-bit
// broadcast of A gives row i's same kDepth p in every lane.
#include <cstdint>

namespace tg::cpu::int8 {

// Where the u8 kernels below put rows [0, rows) of C: the i32 sums into c [rows, ldc]; or, when
// `out` is set, each sum rescaled as dequantize_row_avx2 rescales it, (float(C(i, j))
// row_scale[i]) col_scale[j] (+ shift[j] when shift is set), into out [rows, ldo] f32: the
// rescale while the sums are in registers, with no i32 row in memory. (No default member
// initializers: the type stays trivial, with no inline constructor that the AVX-512 file could
// emit for the baseline's callers; an aggregate initializer zeroes the members it leaves out.)
// stream_out: write out's rows with non-temporal stores (vmovntps), a whole 64-byte line at a
// time, which skips reading each line into the cache before it is written over (the caller sets
// it only where out is 64-byte aligned and ldo a multiple of 16, cpu/fast/quantize.cpp says when);
// the AVX2 7-bit kernel takes it, the others store as usual.
struct ProductRows {
  int32_t* c;
  int64_t ldc;
  const float* row_scale;
  const float* col_scale;
  const float* shift;
  float* out;
  int64_t ldo;
  bool stream_out;
};

// AVX-512 VNNI: A as u8 (A + 128, i.e. the byte with its top bit flipped), B as s8; one vpdpbusd
// adds four u8 x s8 products into each i32 lane. The + 128 is taken back at the store:
// C(i, j) = sum_p (A(i, p) + 128) B(j, p) - correction[j] with correction[j] = 128 sum_p B(j, p)
// (zero for padded columns; it holds a whole number of panels).
inline constexpr int kVnniDepth = 4, kVnniWidth = 16;
void gemm_rows_vnni(const uint8_t* a, int64_t rows, const int8_t* b, const int32_t* correction,
                    int64_t n, int64_t groups, const ProductRows& dest);

// AVX2: A and B sign-extended to i16; one vpmaddwd multiplies 16 pairs and adds each pair into
// an i32 lane (exact: |a b| <= 2^14, two of them < 2^31).
inline constexpr int kAvx2Depth = 2, kAvx2Width = 8;
void gemm_rows_avx2(const int16_t* a, int64_t rows, const int16_t* b, int64_t n, int64_t groups,
                    int32_t* c, int64_t ldc);

// AVX2 on 7-bit activations (every A(i, p) in [-64, 63]: quantized_linear's on this path, 63
// levels): A as u8 (A + 64, in [0, 127]), B as s8. vpmaddubsw multiplies 32 u8 x s8 byte pairs
// and adds each two neighbours into an i16 lane, *saturating* past +-32767: with u8 <= 127 the
// worst case, 127 (-128) + 127 (-128) = -32512, never does, so the i16 sums are exact (with
// full-range A, 255 (-128) 2 would). vpmaddwd by 1 adds the i16 lanes in pairs into i32: four
// products a lane, the layout of the VNNI kernel (depth 4), 8 columns a panel. The + 64 is taken
// back at the store: correction[j] = 64 sum_p B(j, p), as the VNNI kernel's.
// seven_bit_b: every B(j, p) is in [-64, 63] too (a Linear's weight quantized to 63 levels,
// Kernels::int8_weight_levels). Then each vpmaddubsw sum is within 127 (-64) 2 = -16256 of 0, two
// groups' sums are added in i16 (vpaddw, within 32512: exact) before one vpmaddwd, and the
// product takes three multiplies per eight products a lane where it took four. Same layouts.
inline constexpr int kAvx2BytesDepth = 4, kAvx2BytesWidth = 8;
void gemm_rows_avx2_bytes(const uint8_t* a, int64_t rows, const int8_t* b,
                          const int32_t* correction, int64_t n, int64_t groups, bool seven_bit_b,
                          const ProductRows& dest);

// One row of CpuKernels::quantize_rows (cpu/quantize.cpp), bit for bit: the row's own scale
// when per_row, else fixed_scale (the f32 rounding of the caller's, possibly 0), on `levels`
// steps each side (127 or 63, as a float); returns the scale. Each byte written is q + offset
// (mod 256): offset 0 gives the i8 row; 128 or 64 give a product's packed u8 row of A (above)
// straight from x, with no i8 row in between.
float quantize_row_avx2(const float* row, int64_t cols, bool per_row, float fixed_scale,
                        float levels, uint8_t offset, uint8_t* out);

// One row of CpuKernels::dequantize_product, bit for bit: out[j] = (float(acc[j]) row_scale)
// col_scale[j] (+ shift[j] when shift is not null).
void dequantize_row_avx2(const int32_t* acc, int64_t n, float row_scale, const float* col_scale,
                         const float* shift, float* out);

}  // namespace tg::cpu::int8
