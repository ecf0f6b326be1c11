#pragma once
// The fast paths of the CPU int8 kernels (CpuKernels::quantize_rows, gemm_i8, dequantize_product;
// their plain loops in cpu/quantize.cpp stay the readable reference). CpuKernels takes these
// where cpu::fast_paths_enabled() (runtime/features.h); every result equals the plain loop's bit
// for bit.
//
// The product C [m, n] i32 = A [m, k] i8 B [n, k]^T i8 runs on the chosen instruction set
// (selected_path below): AVX-512 VNNI (vpdpbusd: 64 multiply-adds of bytes per instruction), or
// AVX2: vpmaddubsw + vpmaddwd (32 per pair of instructions) when every A(i, p) is in [-64, 63]
// (7-bit activations: what quantized_linear gives on this path), else vpmaddwd on values widened
// to i16 (16 per instruction) for full-range A. B, a Linear's weight, is packed into the
// kernel's layout (cpu/fast/quantize_kernels.h) by the threads together, once (BOwner below:
// what makes decoding one token at a time, m = 1, cost the product and not the packing); each
// thread packs its own blocks of A's rows and computes those rows of C (the thread pool).
#include <cstdint>
#include <memory>

namespace tg::cpu::int8 {

enum class Isa { avx2, avx512_vnni };

Isa best_isa();                 // avx512_vnni where the CPU has it, else avx2 (needs AVX2)
bool isa_supported(Isa isa);    // whether this CPU can run the kernel
const char* isa_name(Isa isa);  // "AVX2", "AVX-512 VNNI"

// The int8 kernels CpuKernels runs where cpu::fast_paths_enabled() (cpu/quantize.cpp): the
// environment variable TAPEGRAD_INT8_KERNEL (avx2 | vnni | plain), read at the first int8 op,
// else the best this CPU has (vnni, else avx2; plain without AVX2). `avx2` runs the AVX2 kernels
// on a CPU that has VNNI too (what a machine without VNNI runs); `plain` the reference loops. A
// value that is none of these, or one this CPU cannot run, is a tg::Error naming the variable at
// every int8 op (and in `tapegrad info`). A FastPathsOff scope still means plain.
enum class Path { plain, avx2, avx512_vnni };
inline constexpr const char* kPathVariable = "TAPEGRAD_INT8_KERNEL";
Path parse_path(const char* value);       // the variable's value; null or "": the best; checked
Path selected_path();                     // parse_path(getenv(kPathVariable)), asked once
const char* path_description(Path path);  // e.g. "AVX-512 VNNI vpdpbusd", for `tapegrad info`

// While one exists, selected_path() answers `path` (which this CPU must run): the tests' way to
// run the AVX2 path, numbers included, on a CPU with VNNI. Not for concurrent use.
class PathScope {
 public:
  explicit PathScope(Path path);
  ~PathScope();
  PathScope(const PathScope&) = delete;
  PathScope& operator=(const PathScope&) = delete;

 private:
  int previous_;
};

// The activation levels of the AVX2 path (CpuKernels::int8_activation_levels): 7 bits, [-63, 63],
// so that its vpmaddubsw product is exact (cpu/fast/quantize_kernels.h); the others take 127.
inline constexpr int kAvx2ActivationLevels = 63;
// The weight levels of the AVX2 path (CpuKernels::int8_weight_levels): 7 bits too, so that its
// product adds two groups' vpmaddubsw sums before one vpmaddwd (cpu/fast/quantize_kernels.h).
inline constexpr int kAvx2WeightLevels = 63;

// B's owner, to keep B packed between products: the storage that holds it (compared by identity,
// never by address) and that storage's version. A Linear's weight is packed at its first product
// and kept (at most 256 packed Bs, the oldest dropped first; an entry goes when its storage does),
// and packed again only after an in-place write raised the version: a write through a raw
// pointer must bump_version() (autograd/tensor.h), as it must for the tape.
struct BOwner {
  std::weak_ptr<const void> storage;
  uint64_t version = 0;
};

// c [m, n] = a [m, k] b [n, k]^T, all contiguous row-major; k <= kMaxInt8Depth. The CPU must
// support `isa`. owner: B's, to keep it packed (null: packed for this call only).
void gemm(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k, Isa isa,
          const BOwner* owner = nullptr);

// CpuKernels::quantized_product: gemm, then dequantize_product of each block of rows while it is in
// cache (no i32 [m, n] in memory); bias may be null. Bit for bit the two calls'.
void quantized_product(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, Isa isa,
                       const float* row_scale, const float* col_scale, const float* bias,
                       float* out, const BOwner* owner = nullptr);

// CpuKernels::quantized_linear: out [m, n] = quantized_product(quantize_rows(x, fixed_scale,
// levels), b, ...), bit for bit, with each chunk of x's rows quantized straight into the product's
// packed layout (x read once; no i8 [m, k] in memory); x's row scales are written to row_scale
// [m]. Takes what quantized_linear_takes: VNNI, or AVX2 at <= kAvx2ActivationLevels levels (the
// 7-bit kernel).
bool quantized_linear_takes(Isa isa, int levels);
void quantized_linear(const float* x, const int8_t* b, int64_t m, int64_t n, int64_t k, Isa isa,
                      double fixed_scale, int levels, const float* col_scale, const float* bias,
                      float* row_scale, float* out, const BOwner* owner = nullptr);

// CpuKernels::quantize_rows and dequantize_product (autograd/kernels.h) on raw rows, in AVX2.
void quantize_rows(const float* x, int64_t rows, int64_t cols, double fixed_scale, int levels,
                   int8_t* q, float* scale);
void dequantize_product(const int32_t* acc, int64_t m, int64_t n, const float* row_scale,
                        const float* col_scale, const float* bias, float* out);

}  // namespace tg::cpu::int8
