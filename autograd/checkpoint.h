#pragma once
// Gradient checkpointing (PyTorch's reentrant torch.utils.checkpoint): trade compute for memory.
//
// checkpoint(fn, inputs) runs fn without recording anything, so none of fn's activations are
// kept; it records ONE tape node "checkpoint" on the inputs, which saves only the inputs and the
// RNG state from before the call. Its backward re-runs fn on a fresh, nested tape (TapeScope),
// with the RNG state replayed so dropout draws the same masks, and back-propagates through that.
//
// Rules, as in PyTorch's reentrant variant:
//  - At least one input must require grad for checkpointing to happen. When grad mode is off or
//    no input requires grad, checkpoint just returns fn(inputs): recorded as usual if fn uses
//    parameters that require grad (correct gradients, but no memory saved).
//  - Parameters fn captures (module weights, leaves) get their gradients accumulated into .grad
//    directly by the nested backward.
//  - A captured tensor that requires grad but is NOT a leaf (it has a grad_fn on the outer tape)
//    must be passed in `inputs` instead: the nested backward cannot reach the outer tape.
//  - fn must be deterministic apart from the global RNG (which is replayed), and must give the
//    same result on the re-run.
//  - Inputs that are not floating (masks, indices) are passed to the re-run as they are.
//  - In-place writes between the forward and the backward are refused as the plain graph refuses
//    them (tape.h): to an input, or to any tensor fn's ops read that outlives fn (a captured
//    weight stepped by an optimizer, a buffer filled), the backward throws tg::Error "... has
//    been modified by an in-place operation: 'checkpoint' read a tensor of shape [..] at version
//    N, now version M" instead of re-running fn on the new values. Writes fn makes itself during
//    the forward count as before it (autograd/read_log.h).
#include <functional>
#include <vector>

#include "tapegrad/autograd/tensor.h"

namespace tg {

using CheckpointFn = std::function<Tensor(const std::vector<Tensor>&)>;

Tensor checkpoint(const CheckpointFn& fn, const std::vector<Tensor>& inputs);

}  // namespace tg
