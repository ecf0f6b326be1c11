#pragma once
// The attention of every layer of a checkpoint's model on one input: one [heads, S, S] matrix a
// layer and a label a position, what `tapegrad plot attention` draws (one layer as a PNG, every
// layer as an HTML page). Every task and every kind of attention: Linformer's, Performer's and
// Reformer's weights are the ones their approximation implies (nn/attention_weights.h).
#include <cstdint>
#include <string>
#include <vector>

#include "tapegrad/autograd/tensor.h"
#include "tapegrad/train/checkpoint_file.h"

namespace tg::analysis {

struct AttentionMaps {
  std::vector<std::string> labels;  // one a position: the tokens as read, or t-(T-1) ... t-0
  std::vector<Tensor> layers;       // [heads, S, S] a layer, first to last, on the host
  bool causal = false;              // charlm: query i sees keys j <= i
  bool implied = false;             // Linformer, Performer, Reformer: computed for the plot
  int64_t window_index = -1;        // timeseries: the window of the CSV plotted
};

// A textcls or charlm checkpoint's attention on the tokens of `text` (characters for charlm),
// which must fit the model's max_len. Each layer's input and weights are checked finite
// (check_finite_results names "the input of attention layer N" or "the attention weights of
// layer N").
AttentionMaps text_attention_maps(const train::Checkpoint& checkpoint, const std::string& text);

// A timeseries checkpoint's attention on window `index` of the CSV at `csv_path` (its data rows
// index + 1 to index + T, row 1 being the first after the header, read with the checkpoint's
// columns and normalisation; -1: the last window, which load_timeseries' windows end P rows
// before the end), its positions labelled t-(T-1) ... t-0 (t-0: the step the forecast is read
// from).
AttentionMaps series_attention_maps(const train::Checkpoint& checkpoint,
                                    const std::string& csv_path, int64_t index);

// A token as a plot shows it: a space as U+2423 (␣), a control character as its Unicode control
// picture (U+2400 + code, U+2421 for DEL: a newline shows as ␊), anything else unchanged.
std::string visible_token(const std::string& token);

}  // namespace tg::analysis
