#pragma once
// Every differentiable op, one family a header.
#include "autograd/tensor.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/views.h"
#include "ops/softmax.h"
#include "ops/mask.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/layer_norm.h"
#include "ops/loss.h"
#include "ops/attention.h"
