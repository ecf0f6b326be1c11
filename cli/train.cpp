// `tapegrad train`: options -> TrainRun -> the training loop.
#include <boost/program_options.hpp>
#include <iostream>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/cli/cli.h"
#include "tapegrad/cli/options.h"
#include "tapegrad/io/strict_numbers.h"
#include "tapegrad/runtime/trace.h"
#include "tapegrad/train/attention_flags.h"
#include "tapegrad/train/profile_schedule_flag.h"
#include "tapegrad/train/trainer.h"

namespace tg::cli {
namespace {

namespace po = boost::program_options;

// Options typed as text and parsed once they are read: --seed (a full 64-bit number) and
// --inputs (a column list).
struct TextOptions {
  std::string seed, inputs;
};

// A floating option whose default is shown as typed ("0.1"), not with binary noise.
po::typed_value<double>* shown(double& value) {
  return po::value(&value)->default_value(value, train::shortest_text(value));
}

// A flag's help with the default --task charlm has instead of the one shown.
std::string charlm_default(const std::string& help, double value) {
  return help + " (--task charlm: " + train::shortest_text(value) + " unless given)";
}

// What to train: the task and its data file.
po::options_description what_options(train::TrainConfig& c) {
  po::options_description what("what to train");
  what.add_options()
      ("task", po::value(&c.task), "textcls | timeseries | charlm")
      ("data", po::value(&c.data), "the data file (TSV for textcls, CSV for timeseries, text for charlm)");
  return what;
}

// The model's shape: size, heads, layers, dropout, attention and positions.
po::options_description model_options(train::TrainConfig& c) {
  po::options_description model("model");
  model.add_options()
      ("dim", po::value(&c.dim)->default_value(c.dim), "hidden size")
      ("heads", po::value(&c.heads)->default_value(c.heads), "attention heads (must divide --dim)")
      ("layers", po::value(&c.layers)->default_value(c.layers),
       "textcls: 0 = the tutorial's model (one attention, no MLP or norms), N >= 1 = N encoder layers; "
       "timeseries: 1 = the tutorial's model (one attention), N >= 2 = N encoder layers (0 is an error); "
       "charlm: N encoder layers")
      ("dropout", shown(c.dropout),
       charlm_default("dropout probability", train::CharLMDefaults::dropout).c_str())
      ("max-len", po::value(&c.max_len)->default_value(c.max_len),
       ("longest sequence (positional encoding); --task textcls: the longest line's tokens unless "
        "given, at most " + std::to_string(train::TextClsDefaults::max_len_cap)).c_str())
      ("attention", po::value(&c.attention)->default_value(c.attention),
       "full | local:W | band:W[,D] | bigbird:W,R,G | linformer:K | performer:M | reformer:B,R "
       "(docs/attention.md)")
      ("position", po::value(&c.position)->default_value(c.position),
       "sinusoidal (added to the input) | rope | alibi | t5[:B[,D]] | shaw[:K] (inside "
       "attention) | none");
  return model;
}

// How to train: batch, length, optimizer and schedule, seed, device, precision, validation, and
// --textbook (not the config's: where and how a run computes, not what it trains).
po::options_description training_options(train::TrainConfig& c, std::string& seed, bool& textbook) {
  po::options_description training("training");
  training.add_options()
      ("batch", po::value(&c.batch)->default_value(c.batch), "examples per step")
      ("epochs", po::value(&c.epochs), "passes over the training split, >= 1 (default 1)")
      ("steps", po::value(&c.steps), "optimizer steps in all, >= 1 (wins over --epochs)")
      ("lr", shown(c.lr), charlm_default("peak learning rate", train::CharLMDefaults::lr).c_str())
      ("optimizer", po::value(&c.optimizer)->default_value(c.optimizer), "sgd | adam | adamw")
      ("weight-decay", shown(c.weight_decay), "L2 (sgd, adam) or decoupled (adamw)")
      ("warmup", po::value(&c.warmup)->default_value(c.warmup), "linear warm-up steps, then the --schedule")
      ("schedule", po::value(&c.schedule)->default_value(c.schedule),
       "cosine (decay to 0 by the last step) | constant (--lr throughout: PyTorch's default)")
      ("clip", shown(c.clip), "clip the global gradient norm (0: off)")
      ("seed", po::value(&seed)->default_value(seed), "seed for weights, shuffling and dropout (0 to 2^64-1)")
      ("threads", po::value(&c.threads)->default_value(c.threads), kThreadsHelp)
      ("device", po::value(&c.device)->default_value(c.device), "cpu | cuda | cuda:N")
      ("tf32", po::bool_switch(&math_modes().allow_tf32), "cuda: let f32 GEMMs use TF32 tensor cores")
      ("checkpoint-activations", po::bool_switch(&c.checkpoint_activations),
       "recompute each layer (the tutorial models: their one attention) in backward (less memory kept)")
      ("amp", po::value(&c.amp)->default_value(c.amp),
       "mixed precision: none | fp16 (with dynamic loss scaling) | bf16 (f32 master weights)")
      ("val-frac", shown(c.val_frac), "the last fraction of the data is validation")
      ("eval-every", po::value(&c.eval_every)->default_value(c.eval_every), "validate every N steps (0: every epoch)")
      ("no-shuffle", "batches in file order, the same every epoch");
  add_textbook_option(training, textbook);
  return training;
}

// How each task reads its data file.
po::options_description data_options(train::TrainConfig& c, std::string& inputs) {
  po::options_description data("data");
  data.add_options()
      ("window", po::value(&c.window)->default_value(c.window), "timeseries: input rows per window")
      ("horizon", po::value(&c.horizon)->default_value(c.horizon), "timeseries: target rows to forecast")
      ("target", po::value(&c.target), "timeseries: the column to forecast (default: the last)")
      ("inputs", po::value(&inputs), "timeseries: the columns the model reads, COL,COL,... (default: "
       "every column, a YEAR or date column too; --inputs SUNACTIVITY reads only the series)")
      ("normalize", po::value(&c.normalize)->default_value(c.normalize), "timeseries: zscore | none")
      ("tokenizer", po::value(&c.tokenizer)->default_value(c.tokenizer),
       "textcls: char | word (lowercased, each punctuation mark a token) | whitespace (split on "
       "whitespace only, case and punctuation kept)")
      ("truncate", po::bool_switch(&c.truncate),
       "textcls: cut a line of more than --max-len tokens to its first --max-len (without it, "
       "such a line is an error); stored, so eval, sample and plot cut the same way")
      ("context", po::value(&c.context)->default_value(c.context), "charlm: characters per example");
  return data;
}

// What the run writes: checkpoints, logs, summaries, profiles and traces; and --help.
po::options_description output_options(train::TrainRun& run) {
  const std::string trace_help =
      "write a Chrome trace (JSON for ui.perfetto.dev or chrome://tracing): a slice per op forward and "
      "backward with input shapes and bytes allocated, the optimizer step and the whole step, and a "
      "memory counter; every step by default, up to " + std::to_string(kDefaultMaxTraceEvents) +
      " events (recording then stops after the last whole step, and the trace's metadata says so)";
  po::options_description output("output");
  output.add_options()
      ("save", po::value(&run.save),
       "final checkpoint (safetensors); with --resume, by default the --resume file (it may be "
       "the same file: it is read whole first and replaced atomically)")
      ("save-init", po::value(&run.save_init), "the initial weights, before any step")
      ("resume", po::value(&run.resume),
       "continue from a checkpoint saved by --save (and save back to it unless --save is given); "
       "a --log that holds its step's row is continued")
      ("stop-after", po::value(&run.stop_after),
       "stop after N >= 1 steps of this run (then --save)")
      ("save-every", po::value(&run.save_every),
       "also write the --save checkpoint every N steps (a killed run resumes from the last); "
       "Ctrl-C (SIGINT), SIGTERM or SIGHUP stops after the current step and writes --save")
      ("save-best", po::value(&run.save_best),
       "keep the checkpoint with the best validation loss so far (written at each evaluation "
       "that improves on it)")
      ("patience", po::value(&run.patience),
       "stop after K evaluations in a row without a better validation loss (then --save)")
      ("log", po::value(&run.log), "CSV with one row per step")
      ("json", "print a JSON summary as the last line")
      ("profile", "print a per-op time and memory table")
      ("profile-trace", po::value(&run.profile_trace), trace_help.c_str())
      ("profile-schedule", po::value<std::string>(),
       "wait,warmup,active[,repeat] as torch.profiler.schedule: skip `wait` steps, record `warmup` "
       "and drop them, keep `active`; `repeat` cycles (default 1, 0: until the end)")
      ("grad-stats", po::value(&run.grad_stats),
       "CSV of gradient health: step, name, mean_abs_grad, grad_norm, update_ratio, one row per "
       "parameter; warns once about parameters with no or an all-zero gradient")
      ("grad-stats-every", po::value(&run.grad_stats_every)->default_value(run.grad_stats_every),
       "--grad-stats rows on the first step and every N-th")
      ("help,h", "show this help");
  return output;
}

// --help: every option, then examples.
void print_help(const po::options_description& all) {
  std::cout << all << "\nexamples:\n"
               "  tapegrad train --task timeseries --data data/sunspots.csv --window 32 --horizon 4 --epochs 20\n"
               "  tapegrad train --task textcls --data data/fortunes.tsv --tokenizer word --epochs 5 --save cls.safetensors\n"
               "  tapegrad train --task charlm --data data/corpus.txt --context 64 --layers 2 --steps 500 --log lm.csv\n"
               "  tapegrad train --task textcls --data data/fortunes.tsv --tokenizer word --amp bf16\n"
               "  tapegrad train --task charlm --data data/corpus.txt --steps 500 --device cuda\n"
               "  tapegrad train --task charlm --data data/corpus.txt --attention local:32 --position rope\n"
               "  tapegrad train --task charlm --data data/corpus.txt --steps 20 --profile-trace trace.json --profile-schedule 2,1,5\n"
               "  tapegrad train --task charlm --data data/corpus.txt --steps 500 --grad-stats grads.csv\n"
               "  tapegrad train --task charlm --data data/corpus.txt --steps 20 --textbook --profile   (the "
               "tutorial's ops, slow)\n"
               "  tapegrad train --task charlm --data data/corpus.txt --steps 2000 --eval-every 100 "
               "--save lm.safetensors \\\n    --save-every 100 --save-best best.safetensors "
               "--patience 5   (after Ctrl-C: tapegrad train --resume lm.safetensors)\n"
               "  mpirun -np 2 tapegrad train --task charlm --data data/corpus.txt --batch 32 --threads 1 --save lm.safetensors\n"
               "    (data parallel: --batch is the global batch, divisible by the processes; docs/distributed.md)\n";
}

// The config's options that need more than storing: the required ones, the text ones parsed, and
// the attention and position in their canonical spelling.
void finish_config(const po::variables_map& vm, const TextOptions& text, train::TrainConfig& c) {
  TG_CHECK(vm.count("resume") || (vm.count("task") && vm.count("data")),
           "--task and --data are required (or --resume)");
  // A count typed as 0 would train nothing: an error, not "the default" (one epoch). Both ends
  // are checked here, so that the range an error states is the one accepted ([1, ...]; the
  // config's own check allows 0, which stands for "not given" there).
  for (const auto& [flag, count] : {std::pair{"steps", c.steps}, std::pair{"epochs", c.epochs}}) {
    TG_CHECK(!vm.count(flag) || (count >= 1 && count <= train::Limits::steps), "--", flag,
             " must be in [1, ", train::Limits::steps, "], got ", count);
  }
  c.seed = train::parse_uint64(text.seed, "--seed");
  c.shuffle = vm.count("no-shuffle") == 0;
  if (vm.count("inputs")) c.inputs = train::parse_inputs(text.inputs);
  // The canonical spelling, as the checkpoint stores it (and --resume compares it).
  c.attention = train::format_attention(train::parse_attention(c.attention));
  c.position = train::format_position(train::parse_position(c.position));
}

// --save-every (it writes the --save checkpoint, so it needs --save, or --resume, whose file a
// resumed run saves back to) and --patience: counts >= 1.
void check_checkpoint_options(const po::variables_map& vm, const train::TrainRun& run) {
  TG_CHECK(!vm.count("save-every") || run.save_every >= 1, "--save-every must be >= 1, got ",
           run.save_every);
  TG_CHECK(!vm.count("save-every") || vm.count("save") || vm.count("resume"), "--save-every needs ",
           "--save (the path of the resumable checkpoint it writes every ", run.save_every,
           " steps)");
  TG_CHECK(!vm.count("patience") || run.patience >= 1, "--patience must be >= 1, got ",
           run.patience);
}

// The run's other options: which were typed (--resume checks them), the switches, and the
// output options that need checking or parsing.
void finish_run(const po::variables_map& vm, train::TrainRun& run) {
  run.given = given_options(vm);
  run.json = vm.count("json") > 0;
  run.profile = vm.count("profile") > 0;
  TG_CHECK(!vm.count("stop-after") || run.stop_after >= 1, "--stop-after must be >= 1, got ",
           run.stop_after);
  if (vm.count("profile-schedule")) {
    TG_CHECK(vm.count("profile-trace"), "--profile-schedule needs --profile-trace");
    run.profile_schedule = train::parse_profile_schedule(vm["profile-schedule"].as<std::string>(),
                                                         "--profile-schedule");
  }
  check_checkpoint_options(vm, run);
  TG_CHECK(run.grad_stats_every >= 1, "--grad-stats-every must be at least 1, got ",
           run.grad_stats_every);
  TG_CHECK(vm["grad-stats-every"].defaulted() || vm.count("grad-stats"),
           "--grad-stats-every needs --grad-stats");
}

}  // namespace

// `tapegrad train`: the options declared, read into a TrainRun and checked, then the run.
int train(const Args& args) {
  train::TrainRun run;
  TextOptions text;
  text.seed = std::to_string(run.config.seed);  // --seed's default
  bool textbook = false;
  po::options_description all("tapegrad train: train a model on a data file");
  all.add(what_options(run.config)).add(model_options(run.config));
  all.add(training_options(run.config, text.seed, textbook)).add(data_options(run.config, text.inputs));
  all.add(output_options(run));
  const po::variables_map vm = parse_command_line(args, all);
  if (vm.count("help")) {
    print_help(all);
    return 0;
  }
  finish_config(vm, text, run.config);
  finish_run(vm, run);
  train::apply_task_defaults(run.config, run.given);  // --task charlm's own --lr, --dropout
  const std::unique_ptr<Textbook> textbook_scope = open_textbook(textbook, run.config.device);
  return train::train(run);
}

}  // namespace tg::cli
