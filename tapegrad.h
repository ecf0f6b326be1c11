#pragma once
// tapegrad in one include: the engine (autograd/), every differentiable op (ops/) and the modules,
// optimizers and checkpoints (nn/). Installed as <tapegrad/tapegrad.h>; link tapegrad::tapegrad.
// Left out: the gradcheck registries (tapegrad/ops/gradcheck_cases.h and
// tapegrad/nn/gradcheck_cases.h), to include on their own, and the backends' own headers
// (cpu/kernels.h, cuda/), which are not installed.

// autograd/: tensors, the tape, devices, dtypes, random numbers, mixed precision, checkpointing
#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/autocast.h"
#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/gradcheck.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/profiler.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/autograd/threads.h"

// ops/: every differentiable op
#include "tapegrad/ops/ops.h"
#include "tapegrad/ops/quantize.h"  // int8 inference (not differentiable)

// nn/: modules, attention, masks, models, optimizers, schedules, safetensors, safe file I/O,
// int8 quantization
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/attention_spec.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/layers.h"
#include "tapegrad/nn/linformer.h"
#include "tapegrad/nn/masks.h"
#include "tapegrad/nn/models.h"
#include "tapegrad/nn/module.h"
#include "tapegrad/nn/observers.h"
#include "tapegrad/nn/optim.h"
#include "tapegrad/nn/performer.h"
#include "tapegrad/nn/positional_encoding.h"
#include "tapegrad/nn/quantization.h"
#include "tapegrad/nn/reformer.h"
#include "tapegrad/nn/relative_position.h"
#include "tapegrad/nn/rope.h"
#include "tapegrad/nn/schedule.h"
#include "tapegrad/nn/transformer.h"
