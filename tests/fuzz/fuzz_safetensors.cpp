// Fuzzes load_safetensors (io/safetensors.cpp): the input is the whole file. The loader promises
// to check everything before trusting it, so for any bytes it must either return tensors or throw
// tg::Error. A bug is anything else: a crash, an AddressSanitizer or UBSan report, another
// exception, a leak, a hang, or a tensor that does not hold the bytes its shape promises.
#include <cstddef>
#include <cstdint>

#include "tapegrad/autograd/error.h"
#include "tapegrad/io/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const tg::SafetensorsFile file = tg::load_safetensors(tg::fuzz::scratch().write(data, size));
    // Touch every element: a shape that disagrees with the buffer shows up here under ASan.
    for (const auto& [name, tensor] : file.tensors) {
      (void)tensor.to_host_f64();
    }
  } catch (const tg::Error&) {
    // Rejected with a message: the expected outcome for malformed input.
  }
  return 0;
}
