// `tapegrad plot tape --out tape.html`: one page, nothing fetched (plot/tape_plot.h). Each view
// of the graph is an inline <svg> laid out here; the script only shows one view and hides the
// others, so the page needs no layout code of its own.
#include <cstdio>
#include <sstream>

#include "tapegrad/plot/tape_plot.h"
#include "tapegrad/plot/tape_style.h"

namespace tg::plot {
namespace {

constexpr size_t kTapeMaxSingleViews = 16;  // more groups: only "all folded" and "all open"
// The plots' sizes are DejaVu Sans's height from ascent to descent (stb_truetype's pixel height),
// 1.164 of its em, which is what CSS's font-size sets: the page's text is as wide as measured.
constexpr double kTapeFontHeightPerEm = 2384.0 / 2048.0;

// `text` safe inside HTML text and attribute values.
std::string tape_html_escaped(const std::string& text) {
  std::string escaped;
  for (const char c : text) {
    switch (c) {
      case '&':
        escaped += "&amp;";
        break;
      case '<':
        escaped += "&lt;";
        break;
      case '>':
        escaped += "&gt;";
        break;
      case '"':
        escaped += "&quot;";
        break;
      case '\'':
        escaped += "&#39;";
        break;
      default:
        escaped += c;
    }
  }
  return escaped;
}

// A coordinate with one decimal.
std::string tape_number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", value);
  return text;
}

// Which view a click shows: each group's own view when open (or all open, past
// kTapeMaxSingleViews groups), and the views' count.
struct TapeViews {
  std::vector<std::vector<bool>> expanded;  // one a view
  std::vector<size_t> open_view;            // one a group: the view a click on it shows
};

TapeViews tape_views(size_t groups) {
  TapeViews views;
  if (groups == 0) {
    views.expanded.emplace_back();
    return views;
  }
  views.expanded.emplace_back(groups, false);
  const bool singles = groups <= kTapeMaxSingleViews;
  for (size_t g = 0; singles && g < groups; ++g) {
    views.expanded.emplace_back(groups, false);
    views.expanded.back()[g] = true;
  }
  views.expanded.emplace_back(groups, true);
  for (size_t g = 0; g < groups; ++g) views.open_view.push_back(singles ? 1 + g : 1);
  return views;
}

// One box as SVG: its tooltip, its rectangle, its lines; a folded group opens on a click.
void tape_svg_box(std::ostream& out, const TapeBox& box, const BoxSize& size, Point centre,
                  const TapeViews& views) {
  const TapeBoxColours colours = tape_box_colours(box.kind);
  const double left = centre.x - size.width / 2, top = centre.y - size.height / 2;
  out << "<g class=\"box\"";
  if (box.kind == TapeBoxKind::group) out << " data-show=\"" << views.open_view[box.group] << "\"";
  out << "><title>" << tape_html_escaped(box.details) << "</title><rect x=\"" << tape_number(left)
      << "\" y=\"" << tape_number(top) << "\" width=\"" << tape_number(size.width) << "\" height=\""
      << tape_number(size.height) << "\" rx=\"3\" fill=\"" << tape_hex(colours.fill)
      << "\" stroke=\"" << tape_hex(colours.border) << "\"/><text>";
  for (size_t i = 0; i < box.lines.size(); ++i) {
    const double y = top + kTapePadding / 2 + (static_cast<double>(i) + 0.5) * kTapeLineHeight;
    out << "<tspan x=\"" << tape_number(centre.x) << "\" y=\"" << tape_number(y) << "\">"
        << tape_html_escaped(box.lines[i]) << "</tspan>";
  }
  out << "</text></g>\n";
}

// An open group's band: a click folds every group again. The first band of a group names it.
void tape_svg_band(std::ostream& out, const TapeBand& band, const std::string& name) {
  out << "<g class=\"band\" data-show=\"0\"><title>" << tape_html_escaped(name)
      << ": click to collapse</title><rect x=\"" << tape_number(band.left) << "\" y=\""
      << tape_number(band.top) << "\" width=\"" << tape_number(band.right - band.left)
      << "\" height=\"" << tape_number(band.bottom - band.top) << "\" fill=\""
      << tape_hex(tape_band_fill(band.group)) << "\"/>";
  if (band.named) {
    out << "<text class=\"name\" x=\"" << tape_number(band.left + 4) << "\" y=\""
        << tape_number(band.top + 8) << "\">" << tape_html_escaped(name)
        << " (click to collapse)</text>";
  }
  out << "</g>\n";
}

// View `index` as one <svg>, hidden until the script shows it.
void tape_svg(std::ostream& out, const TapeGraph& graph, const TapeGroups& groups,
              const TapeViews& views, size_t index) {
  const TapeView view = tape_view(graph, groups, views.expanded[index]);
  const std::vector<BoxSize> sizes = tape_box_sizes(view);
  const LayeredDrawing drawing = layered_drawing(sizes, view.edges);
  out << "<svg class=\"tape\" data-view=\"" << index << "\" width=\"" << tape_number(drawing.width)
      << "\" height=\"" << tape_number(drawing.height) << "\" style=\"display:none\">\n";
  for (const TapeBand& band : tape_bands(view, sizes, drawing)) {
    tape_svg_band(out, band, groups.names[band.group]);
  }
  for (const auto& path : drawing.paths) {
    out << "<path class=\"arrow\" d=\"";
    for (size_t i = 0; i < path.size(); ++i) {
      out << (i == 0 ? "M" : " L") << tape_number(path[i].x) << " " << tape_number(path[i].y);
    }
    out << "\"/>\n";
  }
  for (size_t box = 0; box < view.boxes.size(); ++box) {
    tape_svg_box(out, view.boxes[box], sizes[box], drawing.centres[box], views);
  }
  out << "</svg>\n";
}

// The style sheet and the arrowhead every view's arrows end in.
void tape_html_head(std::ostream& out, const std::string& title) {
  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>"
      << tape_html_escaped(title)
      << "</title>\n<style>\n"
         "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:16px;color:#141414}\n"
         "h1{font-size:16px;font-weight:normal}\n"
         ".legend span{display:inline-block;width:12px;height:12px;border:1px solid;"
         "margin:0 4px 0 14px;vertical-align:middle}\n"
         "p{font-size:13px}\n"
         "svg.tape text{font-size:"
      << tape_number(kTapeTextSize / kTapeFontHeightPerEm)
      << "px;text-anchor:middle;"
         "dominant-baseline:central;fill:"
      << tape_hex(kTapeText)
      << "}\n"
         "svg.tape text.name{text-anchor:start;fill:"
      << tape_hex(kTapeBandText)
      << "}\n"
         ".arrow{fill:none;stroke:"
      << tape_hex(kTapeArrow)
      << ";stroke-width:1.2;"
         "marker-end:url(#tape-arrowhead)}\n"
         "[data-show]{cursor:pointer}\nbutton{margin-right:8px}\n"
         "</style></head><body>\n<svg width=\"0\" height=\"0\" style=\"position:absolute\">"
         "<defs><marker id=\"tape-arrowhead\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
         "markerWidth=\"8\" markerHeight=\"8\" orient=\"auto\"><path d=\"M0 0 L10 5 L0 10 z\" "
         "fill=\""
      << tape_hex(kTapeArrow) << "\"/></marker></defs></svg>\n";
}

// The title, the legend and, with groups, the buttons that fold and open them all.
void tape_html_header(std::ostream& out, const std::string& title, const TapeViews& views) {
  out << "<h1>" << tape_html_escaped(title) << "</h1>\n<p class=\"legend\">";
  for (const TapeLegendEntry& entry : tape_legend()) {
    const TapeBoxColours colours = tape_box_colours(entry.kind);
    out << "<span style=\"background:" << tape_hex(colours.fill)
        << ";border-color:" << tape_hex(colours.border) << "\"></span>"
        << tape_html_escaped(entry.meaning);
  }
  out << "</p>\n";
  if (views.expanded.size() > 1) {
    out << "<p><button data-show=\"0\">collapse every layer</button><button data-show=\""
        << views.expanded.size() - 1
        << "\">expand every layer</button> a collapsed layer expands on "
        << "a click; hover over a box for what it holds</p>\n";
  }
}

}  // namespace

std::string tape_html(const TapeGraph& graph, const TapeGroups& groups, const std::string& title) {
  std::ostringstream out;
  const TapeViews views = tape_views(groups.names.size());
  tape_html_head(out, title);
  tape_html_header(out, title, views);
  for (size_t view = 0; view < views.expanded.size(); ++view)
    tape_svg(out, graph, groups, views, view);
  out << "<script>\n"
         "function show(view) {\n"
         "  for (const svg of document.querySelectorAll('svg.tape'))\n"
         "    svg.style.display = svg.dataset.view === String(view) ? '' : 'none';\n"
         "}\n"
         "document.addEventListener('click', event => {\n"
         "  const target = event.target.closest('[data-show]');\n"
         "  if (target) show(target.dataset.show);\n"
         "});\n"
         "show(0);\n"
         "</script>\n</body></html>\n";
  return out.str();
}

}  // namespace tg::plot
