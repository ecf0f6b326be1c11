// dist::GradientSync with its buckets on the CUDA device (distributed/bucket_reducer.h), without
// MPI: N simulated ranks, each a thread of this process with its own parameters and gradients,
// joined by an in-process communicator that really sums the ranks' buffers. The device buckets are
// reduced by the host-staged reducer, the same path the NCCL reducer takes apart from the one NCCL
// call (which needs a GPU and is not tested here). The reference is independent of the buckets:
// each parameter's gradient averaged over the ranks by hand, in f64 on the host.
#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "tapegrad/distributed/gradient_sync.h"
#include "tests/cuda/cuda_test_support.h"

namespace tg::testing {
namespace {

// The ranks of one simulated job. Only one rank's thread runs at a time (it holds `turn`, released
// only while waiting for a collective), so the device is never used by two threads at once.
struct SimulatedJob {
  explicit SimulatedJob(int ranks) : size(ranks) {}
  struct Call {
    std::vector<float*> buffers;
    int64_t count = 0;
    bool done = false;
  };
  const int size;
  std::mutex turn;
  std::condition_variable changed;
  std::map<int64_t, Call> calls;  // the n-th start_allreduce of every rank is call n
};

class SimulatedRank final : public dist::Communicator {
 public:
  SimulatedRank(SimulatedJob& job, int rank) : job_(job), rank_(rank), lock_(job.turn) {}
  int rank() const override { return rank_; }
  int size() const override { return job_.size; }
  const char* name() const override { return "simulated"; }
  void allreduce(float*, int64_t, dist::Reduce) override { throw std::logic_error("not used by GradientSync"); }
  void allreduce(double*, int64_t, dist::Reduce) override { throw std::logic_error("not used by GradientSync"); }
  int64_t allreduce_min(int64_t value) override { return value; }
  void broadcast(void*, int64_t, int) override {}
  void barrier() override {}
  // Registers this rank's buffer; the last rank to arrive writes the sum into every buffer.
  int64_t start_allreduce(float* data, int64_t count) override {
    const int64_t handle = started_++;
    SimulatedJob::Call& call = job_.calls[handle];
    if (call.buffers.empty()) call.count = count;
    if (call.count != count) throw std::runtime_error("the ranks reduce buckets of different sizes");
    call.buffers.push_back(data);
    if (static_cast<int>(call.buffers.size()) == job_.size) {
      std::vector<float> sum(static_cast<size_t>(count), 0.0f);
      for (const float* buffer : call.buffers) {
        for (int64_t i = 0; i < count; ++i) sum[static_cast<size_t>(i)] += buffer[i];
      }
      for (float* buffer : call.buffers) std::copy(sum.begin(), sum.end(), buffer);
      call.done = true;
      job_.changed.notify_all();
    }
    return handle;
  }
  void progress() override {}
  // (A rank that failed before starting this call would leave it waiting: a timeout, not a hang.)
  void wait(int64_t handle) override {
    if (!job_.changed.wait_for(lock_, std::chrono::seconds(60), [&] { return job_.calls[handle].done; })) {
      throw std::runtime_error("timed out waiting for the other ranks");
    }
  }
  [[noreturn]] void abort(int code) override { std::exit(code); }

 private:
  SimulatedJob& job_;
  int rank_;
  std::unique_lock<std::mutex> lock_;  // this rank's turn: held except while waiting
  int64_t started_ = 0;
};

// Passes every call on to the host-staged reducer, checking that what it gets is a device bucket.
class DeviceBucketsOnly final : public dist::BucketReducer {
 public:
  explicit DeviceBucketsOnly(dist::Communicator& comm) : staged_(dist::make_staged_device_reducer(comm)) {}
  const char* name() const override { return staged_->name(); }
  int64_t start(const Tensor& bucket) override {
    if (bucket.device() != kCuda || bucket.dtype() != DType::f32) wrong_buckets++;
    return staged_->start(bucket);
  }
  void progress() override { staged_->progress(); }
  void wait(int64_t handle) override { staged_->wait(handle); }
  int wrong_buckets = 0;

 private:
  std::unique_ptr<dist::BucketReducer> staged_;
};

// The parameters of the test model: several per bucket, an f16 one, and shapes of any rank.
struct ParamSpec {
  Shape shape;
  DType dtype;
};
const std::vector<ParamSpec> kParams = {
    {{6, 5}, DType::f32}, {{5}, DType::f32}, {{4, 3, 2}, DType::f16}, {{7}, DType::f32}, {{3, 8}, DType::f32}};

// Rank r's gradient of parameter k on the host (f64 values rounded to the parameter's dtype), or
// none: parameter 3 has a gradient on rank 1 only (the others must count it as zeros).
Tensor host_gradient(int rank, size_t k) {
  if (k == 3 && rank != 1) return Tensor();
  return random_tensor(kParams[k].shape, kParams[k].dtype, 1000 * static_cast<uint64_t>(rank) + k, -2, 2);
}

}  // namespace

TEST_CASE("cuda gradient sync: device buckets average over simulated ranks", "[cuda][dist]") {
  for (const int ranks : {1, 3}) {
    INFO(ranks << " ranks");
    SimulatedJob job(ranks);
    std::vector<std::vector<std::vector<double>>> got(static_cast<size_t>(ranks));  // [rank][param]
    std::vector<int> wrong_buckets(static_cast<size_t>(ranks), 0), buckets(static_cast<size_t>(ranks), 0);
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int rank = 0; rank < ranks; ++rank) {
      threads.emplace_back([&, rank] {
        try {
          SimulatedRank comm(job, rank);
          std::vector<Tensor> params;
          for (const ParamSpec& spec : kParams) params.push_back(zeros(spec.shape, spec.dtype, kCuda));
          for (size_t k = 0; k < params.size(); ++k) {
            const Tensor grad = host_gradient(rank, k);
            if (!grad.defined()) continue;
            if (k == 4) {  // a strided gradient: the transpose of a contiguous [8, 3] tensor
              params[k].set_grad(on_cuda(grad.transpose(0, 1).contiguous()).transpose(0, 1));
            } else {
              params[k].set_grad(on_cuda(grad));
            }
          }
          auto reducer = std::make_unique<DeviceBucketsOnly>(comm);
          DeviceBucketsOnly& seen = *reducer;
          // 128 bytes a bucket (counted as f32), from the last parameter: [3, 8] and [7]; [4, 3, 2]
          // (f16) and [5]; [6, 5] alone. So the missing gradient sits at an offset, the f16 one first.
          dist::GradientSync sync(comm, std::move(reducer), params, /*overlap=*/false, /*bucket_bytes=*/128);
          buckets[static_cast<size_t>(rank)] = static_cast<int>(sync.buckets());
          sync.average();
          wrong_buckets[static_cast<size_t>(rank)] = seen.wrong_buckets;
          for (const Tensor& p : params) {  // (no Catch assertions outside the test's thread)
            if (p.grad().device() != kCuda || p.grad().dtype() != p.dtype() || p.grad().shape() != p.shape()) {
              throw std::runtime_error("a gradient is not on the device, or not of its parameter's dtype and shape");
            }
            got[static_cast<size_t>(rank)].push_back(p.grad().to_host_f64());
          }
        } catch (const std::exception& error) {
          errors[static_cast<size_t>(rank)] = error.what();
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    for (int rank = 0; rank < ranks; ++rank) {
      INFO("rank " << rank << ": " << errors[static_cast<size_t>(rank)]);
      REQUIRE(errors[static_cast<size_t>(rank)].empty());
      REQUIRE(wrong_buckets[static_cast<size_t>(rank)] == 0);
      REQUIRE(buckets[static_cast<size_t>(rank)] == 3);
    }
    // The reference: each parameter's gradients averaged over the ranks, a missing one as zeros.
    for (size_t k = 0; k < kParams.size(); ++k) {
      std::vector<double> expected(static_cast<size_t>(numel(kParams[k].shape)), 0.0);
      for (int rank = 0; rank < ranks; ++rank) {
        const Tensor grad = host_gradient(rank, k);
        if (!grad.defined()) continue;
        const std::vector<double> values = grad.to_host_f64();
        for (size_t i = 0; i < values.size(); ++i) expected[i] += values[i] / ranks;
      }
      // f32: summation order only; f16: the average rounded to f16 (11 significant bits).
      const double rtol = kParams[k].dtype == DType::f16 ? 1e-3 : 1e-6;
      for (int rank = 0; rank < ranks; ++rank) {
        const std::vector<double>& values = got[static_cast<size_t>(rank)][k];
        REQUIRE(values.size() == expected.size());
        for (size_t i = 0; i < values.size(); ++i) {
          INFO("parameter " << k << ", element " << i << ", rank " << rank);
          REQUIRE(values[i] == Approx(expected[i]).epsilon(rtol).margin(1e-6));
        }
      }
    }
  }
}

}  // namespace tg::testing
