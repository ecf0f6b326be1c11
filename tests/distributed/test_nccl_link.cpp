// The NCCL communicator is compiled and linked with the CUDA backend, MPI and NCCL; it cannot run
// here (no GPU), so this only proves that the program links against NCCL (distributed/nccl_communicator.h).
#if defined(TAPEGRAD_HAVE_NCCL)
#include <catch2/catch.hpp>

#include <functional>

#include "tapegrad/distributed/nccl_communicator.h"

TEST_CASE("nccl: the GPU communicator links (untested on hardware)", "[dist]") {
  const std::function<void(tg::dist::Communicator&)> join = [](tg::dist::Communicator& bootstrap) {
    tg::dist::NcclCommunicator gpus(bootstrap, 0);
    gpus.enqueue_allreduce(nullptr, 0);
  };
  REQUIRE(join);
}
#endif
