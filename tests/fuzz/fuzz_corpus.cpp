// Fuzzes load_charlm, charlm_examples and make_charlm_batch (train/datasets.cpp): the input is the
// plain text (any bytes: invalid UTF-8 becomes one-byte tokens) of a character language model.
// Every unusable file must be one tg::Error; a bug is anything else: a crash, an AddressSanitizer
// or UBSan report, another exception, a leak or a hang. A file that loads is cut into examples of
// a small context, batched whole (each split), and encoded again with the vocabulary it produced,
// as eval does with a checkpoint's.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "tapegrad/train/datasets.h"

namespace {

constexpr int64_t kContext = 4;

// One batch of every example that fits in `tokens` (make_charlm_batch refuses an empty batch).
void batch_all(const std::vector<tg::train::CharId>& tokens) {
  std::vector<int64_t> ids(tg::train::charlm_examples(tokens, kContext));
  if (ids.empty()) return;
  std::iota(ids.begin(), ids.end(), 0);
  (void)tg::train::make_charlm_batch(tokens, kContext, ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tg::train;
  const std::string& path = tg::fuzz::scratch().write(data, size);
  try {
    const CharLMData loaded = load_charlm(path, /*val_frac=*/0.2);
    batch_all(loaded.train);
    batch_all(loaded.val);
    (void)load_charlm(path, 0.2, &loaded.vocab);
  } catch (const tg::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
