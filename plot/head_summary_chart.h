#pragma once
// `tapegrad plot attention --summary`: a head analysis (analysis/head_analysis.h) as five heatmaps,
// one a metric, each with layers as rows and heads as columns. They share one colour scale from
// 0 to about 1: the three weights are fractions already, and entropy and distance are drawn as
// fractions of uniform attention's (1: as spread out, or as far, as attending evenly).
#include <string>

#include "tapegrad/analysis/head_analysis.h"

namespace tg::plot {

void head_summary_png(const std::string& path, const analysis::HeadAnalysis& analysis, const std::string& title);

}  // namespace tg::plot
