#pragma once
// The safetensors format (https://github.com/huggingface/safetensors), as PyTorch and the
// reference implementation write it:
//
//   8 bytes     N, the header length, unsigned little-endian
//   N bytes     JSON: {"__metadata__": {"key": "value", ...},
//                      "name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]},
//                      ...}
//               padded with spaces so that N is a multiple of 8
//   the rest    the byte buffer: each tensor's elements in C order, little-endian, at
//               [begin, end) counted from the start of the buffer
//
// dtype strings: F32, F64, F16, BF16, I64, BOOL (one byte, 0 or 1).
//
// save_safetensors writes the tensors in the order given (contiguous CPU copies) to a temporary
// file next to `path`, syncs it and renames it over `path`: a failed save throws tg::Error and
// leaves whatever was at `path` untouched. The rules of io/file_io.h apply: a symbolic link is
// followed (the file it leads to is replaced), and a directory, FIFO, socket or device at `path`
// is refused; load_safetensors refuses anything but a regular file, without blocking on a FIFO.
//
// load_safetensors checks everything before it trusts it (the header length against the file and
// a 100 MB limit, the JSON, every entry's fields, dtypes and shapes, that the data_offsets tile the
// buffer exactly with no overlaps, gaps or trailing bytes, that metadata values are strings, that
// bool bytes are 0 or 1) and throws tg::Error naming the file and the problem. Tensors come back
// in buffer order, which for files written here is the order they were saved in.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

SafetensorsFile load_safetensors(const std::string& path);

}  // namespace tg
