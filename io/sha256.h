#pragma once
// SHA-256 (FIPS 180-4, section 6.2), written to be read.
//
// What it is for here: `tapegrad train --resume` records a content hash of every data file it
// trained on, so that when the file has been moved or copied elsewhere it can check that the
// bytes are the same data, not merely a file with the same name or size. SHA-256 is used as a
// fingerprint (a 256-bit digest that differs, in practice, for any two different files), not for
// anything secret: no keys, no MACs, no constant-time requirements.
//
// Only the standard library is used (the project does not depend on OpenSSL). The code favours
// clarity over speed; it still hashes about 200 MB/s (-O2), which is plenty for data files.
//
//   Sha256 h;                     // incremental: feed a large file in chunks
//   h.update(buffer, n);          // ...as often as needed, chunks of any size (including 0)
//   std::string hex = h.hex_digest();   // 64 lowercase hex digits
//
//   sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tg::train {

class Sha256 {
 public:
  Sha256();

  // Appends n bytes to the message. data may be null when n == 0.
  void update(const void* data, size_t n);
  void update(std::string_view bytes) { update(bytes.data(), bytes.size()); }

  // The digest of everything passed to update() so far, as 64 lowercase hex digits.
  // It pads and finishes a *copy* of the state, so the object itself is unchanged: hex_digest()
  // may be called any number of times (always giving the same answer), and further update()
  // calls continue the same message (a later hex_digest() is then the digest of the longer
  // message).
  std::string hex_digest() const;

 private:
  static constexpr size_t kBlockBytes = 64;  // SHA-256 works on 512-bit blocks

  void compress_buffered_block();

  std::array<uint32_t, 8> state_;                 // H0..H7: the running hash value
  std::array<uint8_t, kBlockBytes> block_{};      // bytes of the block being filled
  size_t block_used_ = 0;                         // how many of block_ are filled
  uint64_t message_bytes_ = 0;                    // total message length so far, in bytes
};

// The SHA-256 of `bytes` in one call, as 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

}  // namespace tg::train
