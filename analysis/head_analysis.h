#pragma once
// The head metrics (analysis/head_metrics.h) of every attention head of a textcls or charlm
// checkpoint, over a sample of a data file: the numbers behind `tapegrad analyze heads` and
// `tapegrad plot attention --summary`.
#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/train/checkpoint_file.h"
#include "tapegrad/analysis/head_metrics.h"

namespace tg::analysis {

struct LayerHeadMetrics {
  int64_t layer = 0;
  std::vector<HeadMetrics> heads;  // one a head
};

struct HeadAnalysis {
  std::vector<LayerHeadMetrics> layers;
  int64_t sequences = 0;  // how many sequences of the data were run
  int64_t queries = 0;    // real (non-padding) query positions among them
  bool causal = false;    // charlm: query i sees keys j <= i
};

// Runs `samples` sequences of `data_path` (evenly spaced over the file: textcls examples, charlm
// windows of the config's context) through the model in eval mode, in batches, and averages each
// head's metrics over every real query. textcls batches are padded: the padding mask the model
// uses hides padded keys, and only real queries and keys are read. `layer` picks one layer
// (-1: all). Linformer and Performer never form [S, S] weights: a tg::Error says so.
HeadAnalysis analyze_heads(const train::Checkpoint& checkpoint, const std::string& data_path,
                           int64_t samples, int64_t layer = -1);

}  // namespace tg::analysis
