// The CUDA memory kernels (cuda/memory.cu) against their CPU twins on the same inputs:
// host transfers, dtype-converting strided copies, fill, Philox uniform numbers, index screening,
// and the caching allocator.
#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/philox.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/cuda/kernels.h"
#include "cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

namespace {

const std::vector<DType> kAllDtypes = {DType::f32, DType::f64, DType::f16,
                                       DType::bf16, DType::i64, DType::b8};
const std::vector<DType> kFloatingDtypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

// A CPU tensor of `shape` holding `values` over and over, converted (by the CPU) to dtype.
Tensor cyclic(const std::vector<double>& values, const Shape& shape, DType dtype) {
  std::vector<double> filled(numel(shape));
  for (size_t i = 0; i < filled.size(); ++i) filled[i] = values[i % values.size()];
  return from_values(filled, shape, dtype);
}

// The raw bytes of a tensor (any device), for bit-exact comparisons.
std::vector<unsigned char> bytes_of(const Tensor& t) {
  const Tensor host = on_cpu(t);
  const auto* begin = static_cast<const unsigned char*>(host.data());
  return {begin, begin + host.numel() * dtype_size(host.dtype())};
}

// The same strided view taken of a tensor on either device.
struct View {
  const char* name;
  Shape base;  // the shape of the allocation the view is taken of
  std::function<Tensor(const Tensor&)> of;
};

Tensor same(const Tensor& t) { return t; }

// Views that all have shape [7, 9], of differently laid out buffers.
const std::vector<View>& views_7x9() {
  static const std::vector<View> views = {
      {"contiguous", {7, 9}, same},
      {"transposed", {9, 7}, [](const Tensor& t) { return t.transpose(0, 1); }},
      {"broadcast row", {1, 9}, [](const Tensor& t) { return t.expand({7, 9}); }},
      {"broadcast column", {7, 1}, [](const Tensor& t) { return t.expand({7, 9}); }},
      {"narrowed with an offset", {10, 12},
       [](const Tensor& t) { return t.narrow(0, 2, 7).narrow(1, 3, 9); }},
  };
  return views;
}

// Views of shape [7, 9] that may be written (no broadcast).
const std::vector<View>& writable_views_7x9() {
  static const std::vector<View> views = {
      {"contiguous", {7, 9}, same},
      {"transposed", {9, 7}, [](const Tensor& t) { return t.transpose(0, 1); }},
      {"narrowed with an offset", {10, 12},
       [](const Tensor& t) { return t.narrow(0, 2, 7).narrow(1, 3, 9); }},
      {"every other column", {7, 18},
       [](const Tensor& t) { return t.view({7, 9, 2}).narrow(2, 1, 1).squeeze(2); }},
  };
  return views;
}

// Values that every dtype holds as finite numbers (|v| <= 65504, the largest f16), so that any
// conversion between any two dtypes is defined.
const std::vector<double> kFiniteValues = {0.0,   -0.0,   1.0,      -1.0,   2.5,  -2.5,
                                           0.5,   1.5,    -0.7,     1e-8,   3.14159265358979,
                                           65504, -65504, 1234.567, 255.9, -300.25, 1e-5};
// Values that only the floating dtypes take: NaN, infinities, overflow of f16 / bf16 / f32,
// f16 subnormals and underflow.
const std::vector<double> kSpecialValues = {
    std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
    -std::numeric_limits<double>::infinity(), 65519.0, 65520.0, 70000.0, -1e6, 3.4e38, 1e39,
    -1e300, 6e-8, 3e-8, 1e-45, 5.96e-8, 1.0 / 3.0, 0.1, -0.0, 2.0};

}  // namespace

TEST_CASE("cuda copy_from_host and copy_to_host round trip every dtype", "[cuda]") {
  for (DType dtype : kAllDtypes) {
    for (const Shape& shape : {Shape{0}, Shape{}, Shape{1}, Shape{3, 5}, Shape{1001}}) {
      INFO("dtype " << dtype_name(dtype) << ", shape " << shape_str(shape));
      const Tensor host = cyclic(kFiniteValues, shape, dtype);
      const Tensor device = on_cuda(host);
      REQUIRE(device.device() == kCuda);
      REQUIRE(device.shape() == shape);
      REQUIRE(bytes_of(device) == bytes_of(host));
    }
  }
}

TEST_CASE("cuda copy converts between every pair of dtypes like the cpu", "[cuda]") {
  for (DType from : kAllDtypes) {
    for (DType to : kAllDtypes) {
      const bool floating_only = is_floating(from) && is_floating(to);
      std::vector<double> values = kFiniteValues;
      if (floating_only || to == DType::b8) {
        if (is_floating(from)) values.insert(values.end(), kSpecialValues.begin(), kSpecialValues.end());
      }
      for (const View& src_view : views_7x9()) {
        for (const View& dst_view : writable_views_7x9()) {
          INFO(dtype_name(from) << " -> " << dtype_name(to) << ", source " << src_view.name
                                << ", destination " << dst_view.name);
          const Tensor src_cpu = cyclic(values, src_view.base, from);
          const Tensor src_cuda = on_cuda(src_cpu);
          const Tensor dst_cpu = full(dst_view.base, -3, to);  // untouched elements stay -3
          const Tensor dst_cuda = on_cuda(dst_cpu);
          cpu_kernels().copy(src_view.of(src_cpu), dst_view.of(dst_cpu));
          cuda_kernels().copy(src_view.of(src_cuda), dst_view.of(dst_cuda));
          require_close(dst_cuda, dst_cpu);
          if (from == to || !is_floating(to)) REQUIRE(bytes_of(dst_cuda) == bytes_of(dst_cpu));
        }
      }
    }
  }
}

TEST_CASE("cuda copy of NaN and infinities to the half types keeps them", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor src = on_cuda(from_values({nan, inf, -inf, 1e6, -1e6, 65504, 1.0}, {7}, DType::f32));
  for (DType half : {DType::f16, DType::bf16}) {
    INFO(dtype_name(half));
    Tensor out = empty({7}, half, kCuda);
    cuda_kernels().copy(src, out);
    const std::vector<double> got = out.to_host_f64();
    REQUIRE(std::isnan(got[0]));
    REQUIRE(got[1] == inf);
    REQUIRE(got[2] == -inf);
    if (half == DType::f16) {  // beyond f16's range: infinities
      REQUIRE(got[3] == inf);
      REQUIRE(got[4] == -inf);
    } else {
      REQUIRE(got[3] == Approx(1e6).epsilon(1e-2));
    }
    REQUIRE(got[5] == (half == DType::f16 ? 65504 : 65536));
    REQUIRE(got[6] == 1.0);
  }
}

TEST_CASE("cuda copy handles empty scalar and permuted three-dimensional tensors", "[cuda]") {
  for (DType dtype : {DType::f32, DType::f16, DType::i64}) {
    INFO(dtype_name(dtype));
    // empty
    Tensor empty_cuda = empty({0, 4}, dtype, kCuda);
    cuda_kernels().copy(on_cuda(zeros({0, 4}, DType::f64)), empty_cuda);
    REQUIRE(empty_cuda.numel() == 0);
    // scalar
    const Tensor scalar_cpu = scalar(-5.25, DType::f64);
    Tensor scalar_out = empty({}, dtype, kCuda);
    cuda_kernels().copy(on_cuda(scalar_cpu), scalar_out);
    Tensor scalar_expected = empty({}, dtype);
    cpu_kernels().copy(scalar_cpu, scalar_expected);
    require_close(scalar_out, scalar_expected);
    // [4, 5, 6] permuted to [6, 4, 5], into a contiguous destination
    const Tensor src_cpu = cyclic(kFiniteValues, {4, 5, 6}, DType::f64);
    const Tensor src_cuda = on_cuda(src_cpu);
    Tensor out_cpu = empty({6, 4, 5}, dtype);
    Tensor out_cuda = empty({6, 4, 5}, dtype, kCuda);
    cpu_kernels().copy(src_cpu.permute({2, 0, 1}), out_cpu);
    cuda_kernels().copy(src_cuda.permute({2, 0, 1}), out_cuda);
    require_close(out_cuda, out_cpu);
  }
}

TEST_CASE("cuda copy rejects different shapes", "[cuda]") {
  const Tensor a = empty({3, 4}, DType::f32, kCuda);
  const Tensor b = empty({4, 3}, DType::f32, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().copy(a, b), tg::Error);
}

TEST_CASE("cuda fill writes every dtype on contiguous and strided views", "[cuda]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (DType dtype : kAllDtypes) {
    std::vector<double> values = {2.5, -1.0, 0.0, 0.1, 1e5, 3.0};
    if (is_floating(dtype)) values.insert(values.end(), {nan, -std::numeric_limits<double>::infinity(), 1e-7});
    for (double value : values) {
      for (const View& view : writable_views_7x9()) {
        INFO(dtype_name(dtype) << ", value " << value << ", view " << view.name);
        const Tensor base_cpu = cyclic(kFiniteValues, view.base, dtype);
        const Tensor base_cuda = on_cuda(base_cpu);
        cpu_kernels().fill(view.of(base_cpu), value);
        cuda_kernels().fill(view.of(base_cuda), value);
        REQUIRE(bytes_of(base_cuda) == bytes_of(base_cpu));  // and the rest of the base untouched
      }
    }
    INFO(dtype_name(dtype) << ", empty and scalar");
    Tensor nothing = empty({0}, dtype, kCuda);
    cuda_kernels().fill(nothing, 1.0);
    Tensor one = empty({}, dtype, kCuda);
    cuda_kernels().fill(one, 1.0);
    REQUIRE(one.item() == 1.0);
  }
}

TEST_CASE("cuda uniform draws the cpu's numbers bit for bit", "[cuda]") {
  for (DType dtype : kFloatingDtypes) {
    for (int64_t count : {0, 1, 3, 5, 1001, 2053}) {
      for (uint64_t seed : {uint64_t{42}, uint64_t{0xdeadbeefcafe1234}}) {
        for (uint64_t offset : {uint64_t{0}, uint64_t{17}, uint64_t{18}, uint64_t{19}, (uint64_t{1} << 33) + 2}) {
          INFO(dtype_name(dtype) << ", count " << count << ", seed " << seed << ", offset " << offset);
          Tensor expected = empty({count}, dtype);
          Tensor got = empty({count}, dtype, kCuda);
          cpu_kernels().uniform(expected, seed, offset);
          cuda_kernels().uniform(got, seed, offset);
          REQUIRE(bytes_of(got) == bytes_of(expected));
          for (double v : got.to_host_f64()) REQUIRE((v >= 0.0 && v < 1.0));
        }
      }
    }
  }
  // A shaped output is numbered in row-major order like a flat one.
  Tensor flat = empty({35}, DType::f32, kCuda);
  Tensor shaped = empty({5, 7}, DType::f32, kCuda);
  cuda_kernels().uniform(flat, 7, 3);
  cuda_kernels().uniform(shaped, 7, 3);
  REQUIRE(bytes_of(flat) == bytes_of(shaped));
}

TEST_CASE("cuda uniform in the half types never rounds up to one", "[cuda]") {
  // For each half type find a draw of seed 5 that rounds to 1 (f16: at least 1 - 2^-12, bf16:
  // 1 - 2^-9), then draw a few numbers around it: it must become the largest value below 1.
  struct Case { DType dtype; float threshold; double below_one; };
  for (const Case& c : {Case{DType::f16, 1.0f - 0x1.0p-12f, 1.0 - 0x1.0p-11},
                        Case{DType::bf16, 1.0f - 0x1.0p-9f, 1.0 - 0x1.0p-8}}) {
    INFO(dtype_name(c.dtype));
    const uint64_t seed = 5;
    int64_t hit = 0;
    while (philox_uniform(seed, 0, hit) < c.threshold) ++hit;
    const uint64_t offset = hit >= 5 ? static_cast<uint64_t>(hit) - 5 : 0;  // a stream position
    const int64_t position = hit - static_cast<int64_t>(offset);            // where the hit lands
    Tensor expected = empty({11}, c.dtype);
    Tensor got = empty({11}, c.dtype, kCuda);
    cpu_kernels().uniform(expected, seed, offset);
    cuda_kernels().uniform(got, seed, offset);
    REQUIRE(bytes_of(got) == bytes_of(expected));
    REQUIRE(got.to_host_f64()[position] == c.below_one);
  }
}

TEST_CASE("cuda uniform rejects integer dtypes", "[cuda]") {
  Tensor out = empty({4}, DType::i64, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().uniform(out, 1, 0), tg::Error);
}

TEST_CASE("cuda screen_indices counts and bounds the kept entries like the cpu", "[cuda]") {
  std::mt19937_64 random(11);
  struct Case { const char* name; std::vector<int64_t> index; int64_t ignore; };
  std::vector<Case> cases = {
      {"empty", {}, -100},
      {"one kept", {7}, -100},
      {"one ignored", {-100}, -100},
      {"all ignored", std::vector<int64_t>(600, -1), -1},
      {"nothing to ignore", {3, 9, 0, 4, 4}, -100},
      {"negative entries", {-5, 2, -100, -7, 40, -100}, -100},
      {"extremes", {std::numeric_limits<int64_t>::max(), 0, std::numeric_limits<int64_t>::min() + 1},
       std::numeric_limits<int64_t>::min()},
  };
  for (int64_t n : {255, 256, 257, 3001}) {  // one block, exactly one, just over, several blocks
    std::vector<int64_t> index(n);
    for (int64_t& value : index) {
      value = random() % 4 == 0 ? -100 : static_cast<int64_t>(random() % 50000) - 10;
    }
    cases.push_back({"random", index, -100});
  }
  for (const Case& c : cases) {
    for (bool with_outputs : {false, true}) {
      const int64_t n = static_cast<int64_t>(c.index.size());
      INFO(c.name << " (" << n << " entries), safe and keep written: " << with_outputs);
      const Tensor index_cpu = from_indices(c.index, {n});
      const Tensor index_cuda = on_cuda(index_cpu);
      Tensor safe_cpu, keep_cpu, safe_cuda, keep_cuda;
      if (with_outputs) {
        safe_cpu = full({n}, 99, DType::i64);
        keep_cpu = zeros({n}, DType::b8);
        safe_cuda = on_cuda(safe_cpu);
        keep_cuda = on_cuda(keep_cpu);
      }
      const IndexSummary expected = cpu_kernels().screen_indices(index_cpu, c.ignore, safe_cpu, keep_cpu);
      const IndexSummary got = cuda_kernels().screen_indices(index_cuda, c.ignore, safe_cuda, keep_cuda);
      REQUIRE(got.kept == expected.kept);
      REQUIRE(got.min == expected.min);
      REQUIRE(got.max == expected.max);
      if (with_outputs) {
        REQUIRE(bytes_of(safe_cuda) == bytes_of(safe_cpu));
        REQUIRE(bytes_of(keep_cuda) == bytes_of(keep_cpu));
      }
    }
  }
}

TEST_CASE("cuda screen_indices rejects an index that is not i64", "[cuda]") {
  const Tensor index = empty({4}, DType::f32, kCuda);
  REQUIRE_THROWS_AS(cuda_kernels().screen_indices(index, -100, Tensor(), Tensor()), tg::Error);
}

TEST_CASE("cuda caching allocator reuses freed blocks", "[cuda]") {
  Kernels& k = cuda_kernels();
  cuda::empty_cache(0);
  const cuda::CacheStats start = cuda::cache_stats(0);
  REQUIRE(start.cached_blocks == 0);

  // Sizes are rounded up to 512 bytes; a freed block serves the next request of its size.
  void* first = k.allocate(1000);
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start.reserved_bytes + 1024);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 0);
  k.deallocate(first, 1000);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 1);
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start.reserved_bytes + 1024);
  void* again = k.allocate(1000);
  REQUIRE(again == first);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 0);
  k.deallocate(again, 1000);
  void* smaller = k.allocate(600);  // also rounds to 1024
  REQUIRE(smaller == first);
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start.reserved_bytes + 1024);

  // Best fit: a 2000-byte request takes a cached 3072-byte block, a 100-byte one does not (it
  // would waste more than half of it).
  void* large = k.allocate(3000);  // 3072
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start.reserved_bytes + 1024 + 3072);
  k.deallocate(large, 3000);
  void* tiny = k.allocate(100);
  REQUIRE(tiny != large);
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start.reserved_bytes + 1024 + 3072 + 512);
  void* medium = k.allocate(2000);
  REQUIRE(medium == large);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 0);

  k.deallocate(smaller, 600);
  k.deallocate(tiny, 100);
  k.deallocate(medium, 2000);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 3);
  cuda::empty_cache(0);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 0);
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start.reserved_bytes);
}

TEST_CASE("cuda tensors count in the allocator stats of their device", "[cuda]") {
  cuda::empty_cache(0);
  reset_allocator_stats(kCuda);
  const AllocatorStats before = allocator_stats(kCuda);
  const int64_t cpu_before = allocator_stats(kCPU).current_bytes;
  void* data = nullptr;
  {
    Tensor t = empty({10, 10}, DType::f32, kCuda);
    data = t.data();
    const AllocatorStats during = allocator_stats(kCuda);
    REQUIRE(during.current_bytes == before.current_bytes + 400);
    REQUIRE(during.peak_bytes >= before.current_bytes + 400);
    REQUIRE(during.allocations == before.allocations + 1);
    REQUIRE(during.allocated_bytes == before.allocated_bytes + 400);
    REQUIRE(allocator_stats(kCPU).current_bytes == cpu_before);
  }
  REQUIRE(allocator_stats(kCuda).current_bytes == before.current_bytes);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 1);
  Tensor reused = empty({100}, DType::f32, kCuda);  // the same 512-byte block
  REQUIRE(reused.data() == data);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 0);
}

TEST_CASE("cuda caching allocator is safe to use from several threads", "[cuda]") {
  Kernels& k = cuda_kernels();
  cuda::empty_cache(0);
  const int64_t start = cuda::cache_stats(0).reserved_bytes;
  std::mutex mutex;
  std::set<void*> live;
  std::atomic<bool> handed_out_twice{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 100; ++round) {  // hold three blocks at a time, then free them
        void* held[3];
        size_t sizes[3];
        for (int j = 0; j < 3; ++j) {
          sizes[j] = 512 * static_cast<size_t>(1 + (t + round + j) % 3);
          held[j] = k.allocate(sizes[j]);
          std::lock_guard lock(mutex);
          if (!live.insert(held[j]).second) handed_out_twice = true;
        }
        for (int j = 0; j < 3; ++j) {
          {
            std::lock_guard lock(mutex);
            live.erase(held[j]);
          }
          k.deallocate(held[j], sizes[j]);
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  REQUIRE_FALSE(handed_out_twice);
  REQUIRE(live.empty());
  cuda::empty_cache(0);
  REQUIRE(cuda::cache_stats(0).reserved_bytes == start);
  REQUIRE(cuda::cache_stats(0).cached_blocks == 0);
}

TEST_CASE("cuda allocate reports running out of memory", "[cuda]") {
  Kernels& k = cuda_kernels();
  REQUIRE_THROWS_WITH(k.allocate(size_t{1} << 52),
                      Catch::Contains("allocate: out of memory on cuda:0 asking for 4503599627370496 bytes"));
  REQUIRE_THROWS_WITH(k.allocate(std::numeric_limits<size_t>::max()),
                      Catch::Contains("allocate: out of memory on cuda:0"));
  // and the device still works afterwards
  void* ptr = k.allocate(256);
  k.deallocate(ptr, 256);
}

TEST_CASE("cuda kernels cover tensors larger than one grid", "[cuda]") {
  // More elements than the capped grid has threads (4096 blocks of 256), so that the grid-stride
  // loops go round more than once. (Kernels without barriers run fast on the emulated device.)
  const int64_t n = 4096 * 256 + 1001;
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<double>((i * 7919) % 1000003) - 5;
  const Tensor src_cpu = from_values(values, {n}, DType::f32);
  const Tensor src_cuda = on_cuda(src_cpu);
  Tensor converted_cpu = empty({n}, DType::i64);
  Tensor converted_cuda = empty({n}, DType::i64, kCuda);
  cpu_kernels().copy(src_cpu, converted_cpu);
  cuda_kernels().copy(src_cuda, converted_cuda);
  REQUIRE(bytes_of(converted_cuda) == bytes_of(converted_cpu));

  const int64_t draws = 4 * n + 3;  // uniform's threads each write four numbers
  Tensor random_cpu = empty({draws}, DType::f32);
  Tensor random_cuda = empty({draws}, DType::f32, kCuda);
  cpu_kernels().uniform(random_cpu, 3, 9);
  cuda_kernels().uniform(random_cuda, 3, 9);
  REQUIRE(bytes_of(random_cuda) == bytes_of(random_cpu));
}
