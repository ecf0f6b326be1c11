// Tests of the emulated CUDA device (tests/cuda/emulation) itself: how it runs kernels. Each
// kernel is plain CUDA, launched through cuda/device_code.h as the backend's are, and checked
// against a plain loop: barriers, warp shuffles, atomics. (Shared memory, indexing and failures:
// test_emulation_launch.cpp; runtime API: _runtime.cpp; cuBLAS: _cublas.cpp.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "tapegrad/cuda/device_code.h"
#include "device_array.h"

using tg::cuda::LaunchShape;
using tg::cuda::launch;

namespace {

// ---- Barriers -----------------------------------------------------------------------------------
// Block b sums the grid-stride elements it visits: a tree in shared memory over the next power of
// two, guarded so that any block size works.
__global__ void block_sums(const double* x, int n, double* sums) {
  __shared__ double partial[1024];
  const unsigned t = threadIdx.x;
  double sum = 0;
  for (unsigned i = blockIdx.x * blockDim.x + t; i < static_cast<unsigned>(n); i += blockDim.x * gridDim.x) sum += x[i];
  partial[t] = sum;
  __syncthreads();
  unsigned width = 1;
  while (width < blockDim.x) width *= 2;
  for (unsigned stride = width / 2; stride > 0; stride /= 2) {
    if (t < stride && t + stride < blockDim.x) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = partial[0];
}

TEST_CASE("emulation: barrier-dependent block reduction", "[cuda][emulation]") {
  const int n = 5000;
  std::vector<double> x(n);
  for (int i = 0; i < n; ++i) x[i] = i % 7 - 3;  // small integers: every order of summation is exact
  const DeviceArray<double> device_x(x);
  for (unsigned threads : {1u, 32u, 33u, 100u, 256u, 1024u}) {
    for (unsigned blocks : {1u, 3u}) {
      DeviceArray<double> sums(blocks);
      launch("block_sums", block_sums, LaunchShape{blocks, threads}, device_x.get(), n, sums.get());
      REQUIRE(cudaGetLastError() == cudaSuccess);
      std::vector<double> expected(blocks, 0.0);
      for (int i = 0; i < n; ++i) expected[i / threads % blocks] += x[i];
      INFO("block of " << threads << ", grid of " << blocks);
      CHECK(sums.to_host() == expected);
    }
  }
}

// Threads below `skip` return before any barrier and odd ones between barriers: returned threads
// must not hold up the barriers of the others, which still see all that was written before each.
__global__ void barriers_after_returns(int skip, int* out) {
  __shared__ int values[256];
  const int t = threadIdx.x, threads = blockDim.x;
  if (t < skip) return;
  values[t] = 10 * t;
  __syncthreads();
  const int neighbour = t + 1 < threads ? values[t + 1] : 0;
  if (t % 2 == 1) {
    out[t] = neighbour;
    return;
  }
  __syncthreads();
  values[t] = neighbour + 1;
  __syncthreads();
  out[t] = values[t] + (t + 2 < threads ? values[t + 2] : 0);
}

TEST_CASE("emulation: returned threads do not hold up barriers", "[cuda][emulation]") {
  const int threads = 256;
  for (int skip : {0, 5, 40, 255}) {
    DeviceArray<int> out(threads, -1);
    launch("barriers_after_returns", barriers_after_returns, LaunchShape{1, threads}, skip, out.get());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    const auto neighbour = [&](int t) { return t + 1 < threads ? 10 * (t + 1) : 0; };
    std::vector<int> expected(threads, -1);
    for (int t = skip; t < threads; ++t) {
      expected[t] = t % 2 == 1 ? neighbour(t) : neighbour(t) + 1 + (t + 2 < threads ? neighbour(t + 2) + 1 : 0);
    }
    INFO("threads below " << skip << " return at once");
    CHECK(out.to_host() == expected);
  }
}

// ---- Warp shuffles ------------------------------------------------------------------------------
// Lane 0 of each warp writes the sum of its warp; a partial last warp adds only the lanes it has.
template <typename T>
__global__ void warp_sums(const T* x, T* sums) {
  const int t = threadIdx.x, lane = t % warpSize;
  const int lanes = min(warpSize, static_cast<int>(blockDim.x) - (t - lane));
  const int warps = (blockDim.x + warpSize - 1) / warpSize;
  T value = x[blockIdx.x * blockDim.x + t];
  for (int offset = warpSize / 2; offset > 0; offset /= 2) {
    const T other = __shfl_down_sync(0xffffffffu, value, offset);
    if (lane + offset < lanes) value += other;
  }
  if (lane == 0) sums[blockIdx.x * warps + t / warpSize] = value;
}

template <typename T>
void check_warp_sums(unsigned threads) {
  const unsigned blocks = 2, warps = (threads + 31) / 32;
  std::vector<T> x(blocks * threads);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<T>(i % 11);
  const DeviceArray<T> device_x(x);
  DeviceArray<T> sums(blocks * warps);
  launch("warp_sums", warp_sums<T>, LaunchShape{blocks, threads}, device_x.get(), sums.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<T> expected(blocks * warps, T{0});
  for (size_t i = 0; i < x.size(); ++i) expected[i / threads * warps + i % threads / 32] += x[i];
  INFO("block of " << threads);
  CHECK(sums.to_host() == expected);
}

// Every lane gets its warp's total (a partial last warp of a power of two lanes, in this test).
__global__ void butterfly_sums(const double* x, double* totals) {
  const int t = threadIdx.x, lane = t % warpSize;
  const int lanes = min(warpSize, static_cast<int>(blockDim.x) - (t - lane));
  double value = x[t];
  for (int mask = warpSize / 2; mask > 0; mask /= 2) {
    const double other = __shfl_xor_sync(0xffffffffu, value, mask);
    if ((lane ^ mask) < lanes) value += other;
  }
  totals[t] = value;
}

// What each shuffle flavour returns: values are 100 + the thread id.
__global__ void shuffle_sources(int* down, int* up, int* broadcast, int* in_eights, int* xor_in_eights) {
  const int t = threadIdx.x, value = 100 + t;
  down[t] = __shfl_down_sync(0xffffffffu, value, 3);
  up[t] = __shfl_up_sync(0xffffffffu, value, 3);
  broadcast[t] = __shfl_sync(0xffffffffu, value, 5);
  in_eights[t] = __shfl_sync(0xffffffffu, value, 13, 8);  // lane 13 % 8 of each group of 8
  xor_in_eights[t] = __shfl_xor_sync(0xffffffffu, value, 9, 8);  // lane ^ 9 leaves the group: own
}

TEST_CASE("emulation: warp shuffle reductions", "[cuda][emulation]") {
  for (unsigned threads : {32u, 48u, 100u, 256u}) {
    check_warp_sums<int>(threads);
    check_warp_sums<unsigned>(threads);
    check_warp_sums<long long>(threads);
    check_warp_sums<float>(threads);
    check_warp_sums<double>(threads);
  }
  for (unsigned threads : {48u, 64u}) {
    std::vector<double> x(threads);
    for (unsigned t = 0; t < threads; ++t) x[t] = t % 5;
    const DeviceArray<double> device_x(x);
    DeviceArray<double> totals(threads);
    launch("butterfly_sums", butterfly_sums, LaunchShape{1, threads}, device_x.get(), totals.get());
    REQUIRE(cudaGetLastError() == cudaSuccess);
    std::vector<double> expected(threads);
    for (unsigned t = 0; t < threads; ++t) {
      const unsigned first = t / 32 * 32, last = std::min(first + 32, threads);
      expected[t] = std::accumulate(x.begin() + first, x.begin() + last, 0.0);
    }
    CHECK(totals.to_host() == expected);
  }
}

TEST_CASE("emulation: shuffle sources, widths and absent lanes", "[cuda][emulation]") {
  const int threads = 40;  // the second warp has lanes 0..7 only
  DeviceArray<int> down(threads), up(threads), broadcast(threads), in_eights(threads), xor_in_eights(threads);
  launch("shuffle_sources", shuffle_sources, LaunchShape{1, threads}, down.get(), up.get(),
         broadcast.get(), in_eights.get(), xor_in_eights.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  std::vector<int> expect_down(threads), expect_up(threads), expect_broadcast(threads), expect_in_eights(threads);
  for (int t = 0; t < threads; ++t) {
    const int lane = t % 32, own = 100 + t;
    expect_down[t] = lane + 3 < 32 && t + 3 < threads ? own + 3 : own;
    expect_up[t] = lane >= 3 ? own - 3 : own;
    expect_broadcast[t] = 100 + t - lane + 5;
    expect_in_eights[t] = 100 + t - t % 8 + 5;
  }
  CHECK(down.to_host() == expect_down);
  CHECK(up.to_host() == expect_up);
  CHECK(broadcast.to_host() == expect_broadcast);
  CHECK(in_eights.to_host() == expect_in_eights);
  std::vector<int> own(threads);
  std::iota(own.begin(), own.end(), 100);
  CHECK(xor_in_eights.to_host() == own);
}

// ---- Atomics ------------------------------------------------------------------------------------
// With `concurrent`, a barrier first makes the emulation run the block's threads at the same time.
template <bool concurrent>
__global__ void histogram(const int* keys, const float* weights, int n, int* counts, float* totals) {
  if constexpr (concurrent) __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    atomicAdd(&counts[keys[i]], 1);
    atomicAdd(&totals[keys[i]], weights[i]);
  }
}

template <bool concurrent>
void check_histogram() {
  const int n = 10000, bins = 16;
  std::mt19937 random(7);
  std::vector<int> keys(n);
  std::vector<float> weights(n);
  std::vector<int> expected_counts(bins, 0);
  std::vector<float> expected_totals(bins, 0.0f);
  for (int i = 0; i < n; ++i) {
    keys[i] = static_cast<int>(random() % bins);
    weights[i] = 0.25f * static_cast<float>(random() % 8);  // sums stay exact in any order
    expected_counts[keys[i]] += 1;
    expected_totals[keys[i]] += weights[i];
  }
  const DeviceArray<int> device_keys(keys);
  const DeviceArray<float> device_weights(weights);
  DeviceArray<int> counts(bins, 0);
  DeviceArray<float> totals(bins, 0.0f);
  launch("histogram", histogram<concurrent>, LaunchShape{8, 128}, device_keys.get(),
         device_weights.get(), n, counts.get(), totals.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  INFO((concurrent ? "threads run concurrently" : "threads run one after another"));
  CHECK(counts.to_host() == expected_counts);
  CHECK(totals.to_host() == expected_totals);
}

TEST_CASE("emulation: atomic histogram", "[cuda][emulation]") {
  check_histogram<false>();
  check_histogram<true>();
}

struct AtomicResults {
  int max_int = -1000, min_int = 1000;
  unsigned max_unsigned = 0, min_unsigned = ~0u;
  long long max_long = -1, min_long = 1LL << 60;
  unsigned long long max_ulong = 0, min_ulong = ~0ull, sum_ulong = 0;
  unsigned sum_unsigned = 0;
  double sum_double = 0;
  int claimed_by = -1, claims = 0;
  int token = -1;
};

// Thread i offers i to every kind of atomic; takes the token (atomicExch) and records what it held.
__global__ void atomic_operations(AtomicResults* r, int* previous_holders) {
  __syncthreads();  // run the block's threads concurrently
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicMax(&r->max_int, i - 50);
  atomicMin(&r->min_int, i - 50);
  atomicMax(&r->max_unsigned, static_cast<unsigned>(i));
  atomicMin(&r->min_unsigned, static_cast<unsigned>(i));
  atomicMax(&r->max_long, i * (1LL << 40));
  atomicMin(&r->min_long, i * (1LL << 40));
  atomicMax(&r->max_ulong, static_cast<unsigned long long>(i));
  atomicMin(&r->min_ulong, static_cast<unsigned long long>(i));
  atomicAdd(&r->sum_ulong, static_cast<unsigned long long>(i));
  atomicAdd(&r->sum_unsigned, 1u);
  atomicAdd(&r->sum_double, 0.5);
  if (atomicCAS(&r->claimed_by, -1, i) == -1) atomicAdd(&r->claims, 1);
  previous_holders[i] = atomicExch(&r->token, i);
}

TEST_CASE("emulation: atomic max, min, compare-and-swap and exchange", "[cuda][emulation]") {
  const int blocks = 3, threads = 64, n = blocks * threads;
  DeviceArray<AtomicResults> results(std::vector<AtomicResults>(1));
  DeviceArray<int> previous(n);
  launch("atomic_operations", atomic_operations, LaunchShape{blocks, threads}, results.get(), previous.get());
  REQUIRE(cudaGetLastError() == cudaSuccess);
  const AtomicResults r = results.to_host()[0];
  CHECK(r.max_int == n - 51);
  CHECK(r.min_int == -50);
  CHECK(r.max_unsigned == n - 1u);
  CHECK(r.min_unsigned == 0u);
  CHECK(r.max_long == (n - 1) * (1LL << 40));
  CHECK(r.min_long == 0);
  CHECK(r.max_ulong == n - 1u);
  CHECK(r.min_ulong == 0u);
  CHECK(r.sum_ulong == n * (n - 1ull) / 2);
  CHECK(r.sum_unsigned == static_cast<unsigned>(n));
  CHECK(r.sum_double == 0.5 * n);
  CHECK(r.claims == 1);
  CHECK((r.claimed_by >= 0 && r.claimed_by < n));
  // The token passed through every thread once: the old values and the final holder are -1..n-1.
  std::vector<int> holders = previous.to_host();
  holders.push_back(r.token);
  std::sort(holders.begin(), holders.end());
  std::vector<int> everyone(n + 1);
  std::iota(everyone.begin(), everyone.end(), -1);
  CHECK(holders == everyone);

  unsigned word = 5;
  unsigned long long wide = 7;
  float single = 1.5f;
  CHECK(atomicCAS(&word, 5u, 6u) == 5u);
  CHECK(atomicCAS(&word, 5u, 9u) == 6u);  // no match: unchanged
  CHECK(atomicCAS(&wide, 7ull, 8ull) == 7ull);
  CHECK(atomicExch(&single, 2.5f) == 1.5f);
  CHECK((word == 6u && wide == 8ull && single == 2.5f));
}
}  // namespace
