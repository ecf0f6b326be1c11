#include "tapegrad/distributed/communicator.h"

#include <cstdlib>

#include "tapegrad/autograd/error.h"

namespace tg::dist {

#if defined(TAPEGRAD_HAVE_MPI)
std::unique_ptr<Communicator> make_mpi_communicator();  // distributed/mpi_communicator.cpp
#endif

namespace {
std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> communicator;
  return communicator;
}
}  // namespace

void LocalCommunicator::abort(int code) { std::_Exit(code); }

bool launched_by_mpi() {
  // Open MPI (mpirun), PMIx (Open MPI 5, Slurm), MPICH/Hydra and Slurm's srun set one of these.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

Communicator& world() {
  std::unique_ptr<Communicator>& slot = world_slot();
  if (!slot) {
#if defined(TAPEGRAD_HAVE_MPI)
    if (launched_by_mpi()) slot = make_mpi_communicator();
#else
    // Several copies each training alone would race on the same output files: refuse.
    TG_CHECK(!launched_by_mpi() || std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr ||
                 std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) == "1",
             "started by mpirun with several processes, but this tapegrad was built without MPI ",
             "(configure with -DTAPEGRAD_MPI=ON and libopenmpi-dev installed)");
#endif
    if (!slot) slot = std::make_unique<LocalCommunicator>();
  }
  return *slot;
}

bool world_is_distributed() { return world_slot() && world_slot()->size() > 1; }

}  // namespace tg::dist
