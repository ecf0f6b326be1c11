#pragma once
// Collectives on GPU memory with NCCL, for data-parallel training on CUDA devices (one rank a GPU).
// Built only with the CUDA backend, MPI and NCCL (CMake finds libnccl in the CUDA toolkit), and
// linked only into the command line over the real CUDA backend.
//
// Used by `tapegrad train --device cuda` under mpirun: distributed/nccl_reducer.cpp sums each
// bucket of gradients with enqueue_allreduce (see docs/distributed.md).
//
// NEVER RUN HERE: these machines have no GPU, so this file and distributed/nccl_reducer.cpp are
// compiled and linked but have not run. What is tested without a GPU is everything around the NCCL
// call: the device buckets (packing, reduction over the ranks, 1/N scaling, dtypes, missing
// gradients) with the host-staged reducer on the emulated CUDA device
// (tests/cuda/test_cuda_gradient_sync.cpp and the MPI run of the emulated command line).
// scripts/gpu-check.sh runs `mpirun -np 1` through NCCL on a GPU machine when it has mpirun and
// libnccl.
//
// The NCCL communicator is bootstrapped over a host communicator: rank 0 makes the unique id and
// broadcasts it; every rank then joins with its rank and the job's size. Its one collective, the
// gradient sum, takes a device pointer (Tensor::data() of a contiguous CUDA tensor: handed to
// NCCL, never dereferenced here) and is enqueued on the stream the CUDA backend launches all its
// work on, the legacy default stream (cuda/device_code.h launch(), cuBLAS without a stream of its
// own, cudaMemcpy), so it runs after the kernels queued before it and before those queued after it.
#include <cstdint>

#include "tapegrad/distributed/communicator.h"

namespace tg::dist {

class NcclCommunicator {
 public:
  // Binds this rank to CUDA device `device` and joins the NCCL communicator of `bootstrap`'s ranks.
  NcclCommunicator(Communicator& bootstrap, int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // Non-blocking sum, in place: enqueued on the stream and returns at once. Kernels enqueued
  // afterwards on that stream (and the backend's copies to the host) see the sum.
  void enqueue_allreduce(float* device_data, int64_t count);

 private:
  void* comm_ = nullptr;  // ncclComm_t, kept opaque so that this header needs no NCCL
};

}  // namespace tg::dist
