// `tapegrad bench --workload gemm-i8` (cli/bench_gemm_i8.h): the timing loop and the table.
#include "tapegrad/cli/bench_gemm_i8.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/cpu/fast/quantize.h"
#include "tapegrad/ops/ops.h"
#include "tapegrad/ops/quantize.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/threads.h"

namespace tg::cli {
namespace {

struct Shape3 {
  int64_t m, n, k;  // x [m, k], W [n, k]
  const char* what;
};

// textcls-mid's Linears (batch 16 x seq 128 tokens of dim 256, and its classifier head on the
// 16 pooled rows), a wider layer, and an odd shape that fits no kernel's blocks.
const Shape3 kShapes[] = {{2048, 256, 256, "textcls-mid q/k/v/o"},
                          {16, 4, 256, "textcls-mid head"},
                          {2048, 1024, 1024, "a 1024-wide layer"},
                          {1000, 77, 301, "odd"}};

struct Timing {
  double median_ms = 0, min_ms = 0;
};

Timing time_runs(const std::function<void()>& run, const GemmI8BenchOptions& options) {
  for (int i = 0; i < options.warmup; ++i) run();
  std::vector<double> ms(options.steps);
  for (double& t : ms) {
    const auto start = std::chrono::steady_clock::now();
    run();
    t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  }
  std::sort(ms.begin(), ms.end());
  return {ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2, ms[0]};
}

}  // namespace

int bench_gemm_i8(const GemmI8BenchOptions& options) {
  const NoGrad no_grad;
  manual_seed(0);
  if (!options.json) {
    std::printf("int8 vs f32 products on the CPU, %d threads (BLAS single-threaded), median of %d runs\n",
                num_threads(), options.steps);
    std::printf("%-16s %-32s %9s %9s %8s %8s\n", "shape m x n x k", "kernel", "ms", "min ms", "GOP/s", "vs f32");
  }
  for (const Shape3& s : kShapes) {
    const Tensor x = uniform({s.m, s.k}, -1, 1), w = uniform({s.n, s.k}, -0.1, 0.1), bias = uniform({s.n}, -1, 1);
    const Tensor w_t = w.transpose(0, 1);
    const QuantizedRows wq = quantize_rows(w), xq = quantize_rows(x);
    const QuantizedRows xq7 = quantize_rows(x, 0, cpu::int8::kAvx2ActivationLevels);  // AVX2's
    const QuantizedRows wq7 = quantize_rows(w, 0, cpu::int8::kAvx2WeightLevels);
    const QuantizedRows w_linear = quantize_weight(w);  // what a quantized Linear holds here
    const Tensor acc = empty({s.m, s.n}, DType::i32);
    const double ops = 2.0 * s.m * s.n * s.k;
    // One row; GOP/s and the speedup from the medians (a busy machine shows in the minimum).
    const auto report = [&](const std::string& kernel, const Timing& t, double baseline_ms) {
      const double ms = t.median_ms, gops = ops / (ms / 1e3) / 1e9;
      char shape[64];
      std::snprintf(shape, sizeof shape, "%lldx%lldx%lld", static_cast<long long>(s.m),
                    static_cast<long long>(s.n), static_cast<long long>(s.k));
      if (options.json) {
        std::cout << nlohmann::json{{"shape", shape}, {"what", s.what}, {"kernel", kernel},
                                    {"threads", num_threads()}, {"ms", ms}, {"min_ms", t.min_ms}, {"gops", gops},
                                    {"speedup_vs_f32", baseline_ms / ms}}.dump()
                  << "\n";
      } else {
        std::printf("%-16s %-32s %9.4f %9.4f %8.1f %7.2fx\n", shape, kernel.c_str(), ms, t.min_ms, gops,
                    baseline_ms / ms);
      }
    };
    const Timing f32 = time_runs([&] { const Tensor y = matmul(x, w_t); }, options);
    const double f32_ms = f32.median_ms;
    report("f32 x W^T (OpenBLAS sgemm)", f32, f32_ms);
    const auto product = [&] { kernels(kCPU).gemm_i8(xq.values, wq.values, acc); };
    if (cpu::fast_paths_enabled()) {
      for (auto isa : {cpu::int8::Isa::avx512_vnni, cpu::int8::Isa::avx2}) {
        if (!cpu::int8::isa_supported(isa)) continue;
        // AVX2: full-range a (vpmaddwd), 7-bit a, 7-bit a and b (two groups a vpmaddwd)
        const std::pair<const QuantizedRows*, const QuantizedRows*> operands[] = {
            {&xq, &wq}, {&xq7, &wq}, {&xq7, &wq7}};
        for (const auto& pair : operands) {
          const QuantizedRows* a = pair.first;  // (not a structured binding: the lambda takes it)
          const QuantizedRows* b = pair.second;
          if (a == &xq7 && isa != cpu::int8::Isa::avx2) continue;
          const Timing t = time_runs([&] {
            cpu::int8::gemm(a->values.data_as<int8_t>(), b->values.data_as<int8_t>(),
                            acc.data_as<int32_t>(), s.m, s.n, s.k, isa);
          }, options);
          const std::string name = std::string("int8 gemm_i8, ") + cpu::int8::isa_name(isa);
          report(a == &xq ? name : b == &wq ? name + " 7-bit a" : name + " 7-bit a, b", t, f32_ms);
        }
      }
    }
    {
      const cpu::FastPathsOff plain;
      GemmI8BenchOptions fewer = options;  // the plain loop is slow; a few runs tell enough
      fewer.steps = std::min(options.steps, 3);
      fewer.warmup = std::min(options.warmup, 1);
      report("int8 gemm_i8, plain loop", time_runs(product, fewer), f32_ms);
    }
    const Timing f32_linear = time_runs([&] { const Tensor y = linear(x, w, bias); }, options);
    const double f32_linear_ms = f32_linear.median_ms;
    report("f32 linear (x W^T + b)", f32_linear, f32_linear_ms);
    const auto int8_linear = [&] { const Tensor y = quantized_linear(x, w_linear, bias); };
    report("quantized_linear (fast paths)", time_runs(int8_linear, options), f32_linear_ms);
    {
      const cpu::FastPathsOff plain;
      GemmI8BenchOptions fewer = options;
      fewer.steps = std::min(options.steps, 3);
      fewer.warmup = std::min(options.warmup, 1);
      report("quantized_linear (plain loops)", time_runs(int8_linear, fewer), f32_linear_ms);
    }
  }
  return 0;
}

}  // namespace tg::cli
