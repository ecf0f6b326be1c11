// dist::GradientSync without MPI: a fake communicator of two ranks whose other rank holds the
// same gradients as this one, so the average must give back this rank's gradients; and the
// overlap must start each bucket during backward, as soon as its gradients are final.
#include <catch2/catch.hpp>

#include <cmath>

#include "tapegrad/autograd/rng.h"
#include "tapegrad/distributed/gradient_sync.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/runtime/tape_observer.h"

namespace {

// Rank 0 of 2; the other rank's contribution equals ours (a sum doubles), collectives complete at once.
class MirrorCommunicator final : public tg::dist::Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* name() const override { return "mirror"; }
  void allreduce(float* data, int64_t count, tg::dist::Reduce op) override {
    if (op == tg::dist::Reduce::sum) for (int64_t i = 0; i < count; ++i) data[i] *= 2;
  }
  void allreduce(double* data, int64_t count, tg::dist::Reduce op) override {
    if (op == tg::dist::Reduce::sum) for (int64_t i = 0; i < count; ++i) data[i] *= 2;
  }
  int64_t allreduce_min(int64_t value) override { return value; }
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  int64_t start_allreduce(float* data, int64_t count) override {
    allreduce(data, count, tg::dist::Reduce::sum);
    return started++;
  }
  void progress() override {}
  void wait(int64_t handle) override { waited += handle >= 0 ? 1 : 0; }
  [[noreturn]] void abort(int code) override { std::exit(code); }
  int64_t started = 0, waited = 0;
};

}  // namespace

TEST_CASE("gradient sync: buckets start during backward and average to the shared gradient", "[dist]") {
  tg::manual_seed(4);
  // Three layers, a bucket each (the bucket size is one layer's bytes): y = tanh(tanh(x W1) W2) W3.
  std::vector<tg::Tensor> params = {tg::randn({8, 8}), tg::randn({8, 8}), tg::randn({8, 8})};
  for (tg::Tensor& p : params) p.requires_grad_();
  const tg::Tensor x = tg::randn({4, 8});
  const auto loss = [&] {
    return tg::sum(tg::matmul(tg::tanh(tg::matmul(tg::tanh(tg::matmul(x, params[0])), params[1])), params[2]));
  };
  loss().backward();  // the reference gradients, one process
  std::vector<std::vector<double>> expected;
  for (tg::Tensor& p : params) {
    expected.push_back(p.grad().to_host_f64());
    p.zero_grad();
  }

  MirrorCommunicator comm;
  tg::dist::GradientSync sync(comm, params, /*overlap=*/true, /*bucket_bytes=*/8 * 8 * 4);
  REQUIRE(sync.buckets() == 3);
  sync.begin_step();
  loss().backward();
  // W3's and W2's buckets were final before backward reached W1: started during it.
  REQUIRE(comm.started >= 2);
  sync.average();
  REQUIRE(comm.started == 3);
  REQUIRE(sync.stats().calls == 3);
  REQUIRE(sync.stats().early_calls >= 2);
  for (size_t k = 0; k < params.size(); ++k) {
    const std::vector<double> got = params[k].grad().to_host_f64();
    for (size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == Approx(expected[k][i]).margin(1e-6));
  }
  REQUIRE(tg::tape_observer() == nullptr);  // the step's observer is gone
}

TEST_CASE("gradient sync: without overlap every bucket starts after backward", "[dist]") {
  tg::manual_seed(5);
  std::vector<tg::Tensor> params = {tg::randn({4, 4}), tg::randn({4, 4})};
  for (tg::Tensor& p : params) p.requires_grad_();
  MirrorCommunicator comm;
  tg::dist::GradientSync sync(comm, params, /*overlap=*/false, /*bucket_bytes=*/4 * 4 * 4);
  sync.begin_step();
  tg::sum(tg::matmul(params[0], params[1])).backward();
  REQUIRE(comm.started == 0);
  sync.average();
  REQUIRE(sync.stats().calls == 2);
  REQUIRE(sync.stats().early_calls == 0);
  // A parameter without a gradient gets a zero one (every rank steps alike).
  std::vector<tg::Tensor> more = {tg::randn({3}), tg::randn({2})};
  for (tg::Tensor& p : more) p.requires_grad_();
  tg::dist::GradientSync unused(comm, more, false);
  tg::sum(more[0]).backward();
  unused.average();
  REQUIRE(more[1].grad().defined());
  for (const double g : more[1].grad().to_host_f64()) REQUIRE(g == 0);
  for (const double g : more[0].grad().to_host_f64()) REQUIRE(g == Approx(1));
}
