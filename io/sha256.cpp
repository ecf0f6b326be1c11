// SHA-256 as specified in FIPS 180-4 ("Secure Hash Standard"), sections 4.1.2, 4.2.2, 5.1.1,
// 5.3.3 and 6.2. Section numbers below refer to that document.
#include "tapegrad/io/sha256.h"

#include <algorithm>
#include <bit>
#include <cstring>

namespace tg::train {
namespace {

// Section 4.2.2: the 64 round constants K0..K63. Each is the first 32 bits of the fractional
// part of the cube root of one of the first 64 prime numbers (2, 3, 5, ..., 311); e.g.
// cbrt(2) = 1.2599210498..., and 0.2599210498... * 2^32 = 0x428a2f98. Such "nothing up my
// sleeve" numbers show that the constants were not chosen to hide a weakness.
constexpr std::array<uint32_t, 64> kRoundConstants = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
};

// Section 5.3.3: the initial hash value H(0), the first 32 bits of the fractional parts of the
// square roots of the first 8 primes (2, 3, 5, 7, 11, 13, 17, 19).
constexpr std::array<uint32_t, 8> kInitialHash = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

// Section 4.1.2: the six logical functions on 32-bit words.
uint32_t choose(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (~x & z); }  // Ch
uint32_t majority(uint32_t x, uint32_t y, uint32_t z) { return (x & y) ^ (x & z) ^ (y & z); }  // Maj
uint32_t big_sigma0(uint32_t x) { return std::rotr(x, 2) ^ std::rotr(x, 13) ^ std::rotr(x, 22); }
uint32_t big_sigma1(uint32_t x) { return std::rotr(x, 6) ^ std::rotr(x, 11) ^ std::rotr(x, 25); }
uint32_t small_sigma0(uint32_t x) { return std::rotr(x, 7) ^ std::rotr(x, 18) ^ (x >> 3); }
uint32_t small_sigma1(uint32_t x) { return std::rotr(x, 17) ^ std::rotr(x, 19) ^ (x >> 10); }

// SHA-256 reads the message as big-endian 32-bit words, whatever the machine's byte order.
uint32_t load_big_endian(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Section 6.2.2 step 1: the message schedule W0..W63. The first 16 words are the block itself;
// each later word mixes four earlier ones.
std::array<uint32_t, 64> message_schedule(const uint8_t* block) {
  std::array<uint32_t, 64> w;
  for (int t = 0; t < 16; ++t) w[t] = load_big_endian(block + 4 * t);
  for (int t = 16; t < 64; ++t)
    w[t] = small_sigma1(w[t - 2]) + w[t - 7] + small_sigma0(w[t - 15]) + w[t - 16];
  return w;
}

// Section 6.2.2 steps 2-4: the compression function. Sixty-four rounds scramble the working
// variables a..h, and the result is added (mod 2^32) to the hash value.
void compress(std::array<uint32_t, 8>& hash, const uint8_t* block) {
  const std::array<uint32_t, 64> w = message_schedule(block);
  uint32_t a = hash[0], b = hash[1], c = hash[2], d = hash[3];
  uint32_t e = hash[4], f = hash[5], g = hash[6], h = hash[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 = h + big_sigma1(e) + choose(e, f, g) + kRoundConstants[t] + w[t];
    const uint32_t t2 = big_sigma0(a) + majority(a, b, c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  hash[0] += a;
  hash[1] += b;
  hash[2] += c;
  hash[3] += d;
  hash[4] += e;
  hash[5] += f;
  hash[6] += g;
  hash[7] += h;
}

}  // namespace

Sha256::Sha256() : state_(kInitialHash) {}

void Sha256::compress_buffered_block() {
  compress(state_, block_.data());
  block_used_ = 0;
}

void Sha256::update(const void* data, size_t n) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  message_bytes_ += n;
  while (n > 0) {
    const size_t take = std::min(n, kBlockBytes - block_used_);
    std::memcpy(block_.data() + block_used_, bytes, take);
    block_used_ += take;
    bytes += take;
    n -= take;
    if (block_used_ == kBlockBytes) compress_buffered_block();
  }
}

std::string Sha256::hex_digest() const {
  // Section 5.1.1, padding: append one '1' bit (the byte 0x80), then '0' bits until the length
  // is 56 bytes mod 64, then the message length in *bits* as a 64-bit big-endian number. This
  // takes one extra block when fewer than 9 bytes are free in the last one (55 bytes fit in one
  // block with their padding, 56 do not).
  Sha256 last = *this;  // finish a copy, so that this object can go on (see the header)
  const uint64_t message_bits = message_bytes_ * 8;
  last.block_[last.block_used_++] = 0x80;
  if (last.block_used_ > kBlockBytes - 8) {
    std::memset(last.block_.data() + last.block_used_, 0, kBlockBytes - last.block_used_);
    last.compress_buffered_block();
  }
  std::memset(last.block_.data() + last.block_used_, 0, kBlockBytes - 8 - last.block_used_);
  for (int i = 0; i < 8; ++i)
    last.block_[kBlockBytes - 1 - i] = static_cast<uint8_t>(message_bits >> (8 * i));
  last.compress_buffered_block();

  // Section 6.2.2 step 4 / 6.2: the digest is H0..H7, each written big-endian.
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(64);
  for (uint32_t word : last.state_)
    for (int shift = 28; shift >= 0; shift -= 4) hex.push_back(kHexDigits[(word >> shift) & 0xf]);
  return hex;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 hash;
  hash.update(bytes);
  return hash.hex_digest();
}

}  // namespace tg::train
