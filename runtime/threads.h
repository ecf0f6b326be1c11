#pragma once
// The thread policy, written down once.
//
// How many threads. num_threads() is what set_num_threads(N) set or, before any call and after
// set_num_threads(0), the cores this process may actually use: the CPUs of its affinity mask
// (sched_getaffinity: taskset, cpusets, a container's --cpuset-cpus), capped by the CPU quota of
// its cgroup and the cgroup's ancestors rounded up (cgroup v2 cpu.max "150000 100000" is 2 CPUs;
// v1 cpu.cfs_quota_us / cpu.cfs_period_us), and at least 1. Not the machine's core count: a
// container given 2 CPUs of 64 would otherwise run 64 threads on 2 cores. No environment variable
// changes it (not OMP_NUM_THREADS: the pool is tapegrad's own): every command that computes takes
// --threads N, 0 for this default, and `tapegrad info` prints the count and where it came from.
//
// Who runs the work. One pool, tapegrad's own (runtime/thread_pool.h), where the calling thread works
// too. parallel_for cuts a loop into chunks, several a thread, which the caller and the workers
// claim one at a time from an atomic counter: a worker the OS has not run yet (another process
// holds its core) claims nothing and the caller takes its chunks, where a static schedule would
// wait for it at a barrier. Idle workers spin for 50 us, then sleep. What is split: elementwise
// ops, reductions, softmax, layer norm and the optimizer steps over elements or rows; copies and
// gathers over rows (cpu/kernels.h's in_pieces); attention over (batch item, run of query tiles);
// GEMM over batch items or blocks of rows or columns of C (cpu/fast/blas.cpp); the linear
// backward over blocks of rows; the int8 kernels over rows. Each result is computed by one thread
// in a fixed order, so the bits do not depend on the thread count, except the one-pass linear
// backward's dW and db, which add one partial sum a piece (cpu/fast/linear.cpp).
//
// Small ops stay on the calling thread. Every parallel loop has a work threshold, named beside
// the kernel, at or below which it runs inline: waking a thread costs microseconds, and commands
// made of many small ops (sample, gradcheck, a small model's training) would pay them on every op,
// and wait for a descheduled thread on a busy machine. Loops above it are cut into chunks of at
// least about half the threshold each (cpu::grain_for).
//   kParallelElements        2^15 elements         unary / binary ops (cpu/elementwise.cpp)
//   kParallelBytes           2^18 bytes written    copies, fills, row-wise binary ops, embedding
//                                                  gather and scatter (cpu/kernels.h)
//   kParallelSumElements     2^16 elements read    sum over a dim (cpu/reduce.cpp)
//   kParallelRowElements     2^15 elements         softmax, layer norm's rows (cpu/reduce.cpp)
//   kParallelSortElements    2^14 elements         argsort's lines (cpu/indexing.cpp; gather
//                                                  and scatter-add along a dim: kParallelBytes)
//   kParallelAdamElements    2^15 elements         the Adam / AdamW step (cpu/optim.cpp)
//   kParallelFlops           2^21 flops            GEMM, the linear backward (cpu/kernels.h)
//   kParallelAttentionFlops  2^21 flops            attention forward and backward
//                                                  (cpu/fast/attention.cpp)
//   kParallelInt8Elements    2^14 elements         int8 quantize and dequantize rows, the plain
//                                                  int8 product (cpu/quantize.cpp, cpu/fast/)
//   kParallelInt8Work        2^20 multiply-adds    the packed int8 product (cpu/fast/quantize.cpp)
// A loop called from inside another's body runs inline too, as does one called from a second
// user thread while the first has the pool (both correct, neither waits for the other).
//
// BLAS never gets the threads. OpenBLAS (the pthreads build) keeps a pool of its own, and two busy
// pools on the same cores slow each other down (docs/design-notes.md measured it).
// So each BLAS call (all of them go through cpu::blas_gemm) computes one block on the thread that
// makes it, and the pool splits C above kParallelFlops. Nothing switches OpenBLAS's thread count
// back and forth: pin_blas_to_one_thread() sets it to 1 once (cpu::blas_gemm calls it before its
// first product, set_num_threads too), and threads.cpp is the only file that declares
// openblas_set_num_threads.
#include <optional>
#include <string>
#include <string_view>

namespace tg {

// The most threads one may ask for: far more than any machine's cores, few enough that the
// pool's workers (started when a loop first needs them) never exhaust the process's threads.
inline constexpr int kMaxThreads = 1024;

void set_num_threads(int threads);  // 0: available_cores(); tg::Error outside [0, kMaxThreads]
int num_threads();                  // what set_num_threads set, else available_cores()

// Where num_threads() came from, for `tapegrad info` and `bench`: "--threads 3" after
// set_num_threads(3), else "the default: 4 CPUs in the affinity mask, cgroup CPU quota 2".
std::string describe_num_threads();

// The cores this process may use (read once, on first call): affinity mask and cgroup quota.
struct AvailableCores {
  int affinity_cpus = 1;            // CPUs in the sched_getaffinity mask
  std::optional<int> quota_cpus;    // the smallest cgroup CPU quota, rounded up; none: no quota
  int cores = 1;                    // cores_available(affinity_cpus, quota_cpus)
};
const AvailableCores& available_cores();

// The pure rules behind available_cores(), strings in and counts out (tested alone):
// cgroup v2's cpu.max, "<quota> <period>" in microseconds or "max <period>": ceil(quota /
// period) CPUs, none for "max" or text that is not two positive integers.
std::optional<int> cgroup_v2_quota_cpus(std::string_view cpu_max);
// cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us: the same, none for a quota of -1.
std::optional<int> cgroup_v1_quota_cpus(std::string_view quota_us, std::string_view period_us);
// The affinity count capped by the quota, in [1, kMaxThreads].
int cores_available(int affinity_cpus, std::optional<int> quota_cpus);

// Sets OpenBLAS to one thread the first time; later calls cost one atomic load. Thread-safe.
void pin_blas_to_one_thread();

}  // namespace tg
