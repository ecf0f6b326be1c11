#pragma once
// The fast paths of the CPU int8 kernels (CpuKernels::quantize_rows, gemm_i8, dequantize_product;
// their plain loops in cpu/quantize.cpp stay the readable reference). CpuKernels takes these
// where cpu::fast_paths_enabled() (cpu/features.h); every result equals the plain loop's bit
// for bit.
//
// The product C [m, n] i32 = A [m, k] i8 B [n, k]^T i8 runs on the best instruction set the CPU
// offers: AVX-512 VNNI (vpdpbusd: 64 multiply-adds of bytes per instruction), else AVX2 (vpmaddwd
// on values widened to i16: 16 per instruction). B, a Linear's weight, is packed on every call
// into the kernel's layout (cpu/fast/quantize_kernels.h) by the threads together, O(n k) against the product's O(m n k); each
// thread packs its own blocks of A's rows and computes those rows of C (the thread pool).
#include <cstdint>

namespace tg::cpu::int8 {

enum class Isa { avx2, avx512_vnni };

Isa best_isa();                 // avx512_vnni where the CPU has it, else avx2 (needs AVX2)
bool isa_supported(Isa isa);    // whether this CPU can run the kernel
const char* isa_name(Isa isa);  // "AVX2", "AVX-512 VNNI"

// c [m, n] = a [m, k] b [n, k]^T, all contiguous row-major; k <= kMaxInt8Depth. The CPU must
// support `isa`.
void gemm(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k, Isa isa);

// CpuKernels::quantize_rows and dequantize_product (autograd/kernels.h) on raw rows, in AVX2.
void quantize_rows(const float* x, int64_t rows, int64_t cols, double fixed_scale, int8_t* q,
                   float* scale);
void dequantize_product(const int32_t* acc, int64_t m, int64_t n, const float* row_scale,
                        const float* col_scale, const float* bias, float* out);

}  // namespace tg::cpu::int8
