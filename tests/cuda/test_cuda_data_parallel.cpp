// `mpirun -np 2 tapegrad train --device cuda` on the emulated device: the gradients live in device
// buckets and are reduced staged through the host over MPI (the emulated command line is built
// without NCCL, whose only part not run here is the NCCL call itself). The two ranks must train as
// one process does with the same global batch. Hidden ([.mpi_cuda]): registered with CTest by its
// own tag when MPI was found (tests/cuda/CMakeLists.txt), and only for the emulated device (a real
// GPU machine has one GPU, and NCCL does not put two ranks on one GPU).
#if defined(TAPEGRAD_MPIRUN) && defined(TAPEGRAD_CUDA_EMULATION)
#include <catch2/catch.hpp>

#include "tests/cli/cli_support.h"

namespace tg::testing {

TEST_CASE("cuda mpi: 2 ranks on the device average gradients in device buckets as one process trains",
          "[.mpi_cuda][mpi_cuda_emulated_train]") {
  TempDir dir;
  const std::string data = dir.file("text.txt");
  write_bytes(data, small_text());
  const auto f = [&](const char* name) { return "'" + dir.file(name) + "'"; };
  // SGD: its step is proportional to the gradient, so a wrong 1/N would show in the losses (Adam's
  // would hide it). Dropout 0.1 (typed: charlm's default is 0): the ranks draw the global batch's
  // masks.
  const std::string common = "train --device cuda --task charlm --context 8 --layers 1 --dim 16 --heads 2 --data '" +
                             data + "' --batch 8 --steps 4 --threads 1 --optimizer sgd --lr 0.5 --dropout 0.1 ";
  const CliResult one = run_cli(common + "--log " + f("one.csv") + " --save " + f("one.st"), dir);
  INFO(one.err);
  REQUIRE(one.exit_code == 0);
  const CliResult two = run_cli(common + "--log " + f("two.csv") + " --save " + f("two.st"), dir, mpi_launcher(2));
  INFO(two.err);
  REQUIRE(two.exit_code == 0);
  REQUIRE_THAT(two.err, Catch::Contains("data parallel: 2 processes (mpi)") &&
                            Catch::Contains("(gradients: mpi (host-staged))"));
  const std::vector<double> a = logged_losses(dir.file("one.csv")), b = logged_losses(dir.file("two.csv"));
  REQUIRE(a.size() == 4);
  REQUIRE(b.size() == 4);
  REQUIRE(a[3] != Approx(a[0]).epsilon(1e-3));  // the steps move the loss (the check below has teeth)
  for (size_t i = 0; i < a.size(); ++i) REQUIRE(b[i] == Approx(a[i]).epsilon(1e-4));
}

}  // namespace tg::testing
#endif
