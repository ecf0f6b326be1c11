// The CUDA backend's registration and device information (cuda/info.cu): the registry
// finds it, describe_devices() gives one line a device, kernels() checks device indices, and the
// TF32 switch is the one math_modes() holds.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cuda/kernels.h"
#include "cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

TEST_CASE("cuda backend is registered", "[cuda]") {
  const Backend* backend = find_backend(DeviceType::cuda);
  REQUIRE(backend != nullptr);
  REQUIRE(std::string(backend->name) == "cuda");
  REQUIRE(backend->device_count() == cuda::device_count());
  REQUIRE(cuda::device_count() >= 1);
#if !defined(TAPEGRAD_CUDA_REAL_DEVICE)
  REQUIRE(cuda::device_count() == 1);  // the emulated device
#endif
  Kernels& device_kernels = kernels(kCuda);
  REQUIRE(std::string(device_kernels.name()) == "cuda");
  REQUIRE(&device_kernels == &backend->kernels_for(0));
  REQUIRE(&device_kernels == &cuda::kernels_for(0));  // one instance per device
}

TEST_CASE("cuda describe devices gives one line a device", "[cuda]") {
  const std::vector<std::string> lines = cuda::describe_devices();
  REQUIRE(static_cast<int>(lines.size()) == cuda::device_count());
  for (size_t index = 0; index < lines.size(); ++index) {
    INFO(lines[index]);
    REQUIRE(lines[index].rfind("cuda:" + std::to_string(index) + "  ", 0) == 0);
    REQUIRE(lines[index].find("GiB, compute capability ") != std::string::npos);
    REQUIRE(lines[index].find(", driver ") != std::string::npos);
    REQUIRE(lines[index].find(", runtime ") != std::string::npos);
    REQUIRE(lines[index].find(", cuBLAS ") != std::string::npos);
  }
  REQUIRE(find_backend(DeviceType::cuda)->describe() == lines);
}

TEST_CASE("cuda kernels for a missing device index is an error naming it", "[cuda]") {
  const int missing = cuda::device_count();  // one past the last device, on any machine
  const std::string name = "cuda:" + std::to_string(missing);
  REQUIRE_THROWS_AS(kernels(Device{DeviceType::cuda, missing}), tg::Error);
  REQUIRE_THROWS_WITH(kernels(Device{DeviceType::cuda, missing}), Catch::Contains(name));
  REQUIRE_THROWS_WITH(kernels(Device{DeviceType::cuda, -1}), Catch::Contains("cuda:-1"));
}

TEST_CASE("cuda allow tf32 sets the math mode", "[cuda]") {
  const bool before = math_modes().allow_tf32;
  cuda::allow_tf32(true);
  REQUIRE(math_modes().allow_tf32);
  cuda::allow_tf32(false);
  REQUIRE_FALSE(math_modes().allow_tf32);
  cuda::allow_tf32(before);
}
