#pragma once
// TEST HARNESS: an emulated CUDA device, never part of the library. It lets the CUDA backend's
// kernels (cuda/*.cu) compile unchanged with g++ (-x c++ -DTAPEGRAD_CUDA_EMULATION, which makes
// cuda/device_code.h include this header instead of <cuda_runtime.h> and <cublas_v2.h>) and run in
// the tests on a machine without a GPU, as the old `nvcc -deviceemu` did. It checks what a kernel
// computes, not how fast; numbers from it say nothing about the GPU.
//
//   emulated_device.h    what kernel code sees: qualifiers, threadIdx & co., __syncthreads, warp
//                        shuffles, atomics, device math
//   emulated_runtime.h   the runtime API subset (memory, copies, streams, events, properties,
//                        errors) and emulation::launch, which stands in for kernel<<<...>>>
//   emulated_cublas.h    the cuBLAS GEMM subset, on OpenBLAS
//
// How it runs a kernel:
//  - The grid's blocks run one after another, each to completion: that is why `__shared__` can be
//    `static` (one array per kernel, reused by every block) and the dynamic shared memory one buffer.
//  - Within a block, the threads run one after another on the launching OS thread, until one
//    reaches a barrier (__syncthreads, __syncwarp) or a shuffle: from then on each thread not yet
//    run is a fiber, a stack of its own on that same OS thread (emulated_fiber.h), and the threads
//    take turns, in id order: one that must wait switches to the next that can go on. So kernels
//    without barriers cost a loop of calls, and a barrier costs one user-space switch (~25 ns) per
//    thread. Threads before the first to synchronise have returned, and returned threads count as
//    arrived at later barriers, as on the hardware. threadIdx & co. are thread_local variables of
//    the launching thread, set at each switch. When every remaining thread waits at a barrier that
//    can never complete (divergent barriers), the launch fails with "deadlock" instead of hanging.
//  - Warps are the consecutive groups of 32 linear thread ids (x fastest, then y, then z); the last
//    may be partial. A shuffle is a barrier over the warp and an exchange buffer.
//  - Device memory is host memory from cudaMalloc (256-byte aligned, exactly the bytes asked, so
//    AddressSanitizer catches a kernel's overruns). Copies, memsets and cuBLAS check that their
//    device operands lie inside live allocations, to catch host/device pointer mix-ups.
//  - Everything is synchronous; streams and events only keep host time.
//  - A kernel that throws: the exception is caught on its thread (which then counts as returned, so
//    nothing deadlocks), the message goes to stderr, no further block starts, and the launch reports
//    cudaErrorLaunchFailure through cudaGetLastError (see emulated_runtime.h).
//
// Limits, which kernels must respect (all are also rules, or good practice, on a GPU):
//  - No thread may wait for another except through __syncthreads, __syncwarp and the shuffles
//    (no spinning on a flag another thread sets: a thread runs until it synchronises or returns,
//    so the spinner would never let the setter run). No block may wait for another.
//  - Between two barriers the threads run one at a time, in id order from the one that completed
//    the barrier: a missing barrier is caught when a thread reads what a later thread writes (the
//    usual tree reduction), but not always when it reads an earlier one's. The GPU will notice.
//  - A thread's stack is 256 KiB (a guard page below it faults on overflow). x86-64 only.
//  - Every non-returned thread of a warp takes part in each __syncwarp and shuffle, in the same
//    order; masks are not inspected. Reading a returned or absent lane yields the reader's value.
//  - A block has at most 1024 threads (x, y <= 1024, z <= 64); grid y and z at most 65535.
//  - Dynamic shared memory: 48 KiB, or up to 227 KiB after cudaFuncSetAttribute(kernel,
//    cudaFuncAttributeMaxDynamicSharedMemorySize, bytes). Static __shared__ is not counted.
//  - No dynamic parallelism (a kernel cannot launch), no cooperative groups, no inline PTX, no
//    warp votes (__ballot_sync & co.), no __constant__ memory, one device (device 0).
//  - Only the API declared in these headers exists; the rest of CUDA does not compile here.
#include "emulated_cublas.h"
#include "emulated_device.h"
#include "emulated_runtime.h"
