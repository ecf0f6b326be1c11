// Devices and the backend registry as seen from a CPU-only test binary: parsing, the default
// device for factories, the CPU backend always present, one clear error for a device this binary
// has no kernels for, and the CPU's index screening.
#include <catch2/catch.hpp>

#include <cstdint>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/tensor.h"

namespace tg {

TEST_CASE("device: parse_device accepts cpu, cuda and cuda:N only", "[device]") {
  REQUIRE(parse_device("cpu") == kCPU);
  REQUIRE(parse_device("cuda") == Device{DeviceType::cuda, 0});
  REQUIRE(parse_device("cuda:3") == Device{DeviceType::cuda, 3});
  for (const char* bad : {"", "gpu", "cuda:", "cuda:-1", "cuda:16", "cuda:1x", "cuda:99999999999",
                          "CPU", " cpu"}) {
    INFO(bad);
    REQUIRE_THROWS_WITH(parse_device(bad), Catch::Contains("is not one of cpu, cuda, cuda:N"));
  }
}

TEST_CASE("device: a DefaultDeviceScope sets where factories put tensors, and nests", "[device]") {
  REQUIRE(default_device() == kCPU);
  {
    const DefaultDeviceScope outer(Device{DeviceType::cuda, 1});
    REQUIRE(default_device() == Device{DeviceType::cuda, 1});
    {
      const DefaultDeviceScope inner(kCPU);
      REQUIRE(default_device() == kCPU);
      REQUIRE(zeros({2}).device() == kCPU);
    }
    REQUIRE(default_device() == Device{DeviceType::cuda, 1});
  }
  REQUIRE(default_device() == kCPU);
}

TEST_CASE("device: the CPU backend is registered; a missing backend is one clear error", "[device]") {
  const Backend* cpu = find_backend(DeviceType::cpu);
  REQUIRE(cpu != nullptr);
  REQUIRE(std::string(cpu->name) == "cpu");
  REQUIRE(&kernels(kCPU) == &cpu->kernels_for(0));
  if (find_backend(DeviceType::cuda) == nullptr) {  // this test binary links no CUDA backend
    REQUIRE_THROWS_WITH(zeros({2}, DType::f32, Device{DeviceType::cuda, 0}),
                        Catch::Contains("cuda:0") && Catch::Contains("built without CUDA"));
  }
}

TEST_CASE("device: screen_indices counts, bounds and rewrites ignored entries", "[device]") {
  const Tensor index = from_indices({4, -100, 0, 7, -100}, {5});
  const Tensor safe = empty({5}, DType::i64), keep = empty({5}, DType::b8);
  const IndexSummary summary = kernels(kCPU).screen_indices(index, -100, safe, keep);
  REQUIRE(summary.kept == 3);
  REQUIRE(summary.min == 0);
  REQUIRE(summary.max == 7);
  REQUIRE(safe.to_host_i64() == std::vector<int64_t>{4, 0, 0, 7, 0});
  REQUIRE(keep.to_host_f64() == std::vector<double>{1, 0, 1, 1, 0});
  const IndexSummary none = kernels(kCPU).screen_indices(from_indices({-1, -1}, {2}), -1, Tensor(), Tensor());
  REQUIRE(none.kept == 0);
  REQUIRE(none.max < none.min);
}

}  // namespace tg
