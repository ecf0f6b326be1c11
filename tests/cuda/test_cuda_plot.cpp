// plot/plot.h on tensors that live on the CUDA device: each call copies them to the host itself,
// so a picture of a device tensor is the very file drawn from the same values on the CPU (byte
// for byte), for every floating dtype, a strided view, and attention weights of a batch item.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/plot/plot.h"
#include "tests/support/temp_files.h"
#include "cuda_test_support.h"

using namespace tg;
using namespace tg::testing;

TEST_CASE("plot::heatmap and attention_grid of CUDA tensors draw the CPU tensors' PNGs",
          "[cuda][plot]") {
  TempDir dir;
  for (const DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(dtype));
    const Tensor matrix = random_tensor({5, 7}, dtype, 11);
    plot::heatmap(dir.file("cpu.png"), matrix, {.title = "m", .vmin = -1.0});
    plot::heatmap(dir.file("cuda.png"), on_cuda(matrix), {.title = "m", .vmin = -1.0});
    CHECK(read_bytes(dir.file("cuda.png")) == read_bytes(dir.file("cpu.png")));
  }
  // A transposed view on the device, drawn as the matrix it shows.
  const Tensor square = random_tensor({6, 6}, DType::f32, 12);
  plot::heatmap(dir.file("cpu-t.png"), square.transpose(0, 1));
  plot::heatmap(dir.file("cuda-t.png"), on_cuda(square).transpose(0, 1));
  CHECK(read_bytes(dir.file("cuda-t.png")) == read_bytes(dir.file("cpu-t.png")));
  // Batch item 1 of [2, 3, 4, 4] weights, with NaN among them.
  std::vector<double> values = random_values(2 * 3 * 16, 13, 0, 1);
  values[60] = kNaN;
  const Tensor weights = from_values(values, {2, 3, 4, 4});
  const plot::AttentionGridOptions options{.tokens = {"a", "b", "c", "d"}, .batch = 1};
  plot::attention_grid(dir.file("cpu-a.png"), weights, options);
  plot::attention_grid(dir.file("cuda-a.png"), on_cuda(weights), options);
  CHECK(read_bytes(dir.file("cuda-a.png")) == read_bytes(dir.file("cpu-a.png")));
}
