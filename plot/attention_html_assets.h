#pragma once
// The fixed parts of the attention page (plot/attention_html.h), kept apart from the C++ that
// fills it in: its style sheet, the error hook that runs first, the markup of its two views, and
// its script. The page is <head> style + error hook, <body> views + data + script.
namespace tg::plot {

extern const char* const kAttentionViewerStyle;
// Runs before anything else: every script error (a syntax error in the main script included)
// goes into <body data-errors="...">, and data-status becomes "error".
extern const char* const kAttentionViewerErrorHook;
extern const char* const kAttentionViewerBody;
// Reads <script id="tg-data">, builds both views, and when done sets <body data-status="ok">
// (unless an error came first), data-layers, data-heads and data-lines (lines drawn so far).
extern const char* const kAttentionViewerScript;

}  // namespace tg::plot
