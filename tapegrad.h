#pragma once
// tapegrad in one include: the engine (autograd/), every differentiable op (ops/), the modules,
// optimizers, generation and checkpoints (nn/) and the file helpers (io/). Installed as
// <tapegrad/tapegrad.h>; link tapegrad::tapegrad. Every installed header is here but these, left
// out on purpose:
//   tapegrad/ops/gradcheck_cases.h, tapegrad/nn/gradcheck_cases.h: the gradcheck registries, for
//     the tests and `tapegrad gradcheck`, to include on their own;
//   tapegrad/io/json_bytes.h: it includes <nlohmann/json.hpp>, which the library uses privately
//     and find_package(tapegrad) does not provide.
// The backends' own headers (cpu/, cuda/) are not installed.

// autograd/: tensors, the tape, devices, dtypes, random numbers, checkpointing, the textbook mode
#include "tapegrad/autograd/attention_layout.h"
#include "tapegrad/autograd/checkpoint.h"
#include "tapegrad/autograd/device.h"
#include "tapegrad/autograd/dtype.h"
#include "tapegrad/autograd/element_types.h"
#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/gradcheck.h"
#include "tapegrad/autograd/kernels.h"
#include "tapegrad/autograd/op_registry.h"
#include "tapegrad/autograd/philox.h"
#include "tapegrad/autograd/portable.h"
#include "tapegrad/autograd/rng.h"
#include "tapegrad/autograd/shape.h"
#include "tapegrad/autograd/storage.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/autograd/tape_graph.h"
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/autograd/textbook.h"

// runtime/: the engine's plumbing: mixed precision, the profiler and the engine's seam for tools,
// the thread count and the pool, the CPU allocator's cache, the switch of the CPU's fast paths
#include "tapegrad/runtime/allocator.h"
#include "tapegrad/runtime/autocast.h"
#include "tapegrad/runtime/features.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/tape_observer.h"
#include "tapegrad/runtime/thread_pool.h"
#include "tapegrad/runtime/threads.h"

// ops/: every differentiable op
#include "tapegrad/ops/ops.h"
#include "tapegrad/ops/quantize.h"  // int8 inference (not differentiable)

// io/: safetensors, safe file I/O, SHA-256, strict number parsing, quoting a user's text
#include "tapegrad/io/file_io.h"
#include "tapegrad/io/quoted_text.h"
#include "tapegrad/io/safetensors.h"
#include "tapegrad/io/sha256.h"
#include "tapegrad/io/strict_numbers.h"

// nn/: modules, attention and the weights it applies, masks, models, generation with a KV cache,
// optimizers, schedules, int8 quantization
#include "tapegrad/nn/attention.h"
#include "tapegrad/nn/attention_spec.h"
#include "tapegrad/nn/attention_weights.h"
#include "tapegrad/nn/generation.h"
#include "tapegrad/nn/grad_scaler.h"
#include "tapegrad/nn/kv_cache.h"
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
