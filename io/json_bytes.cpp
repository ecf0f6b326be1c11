#include "tapegrad/io/json_bytes.h"

#include "tapegrad/autograd/error.h"

namespace tg::train {

bool is_valid_utf8(const std::string& bytes) {
  try {
    (void)nlohmann::json(bytes).dump();  // the JSON library's own UTF-8 check
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

nlohmann::json bytes_to_json(const std::string& bytes) {
  if (is_valid_utf8(bytes)) return bytes;
  nlohmann::json values = nlohmann::json::array();
  for (const char byte : bytes) values.push_back(static_cast<unsigned char>(byte));
  return values;
}

std::string bytes_from_json(const nlohmann::json& value, const char* what) {
  if (value.is_string()) return value.get<std::string>();
  TG_CHECK(value.is_array(), what, ": expected a string or an array of bytes, got a ",
           value.type_name());
  std::string bytes;
  for (const nlohmann::json& byte : value) {
    TG_CHECK(byte.is_number_unsigned() && byte.get<uint64_t>() <= 255, what,
             ": an array of bytes may hold only integers 0..255");
    bytes.push_back(static_cast<char>(byte.get<uint64_t>()));
  }
  return bytes;
}

}  // namespace tg::train
