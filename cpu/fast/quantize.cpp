// The fast paths of the CPU int8 kernels (cpu/fast/quantize.h): choosing the instruction set, packing
// the operands into the layouts of cpu/fast/quantize_kernels.h, and spreading rows over the threads.
#include "tapegrad/cpu/fast/quantize.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/cpu/fast/quantize_kernels.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/thread_pool.h"

namespace tg::cpu::int8 {
namespace {

// Rows of A a thread packs and multiplies at a time: a multiple of the kernels' 6-, 5- and 4-row
// blocks, small enough that the packed rows (60 x 256 bytes at k = 256) stay in L1 beside B's
// panels (the widening AVX2 kernel's i16 rows: twice that, in L2).
constexpr int64_t kChunkRows = 60;
// The work thresholds (the thread policy: runtime/threads.h): products of at most this many
// multiply-adds run on the calling thread (waking a thread costs microseconds), and so do row
// loops over at most kParallelInt8Elements elements in all, as in the plain cpu/quantize.cpp.
constexpr int64_t kParallelInt8Work = int64_t{1} << 20;
constexpr int64_t kParallelInt8Elements = int64_t{1} << 14;

// A product's f32 output of at least this many bytes is streamed to memory (ProductRows::
// stream_out): one that large leaves the cache before the next op reads it anyway, and writing it
// through the cache first reads every line in (measured in bench/RESULTS.md).
constexpr int64_t kStreamOutBytes = int64_t{4} << 20;

// Whether the f32 output out [m, n] is streamed: large, and every row's lines whole (out 64-byte
// aligned, n a multiple of 16).
bool streams_output(const float* out, int64_t m, int64_t n) {
  return m * n * static_cast<int64_t>(sizeof(float)) >= kStreamOutBytes && n % 16 == 0 &&
         reinterpret_cast<uintptr_t>(out) % 64 == 0;
}

// Where a product's rows of C go: into c [m, n] (gemm), or, when c is null, rescaled into out
// [m, n] f32 (quantized_product, quantized_linear) as they leave the kernel's registers
// (ProductRows; the widening AVX2 kernel rescales each chunk's i32 rows while they are in cache):
// no i32 [m, n] in memory.
struct ProductOutput {
  const BOwner* owner = nullptr;  // B's, to keep it packed; null: pack it for this product only
  int32_t* c = nullptr;
  const float* row_scale = nullptr;
  const float* col_scale = nullptr;
  const float* bias = nullptr;  // may be null
  float* out = nullptr;
  bool stream_out = false;  // ProductRows::stream_out (streams_output)
};

// Where a product's A comes from: i8 rows `a` [m, k] (gemm, quantized_product), or, when a is
// null, f32 rows `x` [m, k] that each chunk quantizes (quantize_row_avx2) straight into the packed
// layout, writing their scales into row_scale (quantized_linear: x read once, no i8 [m, k] in
// memory). Only the u8 layouts take x: VNNI's, and the 7-bit AVX2 kernel's with levels <= 63.
struct ProductInput {
  const int8_t* a = nullptr;
  const float* x = nullptr;
  bool per_row = true;      // x: a scale per row, else fixed_scale for all
  float fixed_scale = 0;
  float levels = 127;
  float* row_scale = nullptr;  // x: its rows' scales, written here
};

// Rows `first` on of where a product goes (n columns), as the kernels take them.
ProductRows rows_from(const ProductOutput& output, int64_t first, int64_t n) {
  ProductRows rows{};  // every pointer null, every stride 0
  if (output.c) {
    rows.c = output.c + first * n;
    rows.ldc = n;
  } else {
    rows.row_scale = output.row_scale + first;
    rows.col_scale = output.col_scale;
    rows.shift = output.bias;
    rows.out = output.out + first * n;
    rows.ldo = n;
    rows.stream_out = output.stream_out;
  }
  return rows;
}

// One panel of B [n, k]: columns [panel kWidth, + kWidth) in groups of kDepth p (layout in
// cpu/fast/quantize_kernels.h), into `out`; and kCorrection sum_p B(j, p) for each of its columns j
// into `correction`. Both must be zero on entry: the padding (columns past n, p past k) is skipped.
template <typename T, int kWidth, int kDepth, int32_t kCorrection>
void pack_b_panel(const int8_t* b, int64_t n, int64_t k, int64_t groups, int64_t panel, T* out,
                  int32_t* correction) {
  const int64_t first = panel * kWidth;
  const int64_t columns = n - first < kWidth ? n - first : kWidth;
  for (int64_t column = 0; column < columns; ++column) {
    const int8_t* row = b + (first + column) * k;
    int32_t sum = 0;
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t t = 0; t < kDepth && g * kDepth + t < k; ++t) {
        out[(g * kWidth + column) * kDepth + t] = static_cast<T>(row[g * kDepth + t]);
        sum += row[g * kDepth + t];
      }
    }
    // 128 sum, wrapped to 32 bits as the kernels' i32 sums wrap (exact in the end, autograd/kernels.h);
    // the product is taken unsigned, where wrapping is defined: |sum| <= 128 k reaches 2^24.
    correction[column] = static_cast<int32_t>(static_cast<uint32_t>(kCorrection) * static_cast<uint32_t>(sum));
  }
}

// Rows [0, rows) of A [., k] into rows of groups x kDepth entries, convert(A(i, p)), zero-padded.
template <typename T, int kDepth, typename Convert>
void pack_a_rows(const int8_t* a, int64_t rows, int64_t k, int64_t groups, Convert convert, T* out) {
  const int64_t depth = groups * kDepth;
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t p = 0; p < k; ++p) out[i * depth + p] = convert(a[i * k + p]);
    for (int64_t p = k; p < depth; ++p) out[i * depth + p] = T{0};
  }
}

// Rows [first, first + rows) of input.x, quantized (quantize_row_avx2) into rows of groups x kDepth
// bytes A(i, p) + kOffset, zero-padded: what pack_a_rows makes of quantize_rows' i8 rows with the
// convert A + kOffset, byte for byte.
template <int kDepth, uint8_t kOffset>
void quantize_a_rows(const ProductInput& input, int64_t first, int64_t rows, int64_t k,
                     int64_t groups, uint8_t* out) {
  const int64_t depth = groups * kDepth;
  for (int64_t i = 0; i < rows; ++i) {
    uint8_t* row = out + i * depth;
    input.row_scale[first + i] = quantize_row_avx2(input.x + (first + i) * k, k, input.per_row,
                                                   input.fixed_scale, input.levels, kOffset, row);
    std::fill(row + k, row + depth, uint8_t{0});
  }
}

// Whether every value of `a` is in [-64, 63]: A where the 7-bit AVX2 kernel is exact, and B where
// it takes two groups a vpmaddwd (cpu/fast/quantize_kernels.h).
bool fits_seven_bits(const int8_t* a, int64_t count) {
  int8_t lowest = 0, highest = 0;
  for (int64_t i = 0; i < count; ++i) {
    lowest = a[i] < lowest ? a[i] : lowest;
    highest = a[i] > highest ? a[i] : highest;
  }
  return lowest >= -64 && highest <= 63;
}

// B packed in one kernel's layout (TB values in `values`), with its correction, and whether all
// of B is 7-bit.
template <typename TB>
struct PackedB {
  std::vector<TB> values;
  std::vector<int32_t> correction;
  bool seven_bit = false;
};

// All of B [n, k] packed (pack_b_panel), the panels split over the threads when `split`.
template <typename TB, int kWidth, int kDepth, int32_t kCorrection>
std::shared_ptr<const PackedB<TB>> pack_int8_b(const int8_t* b, int64_t n, int64_t k,
                                               bool split) {
  const int64_t groups = (k + kDepth - 1) / kDepth;
  const int64_t panels = (n + kWidth - 1) / kWidth;
  const int64_t panel_size = groups * kWidth * kDepth;
  auto packed = std::make_shared<PackedB<TB>>();
  packed->values.resize(panels * panel_size);      // zeros: the padding stays so
  packed->correction.resize(panels * kWidth);      // zeros
  packed->seven_bit = fits_seven_bits(b, n * k);
  parallel_for(panels, split ? 1 : panels, [&](int64_t first_panel, int64_t past_panel) {
    for (int64_t panel = first_panel; panel < past_panel; ++panel) {
      pack_b_panel<TB, kWidth, kDepth, kCorrection>(b, n, k, groups, panel,
                                                    packed->values.data() + panel * panel_size,
                                                    packed->correction.data() + panel * kWidth);
    }
  });  // parallel_for returns when every panel is packed
  return packed;
}

// One B kept packed for later products (cpu/fast/quantize.h, BOwner): whose storage (compared by
// identity: owner_before both ways), where in it, which version, which layout.
struct PackedEntry {
  std::weak_ptr<const void> storage;
  const int8_t* data = nullptr;
  int64_t n = 0, k = 0;
  uint64_t version = 0;
  int64_t layout = 0;
  std::shared_ptr<const void> packed;  // a PackedB<TB> of the layout
};
constexpr size_t kPackedEntries = 256;  // the oldest goes beyond this
std::mutex packed_mutex;
std::vector<PackedEntry> packed_entries;  // oldest first

// Whether two weak pointers share one owner (the same storage, alive or not).
bool same_b_owner(const std::weak_ptr<const void>& x, const std::weak_ptr<const void>& y) {
  return !x.owner_before(y) && !y.owner_before(x);
}

// B packed in `layout` for `owner`'s current version: from the cache, else packed now and kept
// (replacing the entries of its older versions; dropping those whose storage is gone).
template <typename TB, int kWidth, int kDepth, int32_t kCorrection>
std::shared_ptr<const PackedB<TB>> packed_weight(const BOwner* owner, const int8_t* b, int64_t n,
                                                 int64_t k, bool split) {
  if (owner == nullptr) return pack_int8_b<TB, kWidth, kDepth, kCorrection>(b, n, k, split);
  const int64_t layout = (int64_t{kWidth} << 40) | (int64_t{kDepth} << 32) |
                         (int64_t{sizeof(TB)} << 16) | kCorrection;
  const auto same_b = [&](const PackedEntry& e) {
    return e.data == b && e.n == n && e.k == k && e.layout == layout &&
           same_b_owner(e.storage, owner->storage);
  };
  {
    const std::lock_guard<std::mutex> lock(packed_mutex);
    std::erase_if(packed_entries, [](const PackedEntry& e) { return e.storage.expired(); });
    for (const PackedEntry& e : packed_entries) {
      if (same_b(e) && e.version == owner->version) {
        return std::static_pointer_cast<const PackedB<TB>>(e.packed);
      }
    }
  }
  auto packed = pack_int8_b<TB, kWidth, kDepth, kCorrection>(b, n, k, split);  // outside the lock
  const std::lock_guard<std::mutex> lock(packed_mutex);
  std::erase_if(packed_entries, same_b);
  if (packed_entries.size() >= kPackedEntries) packed_entries.erase(packed_entries.begin());
  packed_entries.push_back({owner->storage, b, n, k, owner->version, layout, packed});
  return packed;
}

// The product in two loops on the pool: the threads pack B's panels (and its correction), or
// find them packed (output.owner), then take C's rows in chunks of kChunkRows, each packing its
// chunk of A (TA: convert(A(i, p)), or x's rows quantized) into a buffer of its own and calling
// multiply(packed chunk, rows, where the chunk's rows go (ProductRows), packed B (PackedB)).
template <typename TA, typename TB, int kWidth, int kDepth, int32_t kCorrection, typename Convert,
          typename Multiply>
void packed_product(const ProductInput& input, const int8_t* b, const ProductOutput& output,
                    int64_t m, int64_t n, int64_t k, Convert convert, Multiply multiply) {
  TG_CHECK(input.a != nullptr || (std::is_same_v<TA, uint8_t>),
           "int8 product: f32 rows are quantized into the u8 layouts only");
  const int64_t groups = (k + kDepth - 1) / kDepth;
  const int64_t chunks = (m + kChunkRows - 1) / kChunkRows;
  // Both loops split when the product is above its threshold (packing B, a small part of the
  // work, then one panel a chunk).
  const int64_t grain = grain_for(static_cast<double>(kChunkRows) * n * k, kParallelInt8Work);
  const auto packed_b =
      packed_weight<TB, kWidth, kDepth, kCorrection>(output.owner, b, n, k, chunks > grain);
  parallel_for(chunks, grain, [&](int64_t first_chunk, int64_t past_chunk) {
    std::vector<TA> a_packed(kChunkRows * groups * kDepth);
    for (int64_t chunk = first_chunk; chunk < past_chunk; ++chunk) {
      const int64_t first = chunk * kChunkRows;
      const int64_t rows = m - first < kChunkRows ? m - first : kChunkRows;
      if (input.a != nullptr) {
        pack_a_rows<TA, kDepth>(input.a + first * k, rows, k, groups, convert, a_packed.data());
      } else if constexpr (std::is_same_v<TA, uint8_t>) {
        quantize_a_rows<kDepth, kCorrection>(input, first, rows, k, groups, a_packed.data());
      }
      multiply(a_packed.data(), rows, rows_from(output, first, n), *packed_b);
    }
  });
}

// VNNI: A + 128 as u8, B as s8, and the correction 128 sum_p B(j, p) that takes the + 128 back.
void gemm_vnni(const ProductInput& a, const int8_t* b, const ProductOutput& c, int64_t m,
               int64_t n, int64_t k) {
  const int64_t groups = (k + kVnniDepth - 1) / kVnniDepth;
  const auto plus_128 = [](int8_t v) { return static_cast<uint8_t>(v + 128); };
  packed_product<uint8_t, int8_t, kVnniWidth, kVnniDepth, 128>(
      a, b, c, m, n, k, plus_128,
      [&](const uint8_t* rows_a, int64_t rows, const ProductRows& dest,
          const PackedB<int8_t>& packed) {
        gemm_rows_vnni(rows_a, rows, packed.values.data(), packed.correction.data(), n, groups,
                       dest);
      });
}

// AVX2 on 7-bit A: A + 64 as u8, B as s8, and the correction 64 sum_p B(j, p); two groups a
// vpmaddwd where B is 7-bit too.
void gemm_avx2_bytes(const ProductInput& a, const int8_t* b, const ProductOutput& c, int64_t m,
                     int64_t n, int64_t k) {
  const int64_t groups = (k + kAvx2BytesDepth - 1) / kAvx2BytesDepth;
  const auto plus_64 = [](int8_t v) { return static_cast<uint8_t>(v + 64); };
  packed_product<uint8_t, int8_t, kAvx2BytesWidth, kAvx2BytesDepth, 64>(
      a, b, c, m, n, k, plus_64,
      [&](const uint8_t* rows_a, int64_t rows, const ProductRows& dest,
          const PackedB<int8_t>& packed) {
        gemm_rows_avx2_bytes(rows_a, rows, packed.values.data(), packed.correction.data(), n,
                             groups, packed.seven_bit, dest);
      });
}

// AVX2 on any A: both widened to i16; no correction.
void gemm_avx2(const ProductInput& a, const int8_t* b, const ProductOutput& c, int64_t m,
               int64_t n, int64_t k) {
  const int64_t groups = (k + kAvx2Depth - 1) / kAvx2Depth;
  const auto widen = [](int8_t v) { return static_cast<int16_t>(v); };
  packed_product<int16_t, int16_t, kAvx2Width, kAvx2Depth, 0>(
      a, b, c, m, n, k, widen,
      [&](const int16_t* rows_a, int64_t rows, const ProductRows& dest,
          const PackedB<int16_t>& packed) {
        const int16_t* b_packed = packed.values.data();
        if (!dest.out) return gemm_rows_avx2(rows_a, rows, b_packed, n, groups, dest.c, dest.ldc);
        std::vector<int32_t> sums(rows * n);  // this kernel stores i32 only: rescaled from here
        gemm_rows_avx2(rows_a, rows, b_packed, n, groups, sums.data(), n);
        for (int64_t i = 0; i < rows; ++i) {
          dequantize_row_avx2(sums.data() + i * n, n, dest.row_scale[i], dest.col_scale, dest.shift,
                              dest.out + i * dest.ldo);
        }
      });
}

}  // namespace

bool isa_supported(Isa isa) {
  return isa == Isa::avx512_vnni ? cpu_has_avx512_vnni() : cpu_has_avx2_fma();
}

Isa best_isa() { return cpu_has_avx512_vnni() ? Isa::avx512_vnni : Isa::avx2; }

const char* isa_name(Isa isa) { return isa == Isa::avx512_vnni ? "AVX-512 VNNI" : "AVX2"; }

Path parse_path(const char* value) {
  const std::string name = value ? value : "";
  if (name.empty()) {
    if (!cpu_has_avx2_fma()) return Path::plain;
    return best_isa() == Isa::avx512_vnni ? Path::avx512_vnni : Path::avx2;
  }
  TG_CHECK(name == "avx2" || name == "vnni" || name == "plain", kPathVariable, "='", name,
           "': expected avx2, vnni or plain (or unset: the best this CPU has)");
  if (name == "plain") return Path::plain;
  const Isa isa = name == "vnni" ? Isa::avx512_vnni : Isa::avx2;
  TG_CHECK(isa_supported(isa), kPathVariable, "=", name, ": this CPU has no ",
           isa == Isa::avx2 ? "AVX2 + FMA" : "AVX-512 VNNI", " (unset it for the best it has)");
  return isa == Isa::avx512_vnni ? Path::avx512_vnni : Path::avx2;
}

namespace {
std::atomic<int> path_override{-1};  // a PathScope's Path, or -1
}  // namespace

Path selected_path() {
  const int forced = path_override.load(std::memory_order_relaxed);
  if (forced >= 0) return static_cast<Path>(forced);
  static const Path chosen = parse_path(std::getenv(kPathVariable));  // a throw: asked again
  return chosen;
}

PathScope::PathScope(Path path) : previous_(path_override.load()) {
  TG_CHECK(path == Path::plain || isa_supported(path == Path::avx2 ? Isa::avx2 : Isa::avx512_vnni),
           "int8 PathScope: this CPU cannot run ", path_description(path));
  path_override.store(static_cast<int>(path));
}
PathScope::~PathScope() { path_override.store(previous_); }

const char* path_description(Path path) {
  switch (path) {
    case Path::avx512_vnni: return "AVX-512 VNNI vpdpbusd";
    case Path::avx2: return "AVX2 vpmaddubsw/vpmaddwd on 7-bit activations and weights";
    case Path::plain: break;
  }
  return "plain loops (the reference)";
}

namespace {
// The product on `isa` into `c` (ProductOutput): VNNI, or AVX2's 7-bit kernel where A allows it
// (f32 rows to quantize always do: quantized_linear takes them on AVX2 at <= 63 levels only).
void run_product(const ProductInput& a, const int8_t* b, const ProductOutput& c, int64_t m,
                 int64_t n, int64_t k, Isa isa) {
  TG_CHECK(isa_supported(isa), "int8 gemm: this CPU has no ", isa_name(isa));
  if (m == 0 || n == 0) return;
  if (isa == Isa::avx512_vnni) {
    gemm_vnni(a, b, c, m, n, k);
  } else if (a.a == nullptr || fits_seven_bits(a.a, m * k)) {
    gemm_avx2_bytes(a, b, c, m, n, k);
  } else {
    gemm_avx2(a, b, c, m, n, k);
  }
}
}  // namespace

void gemm(const int8_t* a, const int8_t* b, int32_t* c, int64_t m, int64_t n, int64_t k, Isa isa,
          const BOwner* owner) {
  run_product(ProductInput{.a = a}, b, ProductOutput{.owner = owner, .c = c}, m, n, k, isa);
}

void quantized_product(const int8_t* a, const int8_t* b, int64_t m, int64_t n, int64_t k, Isa isa,
                       const float* row_scale, const float* col_scale, const float* bias,
                       float* out, const BOwner* owner) {
  const ProductOutput rescaled{.owner = owner, .row_scale = row_scale, .col_scale = col_scale,
                               .bias = bias, .out = out, .stream_out = streams_output(out, m, n)};
  run_product(ProductInput{.a = a}, b, rescaled, m, n, k, isa);
}

bool quantized_linear_takes(Isa isa, int levels) {
  return isa == Isa::avx512_vnni || levels <= kAvx2ActivationLevels;
}

void quantized_linear(const float* x, const int8_t* b, int64_t m, int64_t n, int64_t k, Isa isa,
                      double fixed_scale, int levels, const float* col_scale, const float* bias,
                      float* row_scale, float* out, const BOwner* owner) {
  TG_CHECK(quantized_linear_takes(isa, levels), "int8 quantized_linear: the ", isa_name(isa),
           " kernel cannot take ", levels, " activation levels");
  const ProductInput rows{.x = x, .per_row = fixed_scale <= 0,  // as quantize_rows decides
                          .fixed_scale = static_cast<float>(fixed_scale),
                          .levels = static_cast<float>(levels), .row_scale = row_scale};
  const ProductOutput rescaled{.owner = owner, .row_scale = row_scale, .col_scale = col_scale,
                               .bias = bias, .out = out, .stream_out = streams_output(out, m, n)};
  run_product(rows, b, rescaled, m, n, k, isa);
}

void quantize_rows(const float* x, int64_t rows, int64_t cols, double fixed_scale, int levels,
                   int8_t* q, float* scale) {
  const bool per_row = fixed_scale <= 0;  // as the plain loop decides (a tiny scale may round to 0.0f)
  const float fixed = static_cast<float>(fixed_scale);
  parallel_for(rows, grain_for(cols, kParallelInt8Elements), [&](int64_t first, int64_t past) {
    for (int64_t r = first; r < past; ++r) {
      scale[r] = quantize_row_avx2(x + r * cols, cols, per_row, fixed, static_cast<float>(levels),
                                   0, reinterpret_cast<uint8_t*>(q + r * cols));
    }
  });
}

void dequantize_product(const int32_t* acc, int64_t m, int64_t n, const float* row_scale,
                        const float* col_scale, const float* bias, float* out) {
  parallel_for(m, grain_for(n, kParallelInt8Elements), [&](int64_t first, int64_t past) {
    for (int64_t i = first; i < past; ++i) {
      dequantize_row_avx2(acc + i * n, n, row_scale[i], col_scale, bias, out + i * n);
    }
  });
}

}  // namespace tg::cpu::int8
