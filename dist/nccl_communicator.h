#pragma once
// Collectives on GPU memory with NCCL, for data-parallel training on CUDA devices (one rank a GPU).
// Built only with the CUDA backend, MPI and NCCL (CMake finds libnccl in the CUDA toolkit).
//
// UNTESTED ON HARDWARE: this machine has no GPU, so this file is compiled and linked but has
// never run; `tapegrad train` does not use it yet (gradients of CUDA parameters are staged through
// host memory and reduced over MPI by dist/gradient_sync.cpp). See docs/distributed.md.
//
// The NCCL communicator is bootstrapped over a host communicator: rank 0 makes the unique id and
// broadcasts it; every rank then joins with its rank and the job's size. Buffers are device
// pointers (e.g. Tensor::data() of a contiguous CUDA tensor: handed to NCCL, never dereferenced
// here); each call is enqueued on the default stream and waits for it (simple, not overlapped).
#include <cstdint>

#include "tapegrad/dist/communicator.h"

namespace tg::dist {

class NcclCommunicator {
 public:
  // Binds this rank to CUDA device `device` and joins the NCCL communicator of `bootstrap`'s ranks.
  NcclCommunicator(Communicator& bootstrap, int device);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  void allreduce(float* device_data, int64_t count, Reduce op);
  void broadcast(void* device_bytes, int64_t size, int root);
  void barrier() { bootstrap_.barrier(); }

 private:
  Communicator& bootstrap_;
  void* comm_ = nullptr;  // ncclComm_t, kept opaque so that this header needs no NCCL
  int rank_ = 0, size_ = 1;
};

}  // namespace tg::dist
