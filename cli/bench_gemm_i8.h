#pragma once
// `tapegrad bench --workload gemm-i8`: the int8 product (ops/quantize.h) against the f32 one on
// the same shapes, on the CPU. Per shape, one row each: the f32 product x W^T through OpenBLAS;
// the int8 product (CpuKernels::gemm_i8) in each instruction set this CPU has and as the plain
// reference loop; and the whole Linear both ways (quantized_linear: quantize x, the product,
// rescale; against linear() in f32). Median ms, GOP/s (2 m n k per product) and the speedup over f32.
#include <cstdint>

namespace tg::cli {

struct GemmI8BenchOptions {
  int steps = 20;  // timed runs per row; the median is reported
  int warmup = 3;
  bool json = false;  // one JSON line per row instead of the table
};

// On the CPU, at the current thread count; returns the exit code.
int bench_gemm_i8(const GemmI8BenchOptions& options);

}  // namespace tg::cli
