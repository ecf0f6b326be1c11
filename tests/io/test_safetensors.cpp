// safetensors: round trips, files built byte by byte here from the format's description (the
// independent reference), one corrupt file per rule the loader enforces, and atomic saves.
#include <catch2/catch.hpp>

#include "tests/support/temp_files.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/ops/ops.h"

using namespace tg;
namespace fs = std::filesystem;

namespace {

using tg::testing::TempDir;
using tg::testing::read_bytes;
using tg::testing::write_bytes;

// 8-byte little-endian length, the header, the buffer: the format, spelled out by hand.
std::string length_prefix(uint64_t length) {
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes += static_cast<char>((length >> (8 * i)) & 0xff);
  return bytes;
}

std::string file_bytes(const std::string& header, const std::string& buffer) {
  return length_prefix(header.size()) + header + buffer;
}

template <typename T>
std::string raw(const std::vector<T>& values) {
  std::string bytes(values.size() * sizeof(T), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

template <typename T>
Tensor tensor_from_raw(const std::vector<T>& bits, const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  REQUIRE(static_cast<size_t>(t.numel()) * dtype_size(dtype) == bits.size() * sizeof(T));
  std::memcpy(t.data(), bits.data(), bits.size() * sizeof(T));
  return t;
}

std::string tensor_bytes(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data()), c.numel() * dtype_size(c.dtype()));
}

std::vector<std::string> names_in(const fs::path& directory) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Writes `bytes` as a file and requires load_safetensors to reject it with a message containing
// `reason`.
void require_rejected(const std::string& bytes, const std::string& reason) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  write_bytes(path, bytes);
  REQUIRE_THROWS_AS(load_safetensors(path), tg::Error);
  REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains(reason));
}

// A one-tensor header {"x": {...}} with the given JSON for each field.
std::string entry_with(const std::string& dtype, const std::string& shape,
                       const std::string& offsets) {
  return R"({"x":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

const std::string kEightBytes(8, '\0');

}  // namespace

// ---- Round trips and the reference bytes ------------------------------------------------------

TEST_CASE("safetensors round-trips every dtype bit for bit, with metadata", "[safetensors]") {
  TempDir dir;
  const uint32_t nan_with_payload = 0x7fc00123u;
  const Tensor f32 = tensor_from_raw<uint32_t>(
      {0x3f800000u, 0x80000000u, 0x7f800000u, 0xff800000u, nan_with_payload, 0x00000001u},
      {2, 3}, DType::f32);
  const Tensor f64 = tensor_from_raw<uint64_t>(
      {0x400921fb54442d18ull, 0x8000000000000000ull, 0x7ff8000000000abcull, 0x1ull}, {4},
      DType::f64);
  const Tensor f16 = tensor_from_raw<uint16_t>({0x3c00, 0xc000, 0x7c00, 0x0001, 0x7e01}, {5},
                                               DType::f16);
  const Tensor bf16 = tensor_from_raw<uint16_t>({0x3fc0, 0xff80, 0x0001}, {3, 1}, DType::bf16);
  const Tensor i64 = from_indices({INT64_MIN, INT64_MAX, -1, 0, (int64_t{1} << 53) + 1}, {5});
  const Tensor b8 = from_bools({true, false, false, true}, {2, 2});
  const Tensor i8 = from_indices({-128, 127, 0, -1, 5, 64}, {2, 3}).to(DType::i8);
  const Tensor i32 = from_indices({INT32_MIN, INT32_MAX, -7}, {3}).to(DType::i32);
  const Tensor scalar_value = scalar(2.5, DType::f64);
  const Tensor empty_rows = zeros({0, 3});
  const Tensor transposed = from_values({1, 2, 3, 4, 5, 6}, {2, 3}).transpose(0, 1);
  REQUIRE_FALSE(transposed.is_contiguous());

  const std::vector<std::pair<std::string, Tensor>> saved = {
      {"f32", f32},   {"f64", f64},         {"f16", f16},          {"bf16", bf16},
      {"i64", i64},   {"bool", b8},         {"i8", i8},            {"i32", i32},
      {"scalar", scalar_value}, {"empty", empty_rows},
      {"layers.0.weight.T", transposed}};
  const std::map<std::string, std::string> metadata = {{"format", "pt"},
                                                       {"note", "d\xc3\xa9j\xc3\xa0 vu"}};
  const std::string path = dir.file("all.safetensors");
  save_safetensors(path, saved, metadata);

  const SafetensorsFile loaded = load_safetensors(path);
  CHECK(loaded.metadata == metadata);
  REQUIRE(loaded.tensors.size() == saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    const auto& [name, original] = saved[i];
    const auto& [loaded_name, copy] = loaded.tensors[i];
    INFO(name);
    CHECK(loaded_name == name);  // buffer order = the order saved
    CHECK(copy.dtype() == original.dtype());
    CHECK(copy.shape() == original.shape());
    CHECK(copy.is_contiguous());
    CHECK(tensor_bytes(copy) == tensor_bytes(original));
  }
  CHECK(loaded.tensors[10].second.to_host_f64() == std::vector<double>{1, 4, 2, 5, 3, 6});
}

TEST_CASE("safetensors loads a file written by hand from the format description", "[safetensors]") {
  // Keys in the JSON deliberately not in buffer order; tensors come back in buffer order.
  const std::string header =
      R"({"ids":{"dtype":"I64","shape":[],"data_offsets":[35,43]},)"
      R"("__metadata__":{"format":"pt","epoch":"3"},)"
      R"("weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
      R"("brain":{"dtype":"BF16","shape":[1],"data_offsets":[47,49]},)"
      R"("bias":{"dtype":"F64","shape":[2],"data_offsets":[16,32]},)"
      R"("half":{"dtype":"F16","shape":[2],"data_offsets":[43,47]},)"
      R"("mask":{"dtype":"BOOL","shape":[3],"data_offsets":[32,35]}}   )";
  const std::string buffer = raw<float>({1.0f, -2.0f, 0.5f, 4.0f}) + raw<double>({0.25, -8.0}) +
                             std::string("\x01\x00\x01", 3) + raw<int64_t>({-42}) +
                             raw<uint16_t>({0x3c00, 0xc000}) +  // f16 1.0, -2.0
                             raw<uint16_t>({0x3fc0});           // bf16 1.5
  REQUIRE(buffer.size() == 49);
  TempDir dir;
  const std::string path = dir.file("hand.safetensors");
  write_bytes(path, file_bytes(header, buffer));

  const SafetensorsFile file = load_safetensors(path);
  CHECK(file.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"epoch", "3"}});
  REQUIRE(file.tensors.size() == 6);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : file.tensors) names.push_back(name);
  CHECK(names == std::vector<std::string>{"weight", "bias", "mask", "ids", "half", "brain"});

  const Tensor& weight = file.tensors[0].second;
  CHECK(weight.dtype() == DType::f32);
  CHECK(weight.shape() == Shape{2, 2});
  CHECK(weight.to_host_f64() == std::vector<double>{1.0, -2.0, 0.5, 4.0});
  CHECK(file.tensors[1].second.dtype() == DType::f64);
  CHECK(file.tensors[1].second.to_host_f64() == std::vector<double>{0.25, -8.0});
  CHECK(file.tensors[2].second.dtype() == DType::b8);
  CHECK(file.tensors[2].second.to_host_f64() == std::vector<double>{1, 0, 1});
  CHECK(file.tensors[3].second.dtype() == DType::i64);
  CHECK(file.tensors[3].second.shape() == Shape{});
  CHECK(file.tensors[3].second.to_host_i64() == std::vector<int64_t>{-42});
  CHECK(file.tensors[4].second.dtype() == DType::f16);
  CHECK(file.tensors[4].second.to_host_f64() == std::vector<double>{1.0, -2.0});
  CHECK(file.tensors[5].second.dtype() == DType::bf16);
  CHECK(file.tensors[5].second.to_host_f64() == std::vector<double>{1.5});
}

TEST_CASE("safetensors writes the reference layout byte for byte", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("small.safetensors");
  save_safetensors(path, {{"a", from_values({1.0, 2.0}, {2})}}, {{"k", "v"}});

  // Compact JSON, metadata first, padded with spaces to a multiple of 8 (79 -> 80 bytes).
  std::string header =
      R"({"__metadata__":{"k":"v"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  REQUIRE(header.size() == 79);
  header += ' ';
  CHECK(read_bytes(path) == file_bytes(header, raw<float>({1.0f, 2.0f})));

  SECTION("no tensors and no metadata: an empty object") {
    save_safetensors(path, {});
    CHECK(read_bytes(path) == file_bytes("{}      ", ""));
    const SafetensorsFile file = load_safetensors(path);
    CHECK(file.tensors.empty());
    CHECK(file.metadata.empty());
  }
}

// ---- The loader's rules, one corrupt file each ------------------------------------------------

TEST_CASE("safetensors rejects a missing file", "[safetensors]") {
  TempDir dir;
  REQUIRE_THROWS_AS(load_safetensors(dir.file("missing.safetensors")), tg::Error);
  REQUIRE_THROWS_WITH(load_safetensors(dir.file("missing.safetensors")),
                      Catch::Contains("cannot open"));
}

TEST_CASE("safetensors rejects a path it cannot read as a file", "[safetensors]") {
  TempDir dir;
  REQUIRE_THROWS_AS(load_safetensors(dir.path.string()), tg::Error);
  REQUIRE_THROWS_WITH(load_safetensors(dir.path.string()), Catch::Contains("not a regular file"));
}

TEST_CASE("safetensors rejects a file shorter than 8 bytes", "[safetensors]") {
  require_rejected("", "too short");
  require_rejected(std::string("\x02\x00\x00", 3), "too short");
}

TEST_CASE("safetensors rejects a header length past the end of the file", "[safetensors]") {
  require_rejected(length_prefix(1000) + "{}", "runs past the end");
  require_rejected(length_prefix(~uint64_t{0}) + "{}", "100 MB");  // no overflow in the check
}

TEST_CASE("safetensors rejects a header over 100 MB", "[safetensors]") {
  require_rejected(length_prefix(100'000'001) + "{}", "100 MB");
}

TEST_CASE("safetensors rejects a header that is not JSON", "[safetensors]") {
  require_rejected(file_bytes(R"({"x": {"dtype": )", ""), "not valid JSON");
  require_rejected(file_bytes(std::string("{}\0\0\0\0\0\0", 8), ""), "not valid JSON");
}

TEST_CASE("safetensors rejects a header that is not an object", "[safetensors]") {
  require_rejected(file_bytes("[1, 2]", ""), "must be a JSON object");
  require_rejected(file_bytes("\"text\"", ""), "must be a JSON object");
}

TEST_CASE("safetensors rejects an entry that is not an object", "[safetensors]") {
  require_rejected(file_bytes(R"({"x": [0, 8]})", kEightBytes), "entry must be a JSON object");
}

TEST_CASE("safetensors rejects entries with missing fields", "[safetensors]") {
  require_rejected(file_bytes(R"({"x":{"shape":[2],"data_offsets":[0,8]}})", kEightBytes),
                   "missing the field \"dtype\"");
  require_rejected(file_bytes(R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", kEightBytes),
                   "missing the field \"shape\"");
  require_rejected(file_bytes(R"({"x":{"dtype":"F32","shape":[2]}})", kEightBytes),
                   "missing the field \"data_offsets\"");
}

TEST_CASE("safetensors rejects fields of the wrong type", "[safetensors]") {
  require_rejected(file_bytes(entry_with("32", "[2]", "[0,8]"), kEightBytes),
                   "\"dtype\" must be a string");
  require_rejected(file_bytes(entry_with(R"("F32")", R"("2")", "[0,8]"), kEightBytes),
                   "\"shape\" must be an array");
  require_rejected(file_bytes(entry_with(R"("F32")", "[2.0]", "[0,8]"), kEightBytes),
                   "\"shape\" entries must be integers");
  require_rejected(file_bytes(entry_with(R"("F32")", R"(["2"])", "[0,8]"), kEightBytes),
                   "\"shape\" entries must be integers");
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", R"("0,8")"), kEightBytes),
                   "must be an array [begin, end]");
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", "[0,8,8]"), kEightBytes),
                   "must be an array [begin, end]");
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", "[0,8.0]"), kEightBytes),
                   "non-negative integers");
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", "[-8,0]"), kEightBytes),
                   "non-negative integers");
}

TEST_CASE("safetensors rejects an unknown dtype", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("U16")", "[4]", "[0,8]"), kEightBytes),
                   "unsupported dtype \"U16\"");
  require_rejected(file_bytes(entry_with(R"("f32")", "[2]", "[0,8]"), kEightBytes),
                   "unsupported dtype");
}

TEST_CASE("safetensors rejects negative or impossible dimensions", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("F32")", "[-2]", "[0,8]"), kEightBytes),
                   "negative dimension");
  require_rejected(file_bytes(entry_with(R"("F32")", "[2,-1]", "[0,8]"), kEightBytes),
                   "negative dimension");
  require_rejected(file_bytes(entry_with(R"("F32")", "[18446744073709551615]", "[0,8]"),
                              kEightBytes),
                   "too large");
  require_rejected(
      file_bytes(entry_with(R"("F32")", "[4294967296,4294967296,4294967296]", "[0,8]"),
                 kEightBytes),
      "too many elements");
}

TEST_CASE("safetensors rejects a shape of more than 16 dims, however long", "[safetensors]") {
  // A 200 KB header with one shape of 100,000 ones: refused at its length, before any per-dim work.
  std::string ones = "[1";
  for (int i = 1; i < 100000; ++i) ones += ",1";
  ones += "]";
  require_rejected(file_bytes(entry_with(R"("F32")", ones, "[0,4]"), std::string(4, '\0')),
                   "100000 dims, more than the 16");
  std::string seventeen = "[1";
  for (int i = 1; i < 17; ++i) seventeen += ",1";
  require_rejected(file_bytes(entry_with(R"("F32")", seventeen + "]", "[0,4]"), std::string(4, '\0')),
                   "17 dims");
}

TEST_CASE("safetensors rejects data_offsets outside the buffer", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("F32")", "[4]", "[0,16]"), kEightBytes),
                   "run past the end");
  require_rejected(file_bytes(entry_with(R"("F32")", "[0]", "[9,9]"), kEightBytes),
                   "run past the end");
}

TEST_CASE("safetensors rejects data_offsets that end before they begin", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", "[8,0]"), kEightBytes),
                   "end before they begin");
}

TEST_CASE("safetensors rejects a byte count that does not match the shape", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("F32")", "[3]", "[0,8]"), kEightBytes), "needs");
  require_rejected(file_bytes(entry_with(R"("F64")", "[2]", "[0,8]"), kEightBytes), "needs");
  require_rejected(file_bytes(entry_with(R"("F32")", "[]", "[0,8]"), kEightBytes), "needs");
}

TEST_CASE("safetensors rejects overlapping tensors", "[safetensors]") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  require_rejected(file_bytes(header, std::string(12, '\0')), "overlap");
  const std::string same = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})";
  require_rejected(file_bytes(same, kEightBytes), "overlap");
}

TEST_CASE("safetensors rejects gaps between tensors", "[safetensors]") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  require_rejected(file_bytes(header, std::string(20, '\0')), "belong to no tensor");
  require_rejected(file_bytes(entry_with(R"("F32")", "[1]", "[4,8]"), kEightBytes),
                   "belong to no tensor");
}

TEST_CASE("safetensors rejects trailing bytes after the last tensor", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", "[0,8]"), std::string(12, '\0')),
                   "trailing bytes");
  require_rejected(file_bytes("{}", "x"), "trailing bytes");
}

TEST_CASE("safetensors rejects metadata that is not string to string", "[safetensors]") {
  require_rejected(file_bytes(R"({"__metadata__":{"epoch":3}})", ""), "must be a string");
  require_rejected(file_bytes(R"({"__metadata__":{"k":["v"]}})", ""), "must be a string");
  require_rejected(file_bytes(R"({"__metadata__":"pt"})", ""), "must be an object");
}

TEST_CASE("safetensors rejects a header that names a key twice", "[safetensors]") {
  // JSON parsers keep the last of two equal keys: the first tensor would vanish unseen.
  const std::string twice = R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  require_rejected(file_bytes(twice, kEightBytes), "names 'a' twice");
  // The same entry twice, byte for byte, is refused as well.
  const std::string entry = R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  require_rejected(file_bytes("{" + entry + "," + entry + "}", kEightBytes), "names 'x' twice");
  // A field repeated inside one entry, and a metadata key repeated.
  require_rejected(file_bytes(R"({"x":{"dtype":"I64","dtype":"F32","shape":[2],)"
                              R"("data_offsets":[0,8]}})", kEightBytes),
                   "names 'dtype' twice");
  require_rejected(file_bytes(R"({"__metadata__":{"k":"1","k":"2"}})", ""), "names 'k' twice");
  // Equal keys in different objects are no repetition.
  const std::string header = R"({"__metadata__":{"x":"1"},)" + entry + "}";
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  write_bytes(path, file_bytes(header, kEightBytes));
  const SafetensorsFile file = load_safetensors(path);
  REQUIRE(file.tensors.size() == 1);
  REQUIRE(file.metadata.at("x") == "1");
}

TEST_CASE("safetensors rejects BOOL bytes other than 0 and 1", "[safetensors]") {
  require_rejected(file_bytes(entry_with(R"("BOOL")", "[2]", "[0,2]"), std::string("\x01\x02", 2)),
                   "not 0 or 1");
}

TEST_CASE("safetensors rejects deeply nested JSON without overflowing the stack", "[safetensors]") {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  require_rejected(file_bytes(entry_with(R"("F32")", "[2]", deep), kEightBytes),
                   "must be an array [begin, end], got an array");
  require_rejected(file_bytes(R"({"__metadata__":{"k":)" + deep + "}}", ""), "must be a string");
  require_rejected(file_bytes(std::string(1'000'000, '{'), ""), "not valid JSON");
}

// ---- Atomic saves -----------------------------------------------------------------------------

TEST_CASE("a failed save leaves the existing file byte-identical, no temporary behind",
          "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", from_values({1, 2, 3}, {3})}}, {{"step", "10"}});
  const std::string good = read_bytes(path);

  SECTION("an undefined tensor") {
    REQUIRE_THROWS_AS(save_safetensors(path, {{"w", Tensor()}}), tg::Error);
  }
  SECTION("a name used twice") {
    REQUIRE_THROWS_AS(save_safetensors(path, {{"w", ones({2})}, {"w", ones({2})}}), tg::Error);
  }
  SECTION("the reserved name __metadata__") {
    REQUIRE_THROWS_AS(save_safetensors(path, {{"__metadata__", ones({2})}}), tg::Error);
  }
  SECTION("metadata that is not UTF-8") {
    REQUIRE_THROWS_AS(save_safetensors(path, {{"w", ones({2})}}, {{"k", "\xff\xfe"}}), tg::Error);
  }
  CHECK(read_bytes(path) == good);
  CHECK(names_in(dir.path) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a save onto a directory is refused and leaves no temporary", "[safetensors]") {
  TempDir dir;
  const std::string target = dir.file("occupied");
  fs::create_directory(target);
  write_bytes(dir.file("occupied/keep"), "untouched");
  REQUIRE_THROWS_WITH(save_safetensors(target, {{"w", ones({4})}}),
                      Catch::Contains("save_safetensors") && Catch::Contains("is a directory"));
  CHECK(names_in(dir.path) == std::vector<std::string>{"occupied"});
  CHECK(read_bytes(dir.file("occupied/keep")) == "untouched");
}

TEST_CASE("a save onto a FIFO is refused and the FIFO stays", "[safetensors]") {
  TempDir dir;
  const std::string fifo = dir.file("model.safetensors");
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  // rename() would silently put a regular file in the FIFO's place.
  REQUIRE_THROWS_WITH(save_safetensors(fifo, {{"w", ones({4})}}),
                      Catch::Contains("'" + fifo + "' is a FIFO, not a regular file"));
  CHECK(fs::is_fifo(fifo));
  CHECK(names_in(dir.path) == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("a save into a directory that does not exist throws", "[safetensors]") {
  TempDir dir;
  REQUIRE_THROWS_AS(save_safetensors(dir.file("no/such/dir/model.safetensors"), {{"w", ones({1})}}),
                    tg::Error);
  CHECK(names_in(dir.path).empty());
}

TEST_CASE("saving over an existing file replaces it and leaves no temporary", "[safetensors]") {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, {{"w", from_values({1, 2, 3}, {3})}});
  save_safetensors(path, {{"w", from_values({4, 5}, {2})}, {"b", from_indices({7}, {1})}});
  CHECK(names_in(dir.path) == std::vector<std::string>{"model.safetensors"});
  CHECK(fs::status(path).permissions() ==
        (fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
         fs::perms::others_read));
  const SafetensorsFile file = load_safetensors(path);
  REQUIRE(file.tensors.size() == 2);
  CHECK(file.tensors[0].first == "w");
  CHECK(file.tensors[0].second.to_host_f64() == std::vector<double>{4, 5});
  CHECK(file.tensors[1].second.to_host_i64() == std::vector<int64_t>{7});
}

TEST_CASE("saving a tensor that requires grad records nothing on the tape", "[safetensors]") {
  TempDir dir;
  const Tensor weight = from_values({1, 2, 3, 4}, {2, 2}).requires_grad_();
  const Tensor transposed = weight.transpose(0, 1);  // a non-contiguous view with history
  REQUIRE(transposed.requires_grad());
  const size_t nodes_before = tape_size();
  save_safetensors(dir.file("w.safetensors"), {{"w.T", transposed}, {"w", weight}});
  CHECK(tape_size() == nodes_before);
  const SafetensorsFile file = load_safetensors(dir.file("w.safetensors"));
  CHECK(file.tensors[0].second.to_host_f64() == std::vector<double>{1, 3, 2, 4});
  CHECK_FALSE(file.tensors[1].second.requires_grad());
}
