#include "train/config.h"

#include "autograd/error.h"
#include "autograd/kernels.h"

namespace tg::train {

nn::ModelConfig TrainConfig::model_config() const {
  nn::ModelConfig config;
  config.dim = dim;
  config.heads = heads;
  config.layers = layers;
  config.dropout = dropout;
  config.max_len = max_len;
  return config;
}

DType TrainConfig::amp_dtype() const {
  if (amp == "fp16") return DType::f16;
  if (amp == "bf16") return DType::bf16;
  return DType::f32;
}

Device TrainConfig::compute_device() const { return parse_device(device); }

void TrainConfig::validate() const {
  TG_CHECK(task == "textcls" || task == "timeseries" || task == "charlm", "--task must be textcls, ",
           "timeseries or charlm, got '", task, "'");
  TG_CHECK(dim > 0 && heads > 0, "--dim and --heads must be positive, got ", dim, " and ", heads);
  TG_CHECK(dim % heads == 0, "--heads ", heads, " does not divide --dim ", dim);
  TG_CHECK(layers >= 0 && (task != "timeseries" || layers >= 1),
           "--layers must be >= 0 (>= 1 for timeseries), got ", layers);
  TG_CHECK(max_len > 0, "--max-len must be positive, got ", max_len);
  TG_CHECK(dropout >= 0 && dropout < 1, "--dropout must be in [0, 1), got ", dropout);
  TG_CHECK(batch > 0, "--batch must be positive, got ", batch);
  TG_CHECK(epochs >= 0 && steps >= 0, "--epochs and --steps must be >= 0");
  TG_CHECK(lr > 0, "--lr must be positive, got ", lr);
  TG_CHECK(optimizer == "sgd" || optimizer == "adam" || optimizer == "adamw",
           "--optimizer must be sgd, adam or adamw, got '", optimizer, "'");
  TG_CHECK(warmup >= 0 && clip >= 0 && weight_decay >= 0, "--warmup, --clip and --weight-decay must be >= 0");
  TG_CHECK(val_frac >= 0 && val_frac < 1, "--val-frac must be in [0, 1), got ", val_frac);
  compute_device();  // a malformed --device is an error here; an absent one when first used
  TG_CHECK(amp == "none" || amp == "fp16" || amp == "bf16", "--amp must be none, fp16 or bf16, got '",
           amp, "'");
  TG_CHECK(window > 0 && horizon > 0, "--window and --horizon must be positive");
  TG_CHECK(task != "timeseries" || window <= max_len, "--window ", window, " is past --max-len ",
           max_len, " (the positional encoding's length)");
  TG_CHECK(normalize == "zscore" || normalize == "none", "--normalize must be zscore or none, got '",
           normalize, "'");
  TG_CHECK(tokenizer == "char" || tokenizer == "word", "--tokenizer must be char or word, got '",
           tokenizer, "'");
  TG_CHECK(context > 0, "--context must be positive, got ", context);
  TG_CHECK(task != "charlm" || context <= max_len, "--context ", context, " is past --max-len ",
           max_len, " (the positional encoding's length)");
}

nlohmann::json to_json(const TrainConfig& c) {
  return {{"task", c.task}, {"data", c.data}, {"dim", c.dim}, {"heads", c.heads},
          {"layers", c.layers}, {"max_len", c.max_len}, {"dropout", c.dropout},
          {"batch", c.batch}, {"epochs", c.epochs}, {"steps", c.steps}, {"lr", c.lr},
          {"weight_decay", c.weight_decay}, {"clip", c.clip}, {"val_frac", c.val_frac},
          {"optimizer", c.optimizer}, {"warmup", c.warmup}, {"seed", c.seed},
          {"threads", c.threads}, {"device", c.device},
          {"checkpoint_activations", c.checkpoint_activations}, {"shuffle", c.shuffle},
          {"eval_every", c.eval_every}, {"amp", c.amp}, {"window", c.window}, {"horizon", c.horizon},
          {"target", c.target}, {"normalize", c.normalize}, {"tokenizer", c.tokenizer},
          {"context", c.context}};
}

TrainConfig config_from_json(const nlohmann::json& json) {
  try {
    TrainConfig c;
    c.task = json.at("task");
    c.data = json.at("data");
    c.dim = json.at("dim");
    c.heads = json.at("heads");
    c.layers = json.at("layers");
    c.max_len = json.at("max_len");
    c.dropout = json.at("dropout");
    c.batch = json.at("batch");
    c.epochs = json.at("epochs");
    c.steps = json.at("steps");
    c.lr = json.at("lr");
    c.weight_decay = json.at("weight_decay");
    c.clip = json.at("clip");
    c.val_frac = json.at("val_frac");
    c.optimizer = json.at("optimizer");
    c.warmup = json.at("warmup");
    c.seed = json.at("seed");
    c.threads = json.at("threads");
    c.device = json.at("device");
    c.checkpoint_activations = json.at("checkpoint_activations");
    c.shuffle = json.at("shuffle");
    c.eval_every = json.at("eval_every");
    c.amp = json.value("amp", "none");  // checkpoints from before mixed precision have none
    c.window = json.at("window");
    c.horizon = json.at("horizon");
    c.target = json.at("target");
    c.normalize = json.at("normalize");
    c.tokenizer = json.at("tokenizer");
    c.context = json.at("context");
    c.validate();
    return c;
  } catch (const nlohmann::json::exception& error) {
    fail("checkpoint config is malformed: ", error.what());
  }
}

}  // namespace tg::train
