#pragma once
// `tapegrad plot attention --html`: one self-contained HTML page (its script and style inline,
// nothing fetched from the network) with the attention of every layer and head of a model on one
// input, as BertViz draws it. A head view: the positions on both sides, a line from each query on
// the left to each key on the right, as opaque as its weight, one colour a head; the heads are
// coloured toggles, and hovering a position shows only its lines. A model view: a grid of
// layers x heads thumbnails; clicking one shows it in the head view. The data travels as JSON in
// a <script type="application/json"> element, escaped so that no label can end it, and the page's
// script puts labels into the page as text, never as markup. The page's script and style are in
// attention_html_assets.cpp.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tg::plot {

struct AttentionPage {
  std::string title;               // what the page shows, e.g. "charlm attention (full, ...)"
  std::vector<std::string> notes;  // paragraphs under the title: how to read the weights
  std::vector<std::string> query_labels, key_labels;  // one a position, UTF-8, as shown
  int64_t layers = 0, heads = 0;
  std::vector<double> weights;   // [layers, heads, queries, keys] row-major, all finite
  bool signed_weights = false;   // may be negative (Linformer's implied matrix): lines are drawn
                                 // as |w| / (the head's largest |w|), negative ones dashed
  int64_t first_layer = 0;       // the layer the head view opens on
};

// The page's data as JSON: {"title", "queries", "keys", "layers", "heads", "signed",
// "firstLayer", "weights": [layer][head][query][key]}, each weight with 4 significant digits.
// A malformed page (no layer or head, no labels, a weight count that is not
// layers x heads x queries x keys, a weight that is not finite, first_layer outside the layers)
// is a tg::Error.
std::string attention_page_json(const AttentionPage& page);

// The whole page: <!DOCTYPE html> ... with attention_page_json in <script id="tg-data">.
std::string attention_page_html(const AttentionPage& page);

// Writes attention_page_html to `path` atomically (io/file_io.h), naming `flag` in errors.
void attention_html(const std::string& path, const AttentionPage& page, const std::string& flag);

// A JSON string literal (quotes included) for `text` that is also safe inside an HTML <script>
// element and in JavaScript: '"', '\' and control characters escaped, '<', '>' and '&' as
// \u003c, \u003e, \u0026 (so neither "</script" nor "<!--" can appear), U+2028 and U+2029 as
// \u2028 and \u2029, and each malformed UTF-8 byte replaced by U+FFFD.
std::string script_safe_json_string(std::string_view text);

// `text` for HTML content or a quoted attribute value: & < > " ' as character references.
std::string html_escape(std::string_view text);

}  // namespace tg::plot
