#pragma once
// Tensor names that changed between releases, mapped to today's names when a checkpoint loads,
// so that every checkpoint tapegrad ever wrote still evaluates, samples, plots and resumes.
//
//   textcls  classifier.weight, classifier.bias  ->  fc.weight, fc.bias
//            (the head took the classic tutorial's name, so that checkpoints load into its
//            TextClassifier with load_state_dict as they are)
#include <string>

#include "tapegrad/nn/module.h"

namespace tg::train {

// Renames the old names of a `task` checkpoint's model tensors in place; returns how many it
// renamed. A name is left alone when its new name is already there (the checkpoint's own
// validation then reports the duplicate as an unexpected tensor).
int rename_legacy_tensors(const std::string& task, nn::NamedTensors& model);

}  // namespace tg::train
