#pragma once
// The three models the CLI trains.
#include <string>
#include <utility>
#include <vector>

#include "tapegrad/nn/positional_encoding.h"
#include "tapegrad/nn/transformer.h"

namespace tg::nn {

// Runs one encoder layer, under checkpoint() when `checkpointed` (its activations are then
// recomputed in backward instead of kept).
Tensor run_layer(const TransformerEncoderLayer& layer, const Tensor& x, const Tensor& mask,
                 bool is_causal, bool checkpointed);
// The same for a lone MultiHeadAttention used as self-attention (the tutorial-form models:
// TextClassifier with layers = 0, TimeSeriesModel with layers = 1): its projections and weights
// are recomputed in backward when `checkpointed`.
Tensor run_attention(const MultiHeadAttention& mha, const Tensor& x, const Tensor& mask, bool is_causal,
                     bool checkpointed);

// The names and shapes of a state_dict, in its order.
using StateShapes = std::vector<std::pair<std::string, Shape>>;

// A model's state_dict, computed without building the model, in the two parts Module::state_dict()
// concatenates: every parameter (a module's own before its children's), then every persistent
// buffer (the tutorial-form models' pos_encoding.pe, Performer's projection_matrix, one per
// attention). The optimizer's parameter i is
// parameters[i].
struct ModelStateShapes {
  StateShapes parameters;
  StateShapes buffers;
  // The prefix of every Linear ("mha.q_proj."), in state_dict order: what int8 quantization
  // converts (nn::quantized_state_shapes).
  std::vector<std::string> linears;
  StateShapes state_dict() const;  // parameters, then buffers
};

struct ModelConfig {
  int64_t dim = 64;
  int64_t heads = 4;
  int64_t layers = 1;
  double dropout = 0.0;
  int64_t max_len = 512;
  DType dtype = DType::f32;
  // Every attention's kind and position handling. Its max_len (Linformer's rows) is taken as
  // max_len above when left 0. The sinusoidal table is added to the input only for
  // PositionKind::sinusoidal; rope, alibi, t5 and shaw act inside attention, none adds nothing.
  AttentionSpec attention;
};

// Token ids -> embedding + positional encoding (when sinusoidal) -> a single MHA (layers = 0, the classic
// tutorial) or `layers` encoder layers -> mean over the non-padding positions -> linear head.
class TextClassifier : public ModuleOf<TextClassifier> {
 public:
  TextClassifier(int64_t vocab, int64_t classes, const ModelConfig& config);
  // What state_dict() of TextClassifier(vocab, classes, config) holds, computed without
  // allocating a tensor (to check a checkpoint before building its model); the same tg::Error
  // as the constructor for an impossible config.
  static ModelStateShapes state_shapes(int64_t vocab, int64_t classes, const ModelConfig& config);
  // tokens [B, S] i64; lengths[b] = number of real (non-padding) tokens of sequence b.
  Tensor forward(const Tensor& tokens, const std::vector<int64_t>& lengths) const;
  // What the first attention reads: the embedding, plus the positional encoding if any.
  Tensor embed(const Tensor& tokens) const;

  std::shared_ptr<Embedding> embedding;
  // "pos_encoding", null unless position is sinusoidal; with layers == 0 its table is in the
  // state_dict as the tutorial's buffer pos_encoding.pe [1, max_len, dim].
  std::shared_ptr<SinusoidalPositionalEncoding> pos_enc;
  std::shared_ptr<MultiHeadAttention> mha;                        // layers == 0
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;  // layers >= 1
  std::shared_ptr<Linear> fc;  // the head, named `fc` as the tutorial's model (old checkpoints: `classifier`)
  bool checkpoint_layers = false;  // checkpoint each layer, or the lone mha (run_layer, run_attention)
};

// x [B, T, D] -> input_proj Linear(D, H) -> positional encoding (when sinusoidal) -> mha (layers = 1) or `layers`
// encoder layers -> the last time step -> output Linear(H, P). With layers = 1 the state_dict
// names are input_proj.*, mha.{q,k,v,o}_proj.*, output.*, pos_encoding.pe, as the classic
// tutorial's model.
class TimeSeriesModel : public ModuleOf<TimeSeriesModel> {
 public:
  TimeSeriesModel(int64_t inputs, int64_t horizon, const ModelConfig& config);
  // state_dict()'s names and shapes without building the model, as TextClassifier's.
  static ModelStateShapes state_shapes(int64_t inputs, int64_t horizon, const ModelConfig& config);
  Tensor forward(const Tensor& x) const;  // -> [B, P]

  std::shared_ptr<Linear> input_proj;
  // "pos_encoding", null unless position is sinusoidal; with layers == 1 its table is in the
  // state_dict as the tutorial's buffer pos_encoding.pe [1, max_len, dim].
  std::shared_ptr<SinusoidalPositionalEncoding> pos_enc;
  std::shared_ptr<MultiHeadAttention> mha;
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<Linear> output;
  bool checkpoint_layers = false;  // checkpoint each layer, or the lone mha (run_layer, run_attention)
};

// A character language model: embedding + positional encoding (when sinusoidal) -> causal encoder layers ->
// final LayerNorm -> head over the vocabulary.
class CharLM : public ModuleOf<CharLM> {
 public:
  CharLM(int64_t vocab, const ModelConfig& config);
  // state_dict()'s names and shapes without building the model, as TextClassifier's.
  static ModelStateShapes state_shapes(int64_t vocab, const ModelConfig& config);
  Tensor forward(const Tensor& tokens) const;  // [B, S] -> logits [B, S, vocab]
  // What the first layer reads: the embedding, plus the positional encoding (of positions from
  // `offset`) if any.
  Tensor embed(const Tensor& tokens, int64_t offset = 0) const;

  // Incremental decoding (nn/kv_cache.h, nn/generation.h): an empty cache for `batch` sequences
  // of up to `capacity` positions (1 <= capacity <= max_len), on the model's device.
  KVCache make_cache(int64_t batch, int64_t capacity) const;
  // tokens [B, n] at positions cache.length() .. + n - 1 -> their logits [B, n, vocab], the
  // cache holding them afterwards: what forward gives for those positions of the whole sequence.
  // The cache is empty (the prompt) or n is 1; under NoGrad; every layer must decode
  // incrementally (decodes_incrementally(config.attention)); the cache must be this model's, its
  // positions computed with the weights as they are (KVCache::check_weights); tg::Error otherwise.
  // A call that throws leaves the cache as it was.
  Tensor forward_cached(const Tensor& tokens, KVCache& cache) const;

  std::shared_ptr<Embedding> embedding;
  std::shared_ptr<SinusoidalPositionalEncoding> pos_enc;  // null unless position is sinusoidal
  std::vector<std::shared_ptr<TransformerEncoderLayer>> layers;
  std::shared_ptr<LayerNorm> norm;
  std::shared_ptr<Linear> head;
  bool checkpoint_layers = false;
  int64_t max_len;          // the longest context (the positional table's rows)
  AttentionSpec attention;  // every layer's
};

}  // namespace tg::nn
