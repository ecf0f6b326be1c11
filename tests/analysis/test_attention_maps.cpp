// analysis/attention_maps.h: how a plot shows a token (the maps themselves are run end to end in
// tests/cli/test_plot_attention.cpp).
#include <catch2/catch.hpp>

#include "tapegrad/analysis/attention_maps.h"

using tg::analysis::visible_token;

TEST_CASE("visible_token: a space as U+2423, control characters as their control pictures",
          "[attention-maps]") {
  CHECK(visible_token(" ") == "\xe2\x90\xa3");     // U+2423 OPEN BOX
  CHECK(visible_token("\n") == "\xe2\x90\x8a");    // U+240A SYMBOL FOR LINE FEED
  CHECK(visible_token("\t") == "\xe2\x90\x89");    // U+2409 SYMBOL FOR HORIZONTAL TABULATION
  CHECK(visible_token(std::string(1, '\0')) == "\xe2\x90\x80");  // U+2400 SYMBOL FOR NULL
  CHECK(visible_token("\x1f") == "\xe2\x90\x9f");  // U+241F SYMBOL FOR UNIT SEPARATOR
  CHECK(visible_token("\x7f") == "\xe2\x90\xa1");  // U+2421 SYMBOL FOR DELETE
  // Everything else as it is: letters, words, other scripts, and text around a space.
  for (const std::string token : {"a", "~", "cat", "\xc3\xa9", "a b", "<unk>"}) {
    CHECK(visible_token(token) == token);
  }
}
