#pragma once
// Between the launch (emulated_launch.cpp) and the block scheduler (emulated_block.cpp) of the
// emulated CUDA device (TEST HARNESS, see emulated_cuda.h).
#include "emulated_runtime.h"

namespace emulation::detail {

// Runs every block of the grid, one after another, with `shared` (shared_bytes of it) as each
// block's dynamic shared memory. False when a thread threw or a block deadlocked (the first
// failure is reported on stderr); no block starts after a failure. One call at a time.
bool run_grid(const KernelCall& call, dim3 grid, dim3 block, void* shared, size_t shared_bytes);

bool inside_kernel();  // whether the calling OS thread is running a kernel

}  // namespace emulation::detail
