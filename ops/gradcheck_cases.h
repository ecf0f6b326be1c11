#pragma once
// The registry's op cases: every op in ops/ has at least one.
#include <vector>

#include "tapegrad/autograd/gradcheck.h"

namespace tg {

std::vector<GradcheckCase> ops_gradcheck_cases();          // all of the below
std::vector<GradcheckCase> tensor_ops_gradcheck_cases();   // elementwise, reduce, views,
                                                           // indexing, matmul
std::vector<GradcheckCase> layer_ops_gradcheck_cases();    // softmax, masks, dropout, embedding,
                                                           // layer_norm, losses

}  // namespace tg
