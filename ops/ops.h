#pragma once
// Every differentiable op, one family a header.
#include "tapegrad/autograd/tensor.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/matmul.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/ops/views.h"
#include "tapegrad/ops/softmax.h"
#include "tapegrad/ops/mask.h"
#include "tapegrad/ops/dropout.h"
#include "tapegrad/ops/embedding.h"
#include "tapegrad/ops/layer_norm.h"
#include "tapegrad/ops/loss.h"
#include "tapegrad/ops/attention.h"
