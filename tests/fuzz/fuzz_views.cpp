// Fuzzes the bounds arithmetic of the views (ops/views.cpp): narrow, expand, permute, transpose,
// view, reshape, squeeze, unsqueeze, and cat/stack beside them, with int64 arguments decoded from
// the input, extremes included (INT64_MIN, INT64_MAX - 1, 2^62, ...). The input is a program:
//   byte 0       the base tensor's dtype (f32, f64, i64, bool) and whether it requires grad
//   byte 1       its rank (0..3); then one byte a dim, its size (0..4)
//   then ops     one byte naming the op, then its arguments, each an integer (see read_integer)
// Each op applies to the result of the last one that succeeded. Every call must either throw one
// tg::Error or return a view whose every element lies inside its storage (checked from the
// offset, strides and shape against the storage's bytes, in 128-bit arithmetic); a view of a few
// elements is also read (AddressSanitizer checks every access) and written with fill_ and copy_.
// At the end a small floating result is back-propagated to the base. A bug is anything else: a
// crash, a sanitizer report, another exception (bad_alloc included), a leak or a hang.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/ops.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

// Elements a view may have for the harness to read, copy or back-propagate it (an expanded view
// of 2^62 elements is legal, and is checked only through its arithmetic).
constexpr int64_t kViewsReadLimit = 4096;
constexpr int64_t kViewsMaxOps = 24;

// The input, read front to back; past its end every read gives 0.
class ViewsProgram {
 public:
  ViewsProgram(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return at_ >= size_; }
  uint8_t byte() { return at_ < size_ ? data_[at_++] : 0; }

  // An integer argument: a tag byte, then by tag % 4 a small signed byte, a small non-negative
  // one, an entry of a table of extremes, or 8 raw bytes.
  int64_t read_integer() {
    static constexpr int64_t max = std::numeric_limits<int64_t>::max();
    static constexpr int64_t min = std::numeric_limits<int64_t>::min();
    static constexpr int64_t extremes[] = {max,       max - 1,          min,       min + 1,
                                           -1,        int64_t{1} << 62, -(int64_t{1} << 62),
                                           1 << 30,   int64_t{1} << 32, max / 2 + 1,
                                           max / 3,   max / 4};
    const uint8_t tag = byte();
    switch (tag % 4) {
      case 0: return static_cast<int8_t>(byte());
      case 1: return byte() % 8;
      case 2: return extremes[byte() % (sizeof(extremes) / sizeof(extremes[0]))];
      default: {
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = bits << 8 | byte();
        int64_t value = 0;
        std::memcpy(&value, &bits, sizeof value);
        return value;
      }
    }
  }

  // A shape or an order: a count (0..5), then that many integers.
  tg::Shape read_list() {
    tg::Shape values(byte() % 6);
    for (int64_t& value : values) value = read_integer();
    return values;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

// The promise under test: all of a view's elements lie inside its storage; a view with none
// keeps its offset within [0, elements of the storage].
void require_view_in_storage(const tg::Tensor& view, const char* op) {
  const auto capacity =
      static_cast<__int128>(view.storage()->nbytes() / tg::dtype_size(view.dtype()));
  const tg::Shape& shape = view.shape();
  const tg::Shape& strides = view.strides();
  if (shape.size() != strides.size() || shape.size() > tg::kMaxRank) {
    tg::fuzz::die(std::string(op) + ": a view with " + std::to_string(shape.size()) +
                  " sizes and " + std::to_string(strides.size()) + " strides");
  }
  // Saturated at +-2^100, so that 16 dims of 2^63 cannot overflow the 128 bits either.
  const __int128 cap = static_cast<__int128>(1) << 100;
  const auto saturate = [cap](__int128 value) {
    return value > cap ? cap : value < -cap ? -cap : value;
  };
  __int128 first = view.offset(), last = view.offset(), count = 1;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] < 0) tg::fuzz::die(std::string(op) + ": a negative size " + tg::shape_str(shape));
    count = saturate(count * shape[d]);
    const __int128 reach = static_cast<__int128>(shape[d] == 0 ? 0 : shape[d] - 1) * strides[d];
    if (reach < 0) first = saturate(first + reach);
    else last = saturate(last + reach);
  }
  const bool inside = count == 0 ? first >= 0 && first <= capacity
                                 : first >= 0 && last < capacity;
  if (!inside) {
    tg::fuzz::die(std::string(op) + ": view " + tg::shape_str(shape) + " strides " +
                  tg::shape_str(strides) + " offset " + std::to_string(view.offset()) +
                  " reaches outside a storage of " +
                  std::to_string(static_cast<int64_t>(capacity)) + " elements");
  }
  if (count != view.numel()) tg::fuzz::die(std::string(op) + ": numel() disagrees with the shape");
}

// Reads and writes a small view through the kernels, where AddressSanitizer sees every access.
void touch_view(const tg::Tensor& view) {
  if (view.numel() > kViewsReadLimit) return;
  (void)view.to_host_f64();
  (void)view.contiguous().to_host_f64();
  tg::NoGrad no_grad;
  const tg::Tensor target = view.detach();
  target.fill_(1);
  const bool overlapping = [&] {  // copy_ refuses an expanded destination
    for (int64_t d = 0; d < target.dim(); ++d) {
      if (target.shape()[d] > 1 && target.strides()[d] == 0) return true;
    }
    return false;
  }();
  if (!overlapping) target.copy_(tg::ones(target.shape(), tg::DType::f64));
}

// Ops 0-5 of apply_view_op: those that take a list or two integers.
tg::Tensor apply_list_op(const tg::Tensor& current, int code, ViewsProgram& program,
                         const char*& name) {
  switch (code) {
    case 0: {
      name = "narrow";
      const int64_t dim = program.read_integer(), start = program.read_integer();
      return current.narrow(dim, start, program.read_integer());
    }
    case 1: name = "expand"; return current.expand(program.read_list());
    case 2: name = "expand_untaped"; return tg::expand_untaped(current, program.read_list());
    case 3: name = "permute"; return current.permute(program.read_list());
    case 4: {
      name = "transpose";
      const int64_t dim0 = program.read_integer();
      return current.transpose(dim0, program.read_integer());
    }
    default: name = "view"; return current.view(program.read_list());
  }
}

// Ops 6-11 of apply_view_op: reshape, and those that take one dim.
tg::Tensor apply_dim_op(const tg::Tensor& current, int code, ViewsProgram& program,
                        const char*& name) {
  // reshape copies a non-contiguous tensor, cat and stack copy theirs: only small ones.
  const bool small = current.numel() <= kViewsReadLimit;
  switch (code) {
    case 6: {
      name = "reshape";
      const tg::Shape shape = program.read_list();
      return small || current.is_contiguous() ? current.reshape(shape) : current;
    }
    case 7: name = "squeeze"; return current.squeeze(program.read_integer());
    case 8: name = "unsqueeze"; return current.unsqueeze(program.read_integer());
    case 9:
      name = "cat";
      return small ? tg::cat({current, current}, program.read_integer()) : current;
    case 10:
      name = "stack";
      return small ? tg::stack({current, current}, program.read_integer()) : current;
    default: name = "size"; (void)current.size(program.read_integer()); return current;
  }
}

// Applies op number `code` (mod 12) to `current` with arguments from the program; `name` names it.
tg::Tensor apply_view_op(const tg::Tensor& current, uint8_t code, ViewsProgram& program,
                         const char*& name) {
  const int op = code % 12;
  return op < 6 ? apply_list_op(current, op, program, name)
                : apply_dim_op(current, op, program, name);
}

// The base tensor the program starts from: 0, 1, 2, ... of the decoded dtype and shape.
tg::Tensor read_base(ViewsProgram& program) {
  static constexpr tg::DType dtypes[] = {tg::DType::f32, tg::DType::f64, tg::DType::i64,
                                         tg::DType::b8};
  const uint8_t kind = program.byte();
  const tg::DType dtype = dtypes[kind % 4];
  tg::Shape shape(program.byte() % 4);
  for (int64_t& size : shape) size = program.byte() % 5;
  tg::Tensor base = tg::arange(tg::numel(shape), tg::DType::f64).view(shape).to(dtype);
  if (tg::is_floating(dtype) && (kind & 4)) base = base.detach().requires_grad_();
  return base;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ViewsProgram program(data, size);
  const tg::Tensor base = read_base(program);
  tg::Tensor current = base;
  int64_t largest = base.numel();  // backward allocates gradients the size of every step's result
  for (int64_t step = 0; step < kViewsMaxOps && !program.done(); ++step) {
    const char* name = "?";
    try {
      const tg::Tensor result = apply_view_op(current, program.byte(), program, name);
      require_view_in_storage(result, name);
      touch_view(result);
      current = result;
      largest = std::max(largest, result.numel());
    } catch (const tg::Error&) {
      // Refused with a message: the expected outcome for arguments out of range.
    }
  }
  // Back through every op that succeeded, when each result was small and carries a gradient (a
  // tg::Error here is a bug too: the views that were made must back-propagate).
  if (current.requires_grad() && largest <= kViewsReadLimit) {
    tg::sum(current).backward();
    require_view_in_storage(base.grad(), "backward");
    if (base.grad().shape() != base.shape()) tg::fuzz::die("backward: a grad of another shape");
  }
  return 0;
}
