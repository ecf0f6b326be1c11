// SHA-256 (io/sha256.h): the example vectors published with FIPS 180-2 / NIST's "Cryptographic
// Standards and Guidelines" examples, messages at the padding boundaries (55, 56, 63, 64 and
// 65 bytes), and incremental hashing against one-shot hashing.
#include <catch2/catch.hpp>

#include "tapegrad/io/sha256.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

using tg::train::Sha256;
using tg::train::sha256_hex;

namespace {

std::string hash_byte_by_byte(const std::string& message) {
  Sha256 hash;
  for (char c : message) hash.update(&c, 1);
  return hash.hex_digest();
}

}  // namespace

TEST_CASE("SHA-256 matches the FIPS 180-2 example vectors", "[sha256]") {
  // The empty message (NIST's SHA-256 examples).
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  // FIPS 180-2 appendix B.1: one block.
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Appendix B.2: 448 bits, so the padding needs a second block.
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  // Appendix B.3: one million 'a', one-shot and in 1000 chunks of 1000.
  const std::string million_a(1'000'000, 'a');
  const std::string expected = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  CHECK(sha256_hex(million_a) == expected);
  Sha256 chunked;
  for (int i = 0; i < 1000; ++i) chunked.update(million_a.data(), 1000);
  CHECK(chunked.hex_digest() == expected);
}

TEST_CASE("SHA-256 at the padding boundaries", "[sha256]") {
  // 55 bytes leave exactly room for the 0x80 byte and the 8-byte length; 56 do not, so padding
  // spills into a second block; 64 is exactly one block; 63 and 65 sit on either side of it.
  // Expected digests of n 'a' bytes, cross-checked with coreutils' sha256sum.
  const std::vector<std::pair<size_t, std::string>> cases = {
      {55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
      {56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
      {63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34"},
      {64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
      {65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
  };
  for (const auto& [length, expected] : cases) {
    INFO("message of " << length << " bytes");
    const std::string message(length, 'a');
    Sha256 one_update;
    one_update.update(message.data(), message.size());
    const std::string digest = one_update.hex_digest();
    CHECK(digest == expected);
    CHECK(hash_byte_by_byte(message) == digest);
  }

  // Same lengths with varied bytes (every byte value, including 0x00 and 0x80, which the padding
  // also uses): one update() and byte-by-byte updates agree.
  for (size_t length : {55, 56, 63, 64, 65, 119, 120, 128}) {
    INFO("varied message of " << length << " bytes");
    std::string message;
    for (size_t i = 0; i < length; ++i) message.push_back(static_cast<char>(i * 37 + 0x80));
    CHECK(sha256_hex(message) == hash_byte_by_byte(message));
  }
}

TEST_CASE("SHA-256 incremental hashing equals one-shot hashing on random chunkings", "[sha256]") {
  std::mt19937 rng(20240601);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int trial = 0; trial < 50; ++trial) {
    const size_t length = std::uniform_int_distribution<size_t>(0, 2000)(rng);
    std::string message(length, '\0');
    for (char& c : message) c = static_cast<char>(byte(rng));
    const std::string expected = sha256_hex(message);

    Sha256 hash;
    std::vector<size_t> chunks;
    size_t offset = 0;
    while (offset < length) {
      // Chunk sizes from 0 (an empty update) to a little over two blocks.
      const size_t chunk = std::min(length - offset, std::uniform_int_distribution<size_t>(0, 140)(rng));
      hash.update(message.data() + offset, chunk);
      chunks.push_back(chunk);
      offset += chunk;
    }
    INFO("trial " << trial << ", " << length << " bytes in " << chunks.size() << " chunks");
    CHECK(hash.hex_digest() == expected);
  }
}

TEST_CASE("Sha256::hex_digest may be called twice and the message continued", "[sha256]") {
  Sha256 hash;
  hash.update(nullptr, 0);  // an empty update with no buffer is allowed
  CHECK(hash.hex_digest() == sha256_hex(""));
  hash.update("ab", 2);
  const std::string first = hash.hex_digest();
  CHECK(first == hash.hex_digest());  // hex_digest() does not change the object
  hash.update(std::string_view("c"));
  CHECK(hash.hex_digest() == sha256_hex("abc"));
  CHECK(first == sha256_hex("ab"));
}
