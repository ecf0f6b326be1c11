#pragma once
// Editing a saved checkpoint in tests: a copy with some tensors or metadata changed, to check
// that loading refuses what a corrupt file holds.
#include <functional>
#include <stdexcept>
#include <string>

#include <catch2/catch.hpp>

#include "tapegrad/io/safetensors.h"

namespace tg::testing {

// A copy of checkpoint `source` at `path`, its tensors and metadata changed by `edit`.
inline void write_edited(const std::string& source, const std::string& path,
                         const std::function<void(SafetensorsFile&)>& edit) {
  SafetensorsFile file = load_safetensors(source);
  edit(file);
  save_safetensors(path, file.tensors, file.metadata);
}

// The tensor stored under `name` (a test failure when there is none).
inline Tensor& tensor_named(SafetensorsFile& file, const std::string& name) {
  for (auto& [key, t] : file.tensors) {
    if (key == name) return t;
  }
  FAIL("no tensor " << name);
  throw std::logic_error("unreachable");
}

}  // namespace tg::testing
