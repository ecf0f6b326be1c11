// Fuzzes load_timeseries (train/datasets.cpp): the input is a CSV file (a header row, numeric
// rows). Every malformed file must be one tg::Error; a bug is anything else: a crash, an
// AddressSanitizer or UBSan report, another exception, a leak or a hang. A file that loads is
// loaded a second time with the normalisation it produced, as eval does with a checkpoint's.
#include <cstddef>
#include <cstdint>

#include "tapegrad/autograd/error.h"
#include "tests/fuzz/fuzz_support.h"
#include "tapegrad/train/datasets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = tg::fuzz::scratch().write(data, size);
  tg::train::TimeSeriesSpec spec;
  spec.window = 2;
  spec.horizon = 1;
  spec.val_frac = 0.2;
  try {
    const tg::train::TimeSeriesData loaded = tg::train::load_timeseries(path, spec);
    (void)tg::train::load_timeseries(path, spec, &loaded.norm);
  } catch (const tg::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
