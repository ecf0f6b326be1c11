// Fuzzes load_textcls and make_text_batch (train/datasets.cpp): the input is a TSV file of
// "label<TAB>text" lines, read with each tokenizer. Every malformed file must be one tg::Error;
// a bug is anything else: a crash, an AddressSanitizer or UBSan report, another exception, a leak
// or a hang. A file that loads is batched whole (each split), then encoded again with the
// vocabulary and labels it produced, as eval does with a checkpoint's.
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "tapegrad/train/datasets.h"

namespace {

// One batch of every example of a split (make_text_batch refuses an empty batch).
void batch_all(const std::vector<tg::train::TextExample>& examples) {
  if (examples.empty()) return;
  std::vector<int64_t> ids(examples.size());
  std::iota(ids.begin(), ids.end(), 0);
  (void)tg::train::make_text_batch(examples, ids);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tg::train;
  const std::string& path = tg::fuzz::scratch().write(data, size);
  for (const Tokenizer tokenizer : {Tokenizer::chars, Tokenizer::words, Tokenizer::whitespace}) {
    try {
      const TextClsData loaded = load_textcls(path, tokenizer, /*max_len=*/16, /*val_frac=*/0.2);
      batch_all(loaded.train);
      batch_all(loaded.val);
      (void)load_textcls(path, tokenizer, 16, 0.2, &loaded.vocab, &loaded.labels);
    } catch (const tg::Error&) {
      // Rejected with a message: the expected outcome for malformed input.
    }
  }
  return 0;
}
