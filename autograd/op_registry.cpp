// The op registry: a map from name to gradient kind, filled by the ops' OpRegistration objects
// during static initialisation and read by every record().
#include "tapegrad/autograd/op_registry.h"

#include <functional>
#include <map>
#include <mutex>

#include "tapegrad/autograd/error.h"

namespace tg {
namespace {

struct Registry {
  std::mutex mutex;  // a program may also register later, from main(), while threads record
  std::map<std::string, OpGradient, std::less<>> ops;
};

// Built on first use: the registrations run during static initialisation, in an order across
// files that C++ leaves open, and each must find the map already there.
Registry& registry() {
  static Registry instance;
  return instance;
}

}  // namespace

const char* op_gradient_name(OpGradient gradient) {
  switch (gradient) {
    case OpGradient::checked: return "checked";
    case OpGradient::between_devices: return "between_devices";
    case OpGradient::none: return "none";
  }
  return "?";
}

OpRegistration::OpRegistration(std::initializer_list<const char*> names, OpGradient gradient) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const char* name : names) {
    const auto [it, inserted] = r.ops.emplace(name, gradient);
    TG_CHECK(inserted || it->second == gradient, "op registry: op '", name,
             "' registered twice, with gradient '", op_gradient_name(it->second), "' and '",
             op_gradient_name(gradient), "'");
  }
}

std::vector<RegisteredOp> registered_ops() {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<RegisteredOp> ops;
  for (const auto& [name, gradient] : r.ops) ops.push_back({name, gradient});
  return ops;
}

void check_recordable(std::string_view op) {
  Registry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  const auto it = r.ops.find(op);
  TG_CHECK(it != r.ops.end(), "op '", op, "' records onto the tape but its name is not registered "
           "(tg::OpRegistration, autograd/op_registry.h)");
  TG_CHECK(it->second != OpGradient::none, "op '", op,
           "' is registered as not differentiable, yet records a backward onto the tape");
}

}  // namespace tg
