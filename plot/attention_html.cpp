#include "tapegrad/plot/attention_html.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/file_io.h"
#include "tapegrad/plot/attention_html_assets.h"

namespace tg::plot {
namespace {

// The code point of the well-formed UTF-8 sequence at text[at], and its length in bytes; length 1
// and point -1 for a malformed byte (a stray continuation, a cut, overlong or surrogate sequence,
// or a value past U+10FFFF).
std::pair<int, size_t> html_next_code_point(std::string_view text, size_t at) {
  const auto byte = static_cast<unsigned char>(text[at]);
  if (byte < 0x80) return {byte, 1};
  const size_t length = (byte >> 5) == 0x6 ? 2 : (byte >> 4) == 0xE ? 3
                        : (byte >> 3) == 0x1E ? 4 : 0;
  if (length == 0 || at + length > text.size()) return {-1, 1};
  int point = byte & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) {
    const auto next = static_cast<unsigned char>(text[at + k]);
    if ((next >> 6) != 0x2) return {-1, 1};
    point = (point << 6) | (next & 0x3F);
  }
  const int smallest[] = {0, 0, 0x80, 0x800, 0x10000};  // shorter forms are overlong
  const bool surrogate = point >= 0xD800 && point <= 0xDFFF;
  if (point < smallest[length] || surrogate || point > 0x10FFFF) return {-1, 1};
  return {point, length};
}

// "\uXXXX" for a code point of the Basic Multilingual Plane.
std::string html_json_escape(int point) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "\\u%04x", point);
  return buffer;
}

// A weight with 4 significant digits, in the shortest form JSON reads ("0.1234", "1e-05").
std::string html_json_number(double value) {
  char buffer[32];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, 4);
  return std::string(buffer, result.ptr);
}

// A JSON array of script-safe strings.
std::string html_json_strings(const std::vector<std::string>& texts) {
  std::string out = "[";
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out += ',';
    out += script_safe_json_string(texts[i]);
  }
  return out + "]";
}

// The checks attention_page_json promises, each naming what is wrong.
void check_attention_page(const AttentionPage& page) {
  TG_CHECK(page.layers >= 1 && page.heads >= 1, "attention page: ", page.layers, " layers and ",
           page.heads, " heads; each must be at least 1");
  TG_CHECK(!page.query_labels.empty() && !page.key_labels.empty(),
           "attention page: no query or no key labels");
  const size_t expected = static_cast<size_t>(page.layers * page.heads) *
                          page.query_labels.size() * page.key_labels.size();
  TG_CHECK(page.weights.size() == expected, "attention page: ", page.weights.size(),
           " weights for ", page.layers, " layers x ", page.heads, " heads x ",
           page.query_labels.size(), " queries x ", page.key_labels.size(), " keys (", expected,
           ")");
  for (size_t i = 0; i < page.weights.size(); ++i) {
    TG_CHECK(std::isfinite(page.weights[i]), "attention page: weight ", i, " is ", page.weights[i]);
  }
  TG_CHECK(page.first_layer >= 0 && page.first_layer < page.layers, "attention page: first layer ",
           page.first_layer, " is outside the ", page.layers, " layers");
}

// The weights as nested arrays [layer][head][query][key].
std::string html_json_weights(const AttentionPage& page) {
  const size_t queries = page.query_labels.size(), keys = page.key_labels.size();
  const auto heads = static_cast<size_t>(page.heads);
  const size_t rows = static_cast<size_t>(page.layers) * heads * queries;
  std::string out = "[";
  for (size_t row = 0; row < rows; ++row) {
    if (row % (heads * queries) == 0) out += row ? "]],[[" : "[[";  // a new layer
    else if (row % queries == 0) out += "],[";                     // a new head
    else out += ",";
    out += "[";
    for (size_t key = 0; key < keys; ++key) {
      if (key) out += ",";
      out += html_json_number(page.weights[row * keys + key]);
    }
    out += "]";
  }
  return out + "]]]";
}

}  // namespace

std::string script_safe_json_string(std::string_view text) {
  std::string out = "\"";
  for (size_t at = 0; at < text.size();) {
    const auto [point, length] = html_next_code_point(text, at);
    if (point == '"') out += "\\\"";
    else if (point == '\\') out += "\\\\";
    else if (point == '\n') out += "\\n";
    else if (point == '\t') out += "\\t";
    else if (point < 0) out += "\uFFFD";  // a malformed byte
    else if (point < 0x20 || point == 0x7F || point == '<' || point == '>' || point == '&' ||
             point == 0x2028 || point == 0x2029) {
      out += html_json_escape(point);
    } else {
      out.append(text.substr(at, length));
    }
    at += length;
  }
  return out + "\"";
}

std::string html_escape(std::string_view text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string attention_page_json(const AttentionPage& page) {
  check_attention_page(page);
  return "{\"title\":" + script_safe_json_string(page.title) +
         ",\"queries\":" + html_json_strings(page.query_labels) +
         ",\"keys\":" + html_json_strings(page.key_labels) +
         ",\"layers\":" + std::to_string(page.layers) + ",\"heads\":" + std::to_string(page.heads) +
         ",\"signed\":" + (page.signed_weights ? "true" : "false") +
         ",\"firstLayer\":" + std::to_string(page.first_layer) +
         ",\"weights\":" + html_json_weights(page) + "}";
}

std::string attention_page_html(const AttentionPage& page) {
  const std::string data = attention_page_json(page);
  std::string notes;
  for (const std::string& note : page.notes) {
    notes += "<p class=\"tg-note\">" + html_escape(note) + "</p>\n";
  }
  return "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
         "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
         "<title>" + html_escape(page.title) + "</title>\n"
         "<style>\n" + std::string(kAttentionViewerStyle) + "</style>\n"
         "<script>\n" + std::string(kAttentionViewerErrorHook) + "</script>\n"
         "</head>\n<body data-status=\"loading\" data-errors=\"\">\n"
         "<header>\n<h1>" + html_escape(page.title) + "</h1>\n" + notes + "</header>\n" +
         std::string(kAttentionViewerBody) +
         "<script type=\"application/json\" id=\"tg-data\">" + data + "</script>\n"
         "<script>\n" + std::string(kAttentionViewerScript) + "</script>\n</body>\n</html>\n";
}

void attention_html(const std::string& path, const AttentionPage& page, const std::string& flag) {
  write_file_atomically(path, attention_page_html(page), flag);
}

}  // namespace tg::plot
