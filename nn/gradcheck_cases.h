#pragma once
// The registry's nn cases: layers, attention in every mask case, the encoder layer, each model,
// and the attention variants on split heads (Linformer, Performer, RoPE).
#include <vector>

#include "tapegrad/autograd/gradcheck.h"

namespace tg {

std::vector<GradcheckCase> nn_gradcheck_cases();                 // all of them, the below included
std::vector<GradcheckCase> attention_variant_gradcheck_cases();  // gradcheck_cases_variants.cpp

}  // namespace tg
