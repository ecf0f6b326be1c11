// The AVX2 + FMA tile kernels of attention (cpu/fast/attention_tiles.h), where the CPU has them,
// and the AVX-512 products beside them where it has AVX-512 F:
//  - products against a triple loop in double: every block shape (AVX2: 6 rows and 1..5 left
//    over, 16 columns, 8, and partial vectors of 1..15; AVX-512: 8 rows and 1..7 left over, 32
//    columns, 16, and partial vectors of 1..31), A plain and transposed (strides), beta 0 over a C
//    of NaNs, beta 1 and 0.5, and padded leading dimensions whose padding must stay untouched (the
//    masked lanes). The tolerance is the GEMM bound of tests/cpu/test_reference.cpp:
//    (k + 4) u (|alpha| sum_p |a_ip||b_pj| + |beta c_ij|);
//  - the few-query-rows scores (incremental decoding) against the same bound, on keys read in
//    place: blocks of eight keys and what they leave, head widths with and without a tail chunk;
//  - transposes (8 x 8 blocks and what they leave) exactly, padding untouched;
//  - exp2 over rows against std::exp2 within 1.2e-7 relative (the bound of cpu/fast/simd.h), the
//    masked (-inf) entries exactly 0, and the row max, NaNs skipped; beside them the SSE2 row
//    helpers of cpu/fast/simd.h, which the kernel uses without AVX2, on the same rows;
//  - the online softmax step of a tile against the same step in double, on rows with nothing
//    visible, a first visible tile, a max that stays and one that grows; and the backward's two
//    row passes (P = 2^(S - lse), dS = P (dP - D)), a fully masked row and the padding untouched.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tapegrad/cpu/fast/attention_tiles.h"
#include "tapegrad/cpu/fast/simd.h"
#include "tapegrad/runtime/features.h"
#include "tests/support/skip.h"

using namespace tg::cpu;

namespace {

constexpr float kSentinel = 12345.0f;

// sum over p < k of a[p a_step] b[p b_step] in double, and the sum of the terms' sizes (the
// products' error bound is a multiple of it).
struct DotInDouble {
  double sum = 0, bound = 0;
};
DotInDouble dot_in_double(const float* a, int64_t a_step, const float* b, int64_t b_step, int64_t k) {
  DotInDouble dot;
  for (int64_t p = 0; p < k; ++p) {
    const double term = static_cast<double>(a[p * a_step]) * b[p * b_step];
    dot.sum += term;
    dot.bound += std::abs(term);
  }
  return dot;
}

enum class Width { avx2, avx512 };  // which file's products

void check_product(int64_t m, int64_t n, int64_t k, bool transpose_a, float beta, Width width = Width::avx2) {
  INFO("m " << m << ", n " << n << ", k " << k << ", transposed A " << transpose_a << ", beta " << beta
            << (width == Width::avx512 ? ", AVX-512" : ", AVX2"));
  std::mt19937 gen(static_cast<uint32_t>(m * 10007 + n * 101 + k));
  std::uniform_real_distribution<float> dist(-1, 1);
  const int64_t lda = (transpose_a ? m : k) + 2, ldb = n + 3, ldc = n + 5;
  const int64_t a_rows = transpose_a ? k : m;
  std::vector<float> a(a_rows * lda), b(k * ldb), c(m * ldc, kSentinel);
  for (float& x : a) x = dist(gen);
  for (float& x : b) x = dist(gen);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? std::nanf("") : dist(gen);
  }
  const int64_t a_row = transpose_a ? 1 : lda, a_col = transpose_a ? lda : 1;
  const float alpha = -0.75f;

  std::vector<float> result = c;
  const auto gemm = width == Width::avx512 ? tiles::gemm_avx512 : tiles::gemm_avx2;
  gemm(m, n, k, alpha, a.data(), a_row, a_col, b.data(), ldb, beta, result.data(), ldc);
  const double u = 0x1.0p-24;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      INFO("C(" << i << ", " << j << ")");
      if (j >= n) {  // padding: untouched
        REQUIRE(result[i * ldc + j] == kSentinel);
        continue;
      }
      const DotInDouble dot = dot_in_double(a.data() + i * a_row, a_col, b.data() + j, ldb, k);
      double exact = alpha * dot.sum, bound = std::abs(alpha) * dot.bound;
      if (beta != 0) {
        exact += static_cast<double>(beta) * c[i * ldc + j];
        bound += std::abs(static_cast<double>(beta) * c[i * ldc + j]);
      }
      REQUIRE(std::abs(result[i * ldc + j] - exact) <= (k + 4) * u * bound + 1e-30);
    }
  }
}

// The backward's products that apply the next step as each block is stored: P = 2^(alpha A B -
// shift_i) and dS = P (A B - dot_i), against the product in double and that step in double. A
// rounding e of the product's sum is e ln 2 relative after 2^x (plus 2^x's own 1.2e-7), and
// |P| e after the subtraction (plus the subtraction's and the multiplication's roundings).
void check_fused_products(int64_t m, int64_t n, int64_t k, Width width = Width::avx2) {
  INFO("m " << m << ", n " << n << ", k " << k << (width == Width::avx512 ? ", AVX-512" : ", AVX2"));
  std::mt19937 gen(static_cast<uint32_t>(m * 7919 + n * 31 + k));
  std::uniform_real_distribution<float> dist(-1, 1);
  const int64_t lda = k + 2, ldb = n + 3, ldc = n + 5, ld_probs = n + 1;
  std::vector<float> a(m * lda), b(k * ldb), shift(m), dot(m), probs(m * ld_probs);
  for (float& x : a) x = dist(gen);
  for (float& x : b) x = dist(gen);
  for (float& x : shift) x = 4 * dist(gen);
  for (float& x : dot) x = dist(gen);
  for (float& x : probs) x = std::abs(dist(gen));
  const float alpha = 1.25f;
  std::vector<float> p(m * ldc, kSentinel), d_s(m * ldc, kSentinel);
  const bool wide = width == Width::avx512;
  (wide ? tiles::exp2_gemm_avx512 : tiles::exp2_gemm_avx2)(m, n, k, alpha, a.data(), lda, 1, b.data(), ldb,
                                                           shift.data(), p.data(), ldc);
  (wide ? tiles::softmax_grad_gemm_avx512 : tiles::softmax_grad_gemm_avx2)(
      m, n, k, a.data(), lda, 1, b.data(), ldb, probs.data(), ld_probs, dot.data(), d_s.data(), ldc);
  const double u = 0x1.0p-24;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      INFO("C(" << i << ", " << j << ")");
      if (j >= n) {  // padding: untouched
        REQUIRE(p[i * ldc + j] == kSentinel);
        REQUIRE(d_s[i * ldc + j] == kSentinel);
        continue;
      }
      const auto [sum, bound] = dot_in_double(a.data() + i * lda, 1, b.data() + j, ldb, k);
      const double exponent_error = (k + 4) * u * std::abs(alpha) * bound + 2 * u * std::abs(shift[i]);
      const double expected_p = std::exp2(alpha * sum - shift[i]);
      REQUIRE(std::abs(p[i * ldc + j] - expected_p) <= (exponent_error * 0.7 + 1.2e-7) * expected_p);
      const double prob = probs[i * ld_probs + j], expected_d_s = prob * (sum - dot[i]);
      const double gradient_error = prob * ((k + 4) * u * bound + 4 * u * (std::abs(sum) + std::abs(dot[i])));
      REQUIRE(std::abs(d_s[i * ldc + j] - expected_d_s) <= gradient_error + 1e-30);
    }
  }
}

}  // namespace

TEST_CASE("attention tile products: the AVX2 kernel matches a double-precision triple loop", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  // every remainder of 6-row blocks, and 6 + 1, 6 + 2 rows (run as 4 + 3, 4 + 4) after none or more
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 10, 11, 12, 13, 14, 32, 33}) {
    for (int64_t n : {1, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32, 33}) {
      for (int64_t k : {1, 5, 16, 17}) {
        for (bool transpose_a : {false, true}) {
          check_product(m, n, k, transpose_a, 0.0f);
          check_product(m, n, k, transpose_a, 1.0f);
        }
      }
    }
  }
  check_product(64, 128, 32, false, 0.5f);  // a full attention tile
  check_product(128, 32, 64, true, 1.0f);
}

TEST_CASE("attention tile products with the backward's next step: 2^(alpha A B - shift) and P (A B - dot)",
          "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  for (int64_t m : {1, 2, 5, 6, 7, 8, 13, 14}) {
    for (int64_t n : {1, 7, 8, 9, 16, 17, 31}) {
      for (int64_t k : {1, 16, 17}) check_fused_products(m, n, k);
    }
  }
  check_fused_products(64, 128, 32);  // a full attention tile
}

TEST_CASE("attention tile products on AVX-512 match a double-precision triple loop", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx512f(), "this CPU has no AVX-512 F")) return;
  // every remainder of 8-row blocks, 8 + 1 and 8 + 2 rows (run as 5 + 4, 5 + 5), and every kind of
  // last vector: none, a whole one, partial after 0 or 1 whole
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 15, 16, 17, 18, 33}) {
    for (int64_t n : {1, 7, 15, 16, 17, 31, 32, 33, 47, 48, 63}) {
      for (int64_t k : {1, 5, 16, 17}) {
        for (bool transpose_a : {false, true}) {
          check_product(m, n, k, transpose_a, 0.0f, Width::avx512);
          check_product(m, n, k, transpose_a, 1.0f, Width::avx512);
        }
      }
    }
  }
  check_product(64, 128, 32, false, 0.5f, Width::avx512);  // a full attention tile
  check_product(128, 32, 64, true, 1.0f, Width::avx512);
  for (int64_t m : {1, 2, 7, 8, 9, 10, 17}) {
    for (int64_t n : {1, 15, 16, 17, 32, 33}) {
      for (int64_t k : {1, 16, 17}) check_fused_products(m, n, k, Width::avx512);
    }
  }
  check_fused_products(64, 128, 32, Width::avx512);
}

// key_dots_avx2: C(r, j) = alpha (a_r . key_j) for a few query rows against keys read where they
// lie (rows ld_keys apart, past k: other floats), within the GEMM bound; C's padding untouched.
void check_key_dots(int64_t m, int64_t cols, int64_t k) {
  INFO("m " << m << ", keys " << cols << ", k " << k);
  std::mt19937 gen(static_cast<uint32_t>(m * 7919 + cols * 31 + k));
  std::uniform_real_distribution<float> dist(-1, 1);
  const int64_t lda = k + 1, ld_keys = k + 3, ldc = cols + 5;
  std::vector<float> a(m * lda), keys(cols * ld_keys), c(m * ldc, kSentinel);
  for (float& x : a) x = dist(gen);
  for (float& x : keys) x = dist(gen);
  const float alpha = -0.6f;
  tiles::key_dots_avx2(m, cols, k, alpha, a.data(), lda, keys.data(), ld_keys, c.data(), ldc);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < ldc; ++j) {
      INFO("C(" << r << ", " << j << ")");
      if (j >= cols) {
        REQUIRE(c[r * ldc + j] == kSentinel);
        continue;
      }
      const DotInDouble dot = dot_in_double(a.data() + r * lda, 1, keys.data() + j * ld_keys, 1, k);
      REQUIRE(std::abs(c[r * ldc + j] - alpha * dot.sum) <=
              (k + 4) * 0x1.0p-24 * std::abs(alpha) * dot.bound + 1e-30);
    }
  }
}

TEST_CASE("attention key dots (a few query rows against keys in place) match double", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  // blocks of eight keys and 1..7 left over, head widths in whole chunks of eight and with a tail
  for (int64_t m : {1, 2, 4}) {
    for (int64_t cols : {1, 7, 8, 9, 16, 23, 128}) {
      for (int64_t k : {1, 5, 8, 13, 32, 64, 67, 128}) check_key_dots(m, cols, k);
    }
  }
  check_key_dots(1, 0, 32);  // no keys: nothing written
}

TEST_CASE("attention tile transposes: every 8 x 8 block remainder", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  for (int64_t rows : {1, 3, 8, 9, 16, 17, 32, 33, 64}) {
    for (int64_t cols : {1, 7, 8, 15, 16, 17, 32, 33}) {
      INFO("rows " << rows << ", cols " << cols);
      const int64_t ld_in = cols + 3, ld_out = rows + 2;
      std::vector<float> in(rows * ld_in), out(cols * ld_out, kSentinel);
      for (size_t e = 0; e < in.size(); ++e) in[e] = static_cast<float>(e);
      tiles::transpose_avx2(rows, cols, in.data(), ld_in, out.data(), ld_out);
      for (int64_t c = 0; c < cols; ++c) {
        for (int64_t r = 0; r < ld_out; ++r) {
          REQUIRE(out[c * ld_out + r] == (r < rows ? in[r * ld_in + c] : kSentinel));
        }
      }
    }
  }
}

namespace {

// A row pass pair: SSE2 (cpu/fast/simd.h) or AVX2 (tiles::*_avx2).
struct Rows {
  float (*exp2_shifted_row)(float*, int64_t, float);
  float (*row_max)(const float*, int64_t);
};

// exp2 of a row and its max against double: accuracy, edges, every row length to 40.
void check_rows(const Rows& impl) {
  const float inf = std::numeric_limits<float>::infinity();
  {
    // Accuracy over [-126, 127] in steps of 2^-10, as the SSE2 exp2 in tests/cpu/fast/test_simd.cpp.
    std::vector<float> x;
    for (double t = -126.0; t <= 127.0; t += 0x1.0p-10) x.push_back(static_cast<float>(t));
    std::vector<float> y = x;
    impl.exp2_shifted_row(y.data(), static_cast<int64_t>(y.size()), 0.0f);
    double worst = 0;
    for (size_t e = 0; e < x.size(); ++e) {
      const double exact = std::exp2(static_cast<double>(x[e]));
      worst = std::max(worst, std::abs(y[e] - exact) / exact);
    }
    INFO("worst relative error " << worst);
    REQUIRE(worst <= 1.2e-7);
    // The edges of cpu/fast/simd.h: 0 below -126.5 and at -inf, a subnormal just above, NaN kept,
    // 2^127 past 127 (eight entries: the 8-lane body, then one more for the tail)
    std::vector<float> edges = {-126.51f, -1000.0f, -inf, std::nanf(""), -126.25f,
                                128.0f,   inf,      127.0f, -inf};
    impl.exp2_shifted_row(edges.data(), static_cast<int64_t>(edges.size()), 0.0f);
    REQUIRE(edges[0] == 0.0f);
    REQUIRE(edges[1] == 0.0f);
    REQUIRE(edges[2] == 0.0f);
    REQUIRE(std::isnan(edges[3]));
    REQUIRE(edges[4] > 0.0f);
    REQUIRE(std::abs(edges[4] - std::exp2(-126.25)) <= 0x1.0p-149);
    REQUIRE(edges[5] == edges[7]);
    REQUIRE(edges[6] == edges[7]);
    REQUIRE(edges[8] == 0.0f);
    // Rows of every length to 40 (the 8-lane body and its tail): masked entries, the sum, the max.
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(-5, 5);
    for (int64_t cols = 0; cols <= 40; ++cols) {
      INFO("cols " << cols);
      std::vector<float> row(cols + 1, kSentinel);
      for (int64_t c = 0; c < cols; ++c) row[c] = c % 3 == 1 ? -inf : dist(gen);
      std::vector<float> with_nan = row;
      if (cols > 2) with_nan[cols / 2] = std::nanf("");
      float expected_max = -inf;
      for (int64_t c = 0; c < cols; ++c) {
        if (!std::isnan(with_nan[c])) expected_max = std::max(expected_max, with_nan[c]);
      }
      REQUIRE(impl.row_max(with_nan.data(), cols) == expected_max);
      const float shift = 0.5f;
      std::vector<double> expected(cols);
      double expected_sum = 0;
      for (int64_t c = 0; c < cols; ++c) expected_sum += expected[c] = std::exp2(static_cast<double>(row[c]) - shift);
      const float sum = impl.exp2_shifted_row(row.data(), cols, shift);
      for (int64_t c = 0; c < cols; ++c) {
        if (expected[c] == 0) REQUIRE(row[c] == 0.0f);
        else REQUIRE(std::abs(row[c] - expected[c]) <= 6e-7 * expected[c]);  // exp2, x - shift rounded
      }
      REQUIRE(row[cols] == kSentinel);
      REQUIRE(std::abs(sum - expected_sum) <= 1e-6 * expected_sum + 1e-30);
    }
    std::vector<float> masked(9, -inf);  // a fully masked row: max -inf
    REQUIRE(impl.row_max(masked.data(), 9) == -inf);
  }
}

}  // namespace

TEST_CASE("attention tile rows: exp2 and max on SSE2", "[attention][tiles]") {
  check_rows({tg::cpu::simd::exp2_shifted_row, tg::cpu::simd::row_max_of});
}

TEST_CASE("attention tile rows: exp2 and max on AVX2", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  check_rows({tiles::exp2_shifted_row_avx2, tiles::row_max_avx2});
}

namespace {

using OnlineSoftmaxStep = void (*)(float*, int64_t, int64_t, float*, float*, float*);

// One online softmax step (tiles::online_softmax_avx2 or _avx512) against double, on tiles whose
// rows cover every case of the step, at widths around 8- and 16-lane tails.
void check_online_softmax(const char* name, OnlineSoftmaxStep step) {
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-6, 6);
  for (int64_t cols : {1, 7, 8, 13, 16, 17, 31, 33, 64, 128}) {
    const int64_t rows = 9;
    INFO(name << ", cols " << cols);
    // (one more entry past the tile: a sentinel, which no store may reach)
    std::vector<float> scores(rows * cols + 1), row_max(rows), row_sum(rows), correction(rows, kSentinel);
    for (float& s : scores) s = dist(gen);
    scores.back() = kSentinel;
    // Row 0: nothing visible, before and now. Row 1: its first visible entries (m = -inf). Row 2:
    // the max stays (every score below it). Row 3: the max grows. Row 4: masked entries among
    // visible ones. Row 5: all masked now, visible before. Others: earlier statistics at random.
    for (int64_t c = 0; c < cols; ++c) scores[c] = -inf;
    for (int64_t c = 0; c < cols; ++c) scores[5 * cols + c] = -inf;
    for (int64_t c = 0; c < cols; c += 2) scores[4 * cols + c] = -inf;
    for (int64_t r = 0; r < rows; ++r) {
      row_max[r] = dist(gen);
      row_sum[r] = 1.0f + std::abs(dist(gen));
    }
    row_max[0] = row_max[1] = -inf;
    row_sum[0] = row_sum[1] = 0.0f;
    row_max[2] = 7.0f;    // above every score
    row_max[3] = -10.0f;  // below every score
    const std::vector<float> before = scores, max_before = row_max, sum_before = row_sum;
    step(scores.data(), rows, cols, row_max.data(), row_sum.data(), correction.data());
    REQUIRE(scores.back() == kSentinel);  // nothing stored past the tile
    for (int64_t r = 0; r < rows; ++r) {
      INFO("row " << r);
      double tile_max = -inf;
      for (int64_t c = 0; c < cols; ++c) tile_max = std::max<double>(tile_max, before[r * cols + c]);
      const double new_max = std::max<double>(max_before[r], tile_max);
      if (new_max == -inf) {  // rows 0 and 4 with one column: zeros, statistics kept, correction 1
        for (int64_t c = 0; c < cols; ++c) REQUIRE(scores[r * cols + c] == 0.0f);
        REQUIRE(row_max[r] == max_before[r]);
        REQUIRE(row_sum[r] == sum_before[r]);
        REQUIRE(correction[r] == 1.0f);
        continue;
      }
      // m - m' rounded to f32 as the kernel has it, then exp2 (within 1.2e-7)
      const float max_step = max_before[r] - static_cast<float>(new_max);
      const double expected_correction = max_before[r] == -inf ? 1.0 : std::exp2(static_cast<double>(max_step));
      REQUIRE(std::abs(correction[r] - expected_correction) <= 1.2e-7 * expected_correction);
      double new_sum = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const double expected = std::exp2(static_cast<double>(before[r * cols + c]) - new_max);
        new_sum += expected;
        if (expected == 0) REQUIRE(scores[r * cols + c] == 0.0f);
        else REQUIRE(std::abs(scores[r * cols + c] - expected) <= 6e-7 * expected);
      }
      REQUIRE(row_max[r] == static_cast<float>(new_max));
      const double expected_sum = sum_before[r] * expected_correction + new_sum;
      REQUIRE(std::abs(row_sum[r] - expected_sum) <= 1e-6 * expected_sum);
      if (r == 2) REQUIRE(correction[r] == 1.0f);  // the max stayed: exactly 1
    }
  }
}

}  // namespace

// (The SSE2 path runs the step a row at a time, in the kernel: tests/cpu/test_reference.cpp.)
TEST_CASE("attention tile rows: the online softmax step on AVX2 against double", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  check_online_softmax("AVX2", tiles::online_softmax_avx2);
}

TEST_CASE("attention tile rows: the online softmax step on AVX-512 against double", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx512f(), "this CPU has no AVX-512 F")) return;
  check_online_softmax("AVX-512", tiles::online_softmax_avx512);
}

TEST_CASE("attention tile rows: the backward's exp and softmax gradient passes on AVX2", "[attention][tiles]") {
  if (tg::testing::skip_unless(tg::cpu::cpu_has_avx2_fma(), "this CPU has no AVX2 + FMA")) return;
  const float inf = std::numeric_limits<float>::infinity();
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> dist(-4, 4);
  for (int64_t cols : {1, 7, 8, 13, 16, 64}) {
    INFO("cols " << cols);
    const int64_t rows = 5, ld = cols + 3;  // the padding of each row must stay untouched
    std::vector<float> scores(rows * ld, kSentinel), lse(rows), d_probs(rows * ld, kSentinel), dot(rows);
    for (int64_t r = 0; r < rows; ++r) {
      lse[r] = dist(gen);
      dot[r] = dist(gen);
      for (int64_t c = 0; c < cols; ++c) {
        scores[r * ld + c] = c % 4 == 3 ? -inf : dist(gen);
        d_probs[r * ld + c] = dist(gen);
      }
    }
    lse[2] = -inf;  // a fully masked row: left as it is
    const std::vector<float> scores_before = scores, d_before = d_probs;
    tiles::exp2_rows_avx2(scores.data(), rows, cols, ld, lse.data());
    tiles::softmax_backward_rows_avx2(d_probs.data(), scores.data(), rows, cols, ld, dot.data());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < ld; ++c) {
        const int64_t at = r * ld + c;
        if (c >= cols || r == 2) {
          REQUIRE(scores[at] == scores_before[at]);
          if (c >= cols) REQUIRE(d_probs[at] == kSentinel);
          continue;
        }
        const double p = std::exp2(static_cast<double>(scores_before[at]) - lse[r]);
        if (p == 0) REQUIRE(scores[at] == 0.0f);
        else REQUIRE(std::abs(scores[at] - p) <= 6e-7 * p);  // exp2, x - lse rounded
        // dS = P (dP - D) on the P just computed: two roundings
        const double d_s = static_cast<double>(scores[at]) * (static_cast<double>(d_before[at]) - dot[r]);
        REQUIRE(std::abs(d_probs[at] - d_s) <= 2.4e-7 * std::abs(d_s) + 1e-30);
      }
    }
  }
}
