#pragma once
// `tapegrad plot attention --summary`: a head analysis (analysis/head_analysis.h) as five heatmaps
// (plot/png.h's heatmap_png), one a metric, each with layers as rows and heads as columns. It sits
// in cli/, which puts analysis/ and plot/ together: plot/ draws any numbers and knows no analysis.
// The panels share one colour scale from 0 to about 1: the three weights are fractions already,
// and entropy and distance are drawn as fractions of uniform attention's (1: as spread out, or as
// far, as attending evenly).
#include <string>

#include "tapegrad/analysis/head_analysis.h"

namespace tg::cli {

void head_summary_png(const std::string& path, const analysis::HeadAnalysis& analysis, const std::string& title);

}  // namespace tg::cli
