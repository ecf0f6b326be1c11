#pragma once
// One knob for both thread pools: OpenMP (our loops) and OpenBLAS (GEMM).
namespace tg {

void set_num_threads(int threads);  // <= 0: all cores
int num_threads();

}  // namespace tg
