#include "tapegrad/autograd/dtype.h"

#include "tapegrad/autograd/error.h"

namespace tg {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i64: return 8;
    case DType::b8: return 1;
    case DType::i8: return 1;
    case DType::i32: return 4;
  }
  fail("unknown dtype");
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i64: return "i64";
    case DType::b8: return "bool";
    case DType::i8: return "i8";
    case DType::i32: return "i32";
  }
  return "?";
}

bool is_floating(DType dtype) {
  return dtype == DType::f32 || dtype == DType::f64 || dtype == DType::f16 || dtype == DType::bf16;
}

bool is_half(DType dtype) { return dtype == DType::f16 || dtype == DType::bf16; }

// The f16 / bf16 conversions are inline in dtype.h.

}  // namespace tg
