#include "tapegrad/io/safetensors.h"

#include <algorithm>
#include <bit>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/io/file_io.h"

namespace tg {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; this code copies it as it is in memory");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference implementation's limit
constexpr const char* kMetadataKey = "__metadata__";

// ---- dtypes -----------------------------------------------------------------------------------

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"},  {DType::f64, "F64"}, {DType::f16, "F16"},
    {DType::bf16, "BF16"}, {DType::i64, "I64"}, {DType::b8, "BOOL"},
    {DType::i8, "I8"},     {DType::i32, "I32"},
};

const char* format_name(DType dtype) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.dtype == dtype) return entry.name;
  }
  fail("save_safetensors: dtype ", dtype_name(dtype), " has no safetensors name");
}

std::optional<DType> dtype_from_format_name(const std::string& name) {
  for (const DTypeName& entry : kDTypeNames) {
    if (name == entry.name) return entry.dtype;
  }
  return std::nullopt;
}

// The JSON header, padded with spaces to a multiple of 8 bytes, for `tensors` (already
// contiguous) laid out one after the other in the order given.
std::string build_header(const std::string& path,
                         const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    const uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * dtype_size(tensor.dtype());
    header[name] = {{"dtype", format_name(tensor.dtype())},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& error) {
    fail("save_safetensors '", path, "': a tensor name or metadata string is not valid UTF-8 (",
         error.what(), ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// A JSON value for an error message: a short scalar, or just the kind of container (a file's
// arrays can be 100 MB long or nested a million deep, and dump() recurses).
std::string describe(const nlohmann::json& value) {
  if (value.is_structured()) return std::string("an ") + value.type_name();
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 40) + "...";
  return text;
}

// One tensor's header entry once it has been checked.
struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // in the buffer
};

// Checks one header entry against the buffer size; `where` starts every message.
Entry parse_entry(const std::string& where, const std::string& name, const nlohmann::json& value,
                  uint64_t buffer_bytes) {
  const std::string tensor = where + "tensor '" + name + "': ";
  TG_CHECK(value.is_object(), tensor, "the entry must be a JSON object, got ", describe(value));
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    TG_CHECK(value.contains(field), tensor, "missing the field \"", field, "\"");
  }

  const nlohmann::json& dtype_field = value["dtype"];
  TG_CHECK(dtype_field.is_string(), tensor, "\"dtype\" must be a string, got ",
           describe(dtype_field));
  const std::string dtype_text = dtype_field.get<std::string>();
  const std::optional<DType> dtype = dtype_from_format_name(dtype_text);
  TG_CHECK(dtype.has_value(), tensor, "unsupported dtype \"", dtype_text,
           "\" (tapegrad reads F32, F64, F16, BF16, I64, BOOL)");

  const nlohmann::json& shape_field = value["shape"];
  TG_CHECK(shape_field.is_array(), tensor, "\"shape\" must be an array, got ",
           describe(shape_field));
  TG_CHECK(shape_field.size() <= kMaxRank, tensor, "\"shape\" has ", shape_field.size(),
           " dims, more than the ", kMaxRank, " a tensor may have");
  Shape shape;
  for (const nlohmann::json& extent : shape_field) {
    TG_CHECK(extent.is_number_integer(), tensor, "\"shape\" entries must be integers, got ",
             describe(extent));
    TG_CHECK(extent.is_number_unsigned(), tensor, "\"shape\" has a negative dimension ",
             describe(extent));
    const uint64_t size = extent.get<uint64_t>();
    TG_CHECK(size <= static_cast<uint64_t>(INT64_MAX), tensor, "dimension ", size, " is too large");
    shape.push_back(static_cast<int64_t>(size));
  }
  // The element count must fit in an int64 even when a zero dimension makes it 0.
  uint64_t nonzero_product = 1;
  for (int64_t extent : shape) {
    if (extent == 0) continue;
    const bool overflow = __builtin_mul_overflow(nonzero_product, static_cast<uint64_t>(extent),
                                                 &nonzero_product);
    TG_CHECK(!overflow && nonzero_product <= static_cast<uint64_t>(INT64_MAX), tensor, "shape ",
             shape_str(shape), " has too many elements");
  }
  const uint64_t numel = static_cast<uint64_t>(tg::numel(shape));

  const nlohmann::json& offsets = value["data_offsets"];
  TG_CHECK(offsets.is_array() && offsets.size() == 2, tensor,
           "\"data_offsets\" must be an array [begin, end], got ", describe(offsets));
  for (const nlohmann::json& offset : offsets) {
    TG_CHECK(offset.is_number_unsigned(), tensor,
             "\"data_offsets\" must hold non-negative integers, got ", describe(offset));
  }
  const uint64_t begin = offsets[0].get<uint64_t>();
  const uint64_t end = offsets[1].get<uint64_t>();
  TG_CHECK(begin <= end, tensor, "data_offsets [", begin, ", ", end, "] end before they begin");
  TG_CHECK(end <= buffer_bytes, tensor, "data_offsets [", begin, ", ", end,
           "] run past the end of the ", buffer_bytes, "-byte buffer");
  const uint64_t itemsize = dtype_size(*dtype);
  TG_CHECK(numel <= (end - begin) / itemsize && numel * itemsize == end - begin, tensor, "shape ",
           shape_str(shape), " of ", dtype_text, " needs ", numel, " x ", itemsize,
           " bytes but data_offsets [", begin, ", ", end, "] hold ", end - begin);
  return Entry{name, *dtype, shape, begin, end};
}

std::map<std::string, std::string> parse_metadata(const std::string& where,
                                                  const nlohmann::json& value) {
  std::map<std::string, std::string> metadata;
  if (value.is_null()) return metadata;  // no metadata (None in the reference implementation)
  TG_CHECK(value.is_object(), where, "\"__metadata__\" must be an object, got ", value.type_name());
  for (const auto& [key, text] : value.items()) {
    TG_CHECK(text.is_string(), where, "metadata \"", key, "\" must be a string, got ", describe(text));
    metadata[key] = text.get<std::string>();
  }
  return metadata;
}

// The entries must tile [0, buffer_bytes) exactly: in offset order, each begins where the last
// ended, and the last ends at the end of the buffer.
void check_tiling(const std::string& where, const std::vector<Entry>& entries,
                  uint64_t buffer_bytes) {
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    TG_CHECK(entry.begin >= covered, where, "tensors '", previous ? previous->name : "", "' [",
             previous ? previous->begin : 0, ", ", covered, ") and '", entry.name, "' [", entry.begin,
             ", ", entry.end, ") overlap");
    TG_CHECK(entry.begin == covered, where, "bytes [", covered, ", ", entry.begin,
             ") of the buffer belong to no tensor");
    covered = entry.end;
    previous = &entry;
  }
  TG_CHECK(covered == buffer_bytes, where, "the buffer has ", buffer_bytes,
           " bytes but the tensors cover only ", covered, " (trailing bytes)");
}

}  // namespace

// ---- The API ----------------------------------------------------------------------------------

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  NoGrad no_grad;  // contiguous() copies are not part of any graph
  std::vector<std::pair<std::string, Tensor>> contiguous;
  std::set<std::string> names;
  for (const auto& [name, tensor] : tensors) {
    TG_CHECK(name != kMetadataKey, "save_safetensors '", path, "': \"", kMetadataKey,
             "\" is reserved and cannot name a tensor");
    TG_CHECK(names.insert(name).second, "save_safetensors '", path, "': the name '", name,
             "' appears twice");
    TG_CHECK(tensor.defined(), "save_safetensors '", path, "': tensor '", name, "' is undefined");
    contiguous.emplace_back(name, tensor.cpu().contiguous());  // tensors on a GPU come over first
  }
  const std::string header = build_header(path, contiguous, metadata);

  AtomicFile file(path, "save_safetensors");
  uint8_t header_length[8];
  for (int i = 0; i < 8; ++i) header_length[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  file.write(header_length, sizeof header_length);
  file.write(header.data(), header.size());
  for (const auto& [name, tensor] : contiguous) {
    file.write(tensor.data(), static_cast<size_t>(tensor.numel()) * dtype_size(tensor.dtype()));
  }
  file.commit();
}

SafetensorsFile load_safetensors(const std::string& path) {
  const std::string where = "load_safetensors '" + path + "': ";
  const InputFile file(path, "load_safetensors");
  TG_CHECK(file.size() >= 8, where, "the file is ", file.size(),
           " bytes long, too short for the 8-byte header length");

  uint8_t length_bytes[8];
  file.read_at(0, length_bytes, 8);
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(length_bytes[i]) << (8 * i);
  TG_CHECK(header_bytes <= kMaxHeaderBytes, where, "the header length ", header_bytes,
           " is over the 100 MB limit");
  TG_CHECK(header_bytes <= file.size() - 8, where, "the header length ", header_bytes,
           " runs past the end of the ", file.size(), "-byte file");
  const uint64_t buffer_start = 8 + header_bytes;
  const uint64_t buffer_bytes = file.size() - buffer_start;

  std::string text(header_bytes, '\0');
  file.read_at(8, text.data(), header_bytes);
  // nlohmann's lexer stops at a NUL byte as at the end of a C string; JSON never contains one.
  const size_t nul = text.find('\0');
  TG_CHECK(nul == std::string::npos, where, "the header is not valid JSON: a NUL byte at position ",
           nul);
  // nlohmann keeps the last of two equal keys and drops the first without a word. A header that
  // names a tensor (or a field of one) twice is ambiguous, so it is refused: each object's keys
  // are collected as they are parsed.
  std::vector<std::set<std::string>> open_objects;
  const auto refuse_repeated_keys = [&](int, nlohmann::json::parse_event_t event,
                                        nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start) {
      open_objects.emplace_back();
    } else if (event == Event::object_end) {
      open_objects.pop_back();
    } else if (event == Event::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      TG_CHECK(open_objects.back().insert(key).second, where, "the header names '", key,
               "' twice (each key must appear once)");
    }
    return true;
  };
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text, refuse_repeated_keys);
  } catch (const nlohmann::json::exception& error) {
    fail(where, "the header is not valid JSON: ", error.what());
  }
  TG_CHECK(header.is_object(), where, "the header must be a JSON object, got ", header.type_name());

  SafetensorsFile result;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      result.metadata = parse_metadata(where, value);
    } else {
      entries.push_back(parse_entry(where, name, value, buffer_bytes));
    }
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_tiling(where, entries, buffer_bytes);

  for (const Entry& entry : entries) {
    Tensor tensor = empty(entry.shape, entry.dtype, kCPU);
    file.read_at(buffer_start + entry.begin, tensor.data(), entry.end - entry.begin);
    if (entry.dtype == DType::b8) {
      const uint8_t* bytes = tensor.data_as<uint8_t>();
      for (int64_t i = 0; i < tensor.numel(); ++i) {
        TG_CHECK(bytes[i] <= 1, where, "tensor '", entry.name, "' is BOOL but byte ", i, " is ",
                 static_cast<int>(bytes[i]), " (not 0 or 1)");
      }
    }
    result.tensors.emplace_back(entry.name, tensor);
  }
  return result;
}

}  // namespace tg
