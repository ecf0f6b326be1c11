#pragma once
// The op registry: every name an op may record on the tape (record()'s `op`, which format_tape(),
// the profiler and the tape plots show), registered by the file that defines the op, with what
// its gradient is. record() refuses a name nobody registered and a name registered as not
// differentiable; the tests run every gradcheck case and fail on a differentiable op that no case
// records (tests/ops/test_gradcheck_coverage.cpp). So a new op cannot reach the tape without a
// name in here, nor stay here without a gradient check.
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace tg {

enum class OpGradient {
  checked,          // differentiable: a gradcheck case records it on the CPU
  between_devices,  // differentiable, but recorded only when a tensor changes device (to_device):
                    // its case records it where the cases run on a GPU (tests/cuda/)
  none,             // not differentiable (argsort, comparisons): record() refuses the name
};

const char* op_gradient_name(OpGradient gradient);  // "checked", "between_devices", "none"

// Registers the names of one file's ops, as an object at namespace scope in that file:
//   const OpRegistration elementwise_ops({"add", "sub", "mul"});
// Beside the ops, not in a central list: an op's file is in every program that can record the
// op, so its names are too (a static library drops only files nothing calls). Registering a name
// again with the same gradient changes nothing; with another it is a tg::Error, thrown during
// static initialisation, so the program stops before main() with the message.
class OpRegistration {
 public:
  explicit OpRegistration(std::initializer_list<const char*> names,
                          OpGradient gradient = OpGradient::checked);
};

struct RegisteredOp {
  std::string name;
  OpGradient gradient;
};
std::vector<RegisteredOp> registered_ops();  // every registered op, sorted by name

// What record() asks before it builds a node: a tg::Error unless `op` is registered and
// differentiable.
void check_recordable(std::string_view op);

}  // namespace tg
