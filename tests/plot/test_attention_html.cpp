// plot/attention_html.h: the escaping that keeps user text from breaking out of the page's data
// block, the data as JSON (parsed back with nlohmann::json), the page's structure (everything
// inline, nothing fetched), the checks on a malformed page, and the atomic write. The page's
// script running in a browser is tests/plot/attention_viewer_browser.py's.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/plot/attention_html.h"
#include "tests/support/temp_files.h"

using namespace tg;
using tg::plot::AttentionPage;
using tg::plot::attention_page_html;
using tg::plot::attention_page_json;
using tg::plot::html_escape;
using tg::plot::script_safe_json_string;

namespace {

// Two layers x one head over two queries and three keys, labels that try to break out.
AttentionPage hostile_page() {
  AttentionPage page;
  page.title = "x</title><script>alert(1)</script>";
  page.notes = {"a & b <i>"};
  page.query_labels = {"</script><script>alert(2)</script>", "\"\\"};
  page.key_labels = {"<!--", "\xe2\x80\xa8", "\x01"};
  page.layers = 2;
  page.heads = 1;
  page.weights = {0.5, 0.25, 0.25, 1, 0, 0, 0.123456, 1e-5, -2.5, 0, 0, 1};
  page.first_layer = 1;
  return page;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The text of the page's data block.
std::string data_block(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"tg-data\">";
  const size_t start = html.find(open);
  REQUIRE(start != std::string::npos);
  const size_t end = html.find("</script>", start);
  return html.substr(start + open.size(), end - start - open.size());
}

}  // namespace

TEST_CASE("script_safe_json_string: quotes, control characters and markup escaped",
          "[attention-html]") {
  CHECK(script_safe_json_string("abc") == "\"abc\"");
  CHECK(script_safe_json_string("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(script_safe_json_string("\n\t\x01\x7f") == "\"\\n\\t\\u0001\\u007f\"");
  CHECK(script_safe_json_string("</script>") == "\"\\u003c/script\\u003e\"");
  CHECK(script_safe_json_string("<!--&") == "\"\\u003c!--\\u0026\"");
  CHECK(script_safe_json_string("\xe2\x80\xa8\xe2\x80\xa9") == "\"\\u2028\\u2029\"");
  // Well-formed UTF-8 stays as it is; each malformed byte becomes U+FFFD.
  CHECK(script_safe_json_string("\xc3\xa9\xe2\x90\xa3\xf0\x9f\x98\x80") ==
        "\"\xc3\xa9\xe2\x90\xa3\xf0\x9f\x98\x80\"");
  CHECK(script_safe_json_string("a\xff" "b") == "\"a\xef\xbf\xbd" "b\"");
  CHECK(script_safe_json_string("\xc0\xaf") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");  // overlong '/'
  CHECK(script_safe_json_string("\xed\xa0\x80") ==  // a UTF-16 surrogate
        "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
  CHECK(script_safe_json_string("\xe2\x82") == "\"\xef\xbf\xbd\xef\xbf\xbd\"");  // cut short
  // Whatever the bytes, the result parses as JSON.
  std::string every_byte;
  for (int b = 0; b < 256; ++b) every_byte += static_cast<char>(b);
  CHECK(nlohmann::json::parse(script_safe_json_string(every_byte)).is_string());
}

TEST_CASE("html_escape: the five characters of markup", "[attention-html]") {
  CHECK(html_escape("a<b>&\"'c") == "a&lt;b&gt;&amp;&quot;&#39;c");
  CHECK(html_escape("plain \xe2\x90\xa3") == "plain \xe2\x90\xa3");
}

TEST_CASE("attention_page_json: labels and weights round-trip as [layer][head][query][key]",
          "[attention-html]") {
  const AttentionPage page = hostile_page();
  const nlohmann::json data = nlohmann::json::parse(attention_page_json(page));
  CHECK(data.at("title") == page.title);
  CHECK(data.at("queries") == page.query_labels);
  CHECK(data.at("keys") == page.key_labels);
  CHECK(data.at("layers") == 2);
  CHECK(data.at("heads") == 1);
  CHECK(data.at("signed") == false);
  CHECK(data.at("firstLayer") == 1);
  const nlohmann::json& weights = data.at("weights");
  REQUIRE(weights.size() == 2);        // layers
  REQUIRE(weights[0].size() == 1);     // heads
  REQUIRE(weights[0][0].size() == 2);  // queries
  REQUIRE(weights[0][0][0].size() == 3);  // keys
  CHECK(weights[0][0][0] == std::vector<double>{0.5, 0.25, 0.25});
  CHECK(weights[0][0][1] == std::vector<double>{1, 0, 0});
  // 4 significant digits
  CHECK(weights[1][0][0] == std::vector<double>{0.1235, 1e-5, -2.5});
  CHECK(weights[1][0][1] == std::vector<double>{0, 0, 1});
}

TEST_CASE("attention_page_html: one self-contained page that no label can break out of",
          "[attention-html]") {
  const std::string html = attention_page_html(hostile_page());
  CHECK(html.rfind("<!DOCTYPE html>", 0) == 0);
  // The error hook, the data and the viewer's script: three scripts, each closed once, and
  // none of the labels' "</script" or "<!--" in the page as written.
  CHECK(count_of(html, "<script") == 3);
  CHECK(count_of(html, "</script>") == 3);
  CHECK(count_of(html, "<!--") == 0);
  CHECK(count_of(html, "<style>") == 1);
  // Nothing from the network: no external script, style sheet, image or font.
  for (const char* external : {" src=", "<link", "@import", "url(", "<img", "<iframe"}) {
    INFO(external);
    CHECK(count_of(html, external) == 0);
  }
  // The title and notes as text.
  CHECK(count_of(html, "<title>x&lt;/title&gt;&lt;script&gt;alert(1)&lt;/script&gt;</title>") == 1);
  CHECK(count_of(html, "<p class=\"tg-note\">a &amp; b &lt;i&gt;</p>") == 1);
  // The views' anchors the script fills in, and the status the browser test reads.
  for (const char* id : {"id=\"tg-layer\"", "id=\"tg-heads\"", "id=\"tg-lines\"", "id=\"tg-grid\"",
                         "id=\"tg-left\"", "id=\"tg-right\"", "data-status=\"loading\""}) {
    INFO(id);
    CHECK(count_of(html, id) == 1);
  }
  const nlohmann::json data = nlohmann::json::parse(data_block(html));
  CHECK(data.at("queries")[0] == "</script><script>alert(2)</script>");
  CHECK(data.at("keys")[0] == "<!--");
}

TEST_CASE("attention_page_json: a malformed page is one error naming what is wrong",
          "[attention-html]") {
  const auto require_error = [](AttentionPage page, const std::string& expected) {
    REQUIRE_THROWS_WITH(attention_page_json(page), Catch::Contains(expected));
  };
  AttentionPage page = hostile_page();
  page.weights.pop_back();
  require_error(page, "11 weights for 2 layers x 1 heads x 2 queries x 3 keys (12)");
  page = hostile_page();
  page.weights[4] = std::nan("");
  require_error(page, "weight 4 is nan");
  page = hostile_page();
  page.heads = 0;
  require_error(page, "2 layers and 0 heads");
  page = hostile_page();
  page.key_labels.clear();
  require_error(page, "no query or no key labels");
  page = hostile_page();
  page.first_layer = 2;
  require_error(page, "first layer 2 is outside the 2 layers");
}

TEST_CASE("attention_html: writes the page, and a failed write leaves the old file",
          "[attention-html]") {
  tg::testing::TempDir dir;
  const std::string path = dir.file("attention.html");
  plot::attention_html(path, hostile_page(), "--html");
  CHECK(tg::testing::read_bytes(path) == attention_page_html(hostile_page()));
  AttentionPage bad = hostile_page();
  bad.weights.clear();
  REQUIRE_THROWS(plot::attention_html(path, bad, "--html"));
  CHECK(tg::testing::read_bytes(path) == attention_page_html(hostile_page()));
}
