#pragma once
// Byte strings in JSON without loss. JSON text must be valid UTF-8, but a vocabulary token, a
// label, a column name or a path read from a user's file may not be. Valid UTF-8 is stored as a
// JSON string, so checkpoints stay readable; anything else as an array of its byte values.
#include <string>

#include <nlohmann/json.hpp>

namespace tg::train {

bool is_valid_utf8(const std::string& bytes);
nlohmann::json bytes_to_json(const std::string& bytes);
// The inverse; tg::Error naming `what` for anything but a string or an array of 0..255.
std::string bytes_from_json(const nlohmann::json& value, const char* what);

}  // namespace tg::train
