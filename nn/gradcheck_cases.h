#pragma once
// The registry's nn cases: layers, attention in every mask case, the encoder layer, each model.
#include <vector>

#include "tapegrad/autograd/gradcheck.h"

namespace tg {

std::vector<GradcheckCase> nn_gradcheck_cases();

}  // namespace tg
