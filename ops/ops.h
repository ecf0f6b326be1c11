#pragma once
// Every differentiable op, one family a header.
#include "autograd/tensor.h"
#include "ops/elementwise.h"
#include "ops/matmul.h"
#include "ops/reduce.h"
#include "ops/views.h"
