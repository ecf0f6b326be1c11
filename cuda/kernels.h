#pragma once
// The CUDA implementation of the kernel interface (autograd/kernels.h). One instance per GPU;
// each call makes its device current first. The files mirror the CPU backend's (cpu/), one
// concern each:
//   memory.cu       caching allocator, copies (strided, dtype-converting), host transfers,
//                   fill, Philox uniform, index screening, the CUDA error checks
//   elementwise.cu  unary, binary, where, compare, predicate (strided and broadcast inputs)
//   reduce.cu       sum/max/gather/scatter-add over a dim, softmax rows, layer-norm rows
//   blas.cu         gemm on cuBLAS; embedding rows (index_select_rows, index_add_rows)
//   indexing.cu     gather / scatter-add along a dim, argsort (a bitonic network per line)
//   attention.cu    fused attention forward and backward (tiled, online softmax)
//   optim.cu        SGD and Adam/AdamW steps, sum of squares, unscale + inf check
//   quantize.cu     int8 rows, the int8 product and its rescale
//   info.cu         device count and descriptions, synchronize, TF32 switch, and the
//                   backend's entry for the registry (cuda_backend(), named by
//                   runtime/backends.cpp when the library is built with CUDA)
#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/autograd/kernels.h"

namespace tg::cuda {

class CudaKernels final : public Kernels {
 public:
  explicit CudaKernels(int device_index) : device_index_(device_index) {}
  const char* name() const override { return "cuda"; }
  int device_index() const { return device_index_; }

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void unary(UnaryOp op, const Tensor& x, double scalar, const Tensor& out) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void predicate(PredicateOp op, const Tensor& x, const Tensor& out) override;
  void sum_dim(const Tensor& x, DimSplit split, const Tensor& out) override;
  void max_dim(const Tensor& x, DimSplit split, const Tensor& values, const Tensor& indices) override;
  void gather_dim(const Tensor& x, DimSplit split, const Tensor& index, const Tensor& out) override;
  void scatter_add_dim(const Tensor& src, DimSplit split, const Tensor& index, const Tensor& out) override;
  void gather_along(const Tensor& line, int64_t step, const Tensor& index,
                    const Tensor& out) override;
  void scatter_add_along(const Tensor& src, const Tensor& index, const Tensor& line,
                         int64_t step) override;
  void argsort_dim(const Tensor& x, DimSplit split, bool descending,
                   const Tensor& indices) override;
  void softmax_dim(const Tensor& x, DimSplit split, bool log, const Tensor& out) override;
  void gemm(const GemmBatch& batch) override;
  void index_select_rows(const Tensor& table, const Tensor& index, const Tensor& out) override;
  void index_add_rows(const Tensor& src, const Tensor& index, const Tensor& table) override;
  void normalize_rows(const Tensor& x, double eps, const Tensor& out, const Tensor& mean,
                      const Tensor& rstd) override;
  void uniform(const Tensor& out, uint64_t seed, uint64_t offset) override;
  void attention_forward(const AttentionProblem& problem, const Tensor& out,
                         const Tensor& logsumexp) override;
  void attention_backward(const AttentionProblem& problem, const Tensor& out,
                          const Tensor& logsumexp, const Tensor& grad_out, const Tensor& grad_q,
                          const Tensor& grad_k, const Tensor& grad_v) override;
  void synchronize() override;  // cudaDeviceSynchronize (info.cu)
  void copy_from_host(const void* host_bytes, const Tensor& dst) override;
  void copy_to_host(const Tensor& src, void* host_bytes) override;
  IndexSummary screen_indices(const Tensor& index, int64_t ignore, const Tensor& safe,
                              const Tensor& keep) override;
  void sgd_step(const SgdStep& step, const Tensor& param, const Tensor& grad,
                const Tensor& momentum_buffer) override;
  void adam_step(const AdamStep& step, const Tensor& param, const Tensor& grad,
                 const Tensor& exp_avg, const Tensor& exp_avg_sq) override;
  void accumulate_sum_of_squares(const Tensor& x, const Tensor& total) override;
  void unscale_and_check(const Tensor& grad, double inv_scale, const Tensor& out,
                         const Tensor& found_inf) override;
  void quantize_rows(const Tensor& x, double fixed_scale, int levels, const Tensor& q,
                     const Tensor& scale) override;
  void gemm_i8(const Tensor& a, const Tensor& b, const Tensor& acc) override;
  void dequantize_product(const Tensor& acc, const Tensor& row_scale, const Tensor& col_scale,
                          const Tensor& bias, const Tensor& out) override;

 private:
  int device_index_;
};

// Makes the kernels' device current for the scope of a call (cudaSetDevice when it differs).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device_index);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// Devices, for the registry and `tapegrad info` (info.cu).
int device_count();                        // 0 when no GPU or no driver is present
std::vector<std::string> describe_devices();  // name, memory, compute capability, versions
CudaKernels& kernels_for(int device_index);
// The backend for the registry: put there by runtime/backends.cpp in a build with CUDA, and
// registered by the tests' emulated device (tests/cuda/emulation/register_backend.cpp).
Backend cuda_backend();

// The counterpart of torch.backends.cuda.matmul.allow_tf32 (off by default): lets cuBLAS round
// f32 GEMM inputs to TF32. The same switch as tg::math_modes().allow_tf32.
void allow_tf32(bool allowed);

// The caching allocator's own counters: bytes held from cudaMalloc (in use or cached).
struct CacheStats {
  int64_t reserved_bytes = 0;
  int64_t cached_blocks = 0;
};
CacheStats cache_stats(int device_index);
void empty_cache(int device_index);  // returns cached blocks to cudaFree

}  // namespace tg::cuda
