#pragma once
// The thread policy, written down once.
//
// One pool does the parallel work: OpenMP's. set_num_threads(N) gives OpenMP N threads, and the
// CPU kernels split their own loops over them: elementwise ops, reductions, softmax and the
// optimizer steps above a size threshold, attention over (batch item, query tile), and GEMM over
// batch items or blocks of rows or columns of C (cpu/fast/blas.cpp). OpenBLAS always runs
// single-threaded: each BLAS call (all of them go through cpu::blas_gemm) computes one block on
// the thread that makes it, inside an OpenMP region or not.
//
// BLAS never gets the threads. OpenBLAS (the pthreads build) keeps a pool of its own, and
// libgomp's idle workers keep spinning for a while after each OpenMP region (its default wait
// policy): a GEMM on OpenBLAS's pool right after an elementwise or attention region on OpenMP's
// put three busy threads on two cores, and a training step measured 5x slower at 2 threads than
// at 1. Splitting C ourselves costs little, since only products above 2 MFLOP are split.
//
// Nothing switches OpenBLAS's thread count back and forth: pin_blas_to_one_thread() sets it to 1
// once (cpu::blas_gemm calls it before its first product, set_num_threads too), and this file is
// the only one that declares openblas_set_num_threads.
namespace tg {

// The most threads one may ask for: far more than any machine's cores, far fewer than the
// thousands at which the OpenMP runtime runs out of stack or aborts.
inline constexpr int kMaxThreads = 1024;

void set_num_threads(int threads);  // OpenMP's; 0: all cores; tg::Error outside [0, kMaxThreads]
int num_threads();                  // OpenMP's

// Sets OpenBLAS to one thread the first time; later calls cost one atomic load. Thread-safe.
void pin_blas_to_one_thread();

}  // namespace tg
