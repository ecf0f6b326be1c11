#pragma once
// For tests on the emulated device: an array in device memory that frees itself, filled from and
// read back into std::vector. Any failing runtime call fails the test (Catch2 REQUIRE).
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "emulated_cuda.h"

template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t count) : count_(count) {
    REQUIRE(cudaMalloc(&data_, count * sizeof(T)) == cudaSuccess);
  }
  DeviceArray(size_t count, T value) : DeviceArray(std::vector<T>(count, value)) {}
  explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) {
    REQUIRE(cudaMemcpy(data_, values.data(), bytes(), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceArray() { cudaFree(data_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* get() const { return data_; }
  size_t bytes() const { return count_ * sizeof(T); }

  std::vector<T> to_host() const {
    std::vector<T> values(count_);
    REQUIRE(cudaMemcpy(values.data(), data_, bytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return values;
  }

 private:
  T* data_ = nullptr;
  size_t count_;
};
