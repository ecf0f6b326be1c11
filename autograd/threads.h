#pragma once
// One knob for both thread pools: OpenMP (our loops) and OpenBLAS (GEMM).
namespace tg {

// The most threads one may ask for: far more than any machine's cores, far fewer than the
// thousands at which the OpenMP runtime runs out of stack or aborts.
inline constexpr int kMaxThreads = 1024;

void set_num_threads(int threads);  // 0: all cores; tg::Error outside [0, kMaxThreads]
int num_threads();

}  // namespace tg
