// checkpoint: run fn unrecorded, keep only its inputs and RNG state, recompute in backward.
#include "tapegrad/autograd/checkpoint.h"

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/read_log.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/runtime/autocast.h"

namespace tg {
namespace {

// Puts the global RNG state back when the scope ends, also when the re-run throws.
class RngStateGuard {
 public:
  explicit RngStateGuard(RngState replay) : previous_(rng_state()) { set_rng_state(replay); }
  ~RngStateGuard() { set_rng_state(previous_); }
  RngStateGuard(const RngStateGuard&) = delete;
  RngStateGuard& operator=(const RngStateGuard&) = delete;
 private:
  RngState previous_;
};

}  // namespace

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs) {
  TG_CHECK(static_cast<bool>(fn), "checkpoint: fn is empty");
  if (!any_requires_grad(inputs)) return fn(inputs);  // grad mode off, or nothing to checkpoint

  const RngState rng_before = rng_state();
  const std::optional<DType> autocast_before = autocast_dtype();  // replayed too (as PyTorch)
  // The in-place check. The plain graph refuses a backward once a tensor it saved was written in
  // place (tape.h); here nothing inside fn was saved, and the re-run would silently read the new
  // values. The inputs are saved by record() below, so their versions are checked as any node's.
  // The tensors fn captures (a module's weights) are not inputs, but fn's ops read them: a ReadLog
  // notes every storage they read, and those still alive after fn (captured tensors, inputs; not
  // fn's temporaries) keep their versions from the end of fn, checked before the re-run.
  Tensor output;
  std::vector<StorageRead> reads;
  {
    NoGrad no_grad;
    ReadLog log;
    output = fn(inputs);
    reads = log.close();
  }
  TG_CHECK(output.defined(), "checkpoint: fn returned an undefined tensor");
  TG_CHECK(is_floating(output.dtype()), "checkpoint: fn must return a floating tensor, got ",
           dtype_name(output.dtype()));
  // fn may return one of its inputs (or a view sharing its TensorImpl): give the output its own.
  output = output.detach();
  // The output is no input of the re-run: writing it later changes no gradient.
  std::erase_if(reads, [&](const StorageRead& r) { return r.storage.lock() == output.storage(); });

  std::vector<bool> input_requires_grad;
  for (const Tensor& input : inputs) input_requires_grad.push_back(input.defined() && input.requires_grad());

  // d checkpoint(fn, x)/dx = d fn(x)/dx: re-run fn on detached x on a nested tape, back-propagate.
  BackwardFn backward_fn = [fn, rng_before, autocast_before, input_requires_grad,
                             reads = std::move(reads)](const Tensor& grad_output,
                                                       const Node& node) {
    check_reads_unchanged(reads, "checkpoint");
    TapeScope nested_tape;
    RngStateGuard replay(rng_before);
    AutocastStateScope replay_autocast(autocast_before);  // the same dtypes as the forward
    EnableGrad enable_grad;
    std::vector<Tensor> rerun_inputs;
    rerun_inputs.reserve(node.saved.size());
    for (size_t i = 0; i < node.saved.size(); ++i) {
      Tensor input = node.saved[i];  // detached by record()
      if (input.defined() && input_requires_grad[i]) input = input.detach().requires_grad_();
      rerun_inputs.push_back(std::move(input));
    }
    Tensor recomputed = fn(rerun_inputs);
    TG_CHECK(recomputed.defined() && recomputed.shape() == node.output_shape &&
                 recomputed.dtype() == node.output_dtype,
             "checkpoint: the re-run of fn in backward gave ",
             recomputed.defined() ? shape_str(recomputed.shape()) : std::string("an undefined tensor"),
             " instead of ", shape_str(node.output_shape), " (fn must be deterministic)");
    if (recomputed.requires_grad()) backward(recomputed, grad_output);
    Grads grads;
    for (size_t i = 0; i < rerun_inputs.size(); ++i) {
      grads.push_back(input_requires_grad[i] ? rerun_inputs[i].grad() : Tensor());
    }
    return grads;
  };
  // The inputs are the only tensors saved: record() keeps them detached until backward.
  record("checkpoint", inputs, output, inputs, std::move(backward_fn));
  return output;
}

// The names this file's ops record on the tape (autograd/op_registry.h).
const OpRegistration checkpoint_ops({"checkpoint"});

}  // namespace tg
