// Every op has a gradient check: the cases of the gradcheck registries (ops/ and nn/) run here
// under a tape observer that collects the name of every op they record, and each op the library
// registers as differentiable (autograd/op_registry.h) must be among them. The list of ops comes
// from the library's registrations, not from this file, so a new op cannot be left out of it.
#include <catch2/catch.hpp>

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "tapegrad/autograd/op_registry.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/nn/gradcheck_cases.h"
#include "tapegrad/ops/gradcheck_cases.h"
#include "tapegrad/runtime/tape_observer.h"

using namespace tg;

namespace {

// Collects the names record() sees on this thread while installed.
class RecordedOpNames : public TapeObserver {
 public:
  RecordedOpNames() : previous_(set_tape_observer(this)) {}
  ~RecordedOpNames() override { set_tape_observer(previous_); }
  RecordedOpNames(const RecordedOpNames&) = delete;
  RecordedOpNames& operator=(const RecordedOpNames&) = delete;

  void op_recorded(const char* op, const std::vector<Tensor>&) override { names.insert(op); }
  void backward_started() override {}
  void backward_finished() override {}
  void node_started(const Node&) override {}
  void node_finished(const Node&) override {}
  void region_started(std::string_view, const char*) override {}
  void region_finished() override {}

  std::set<std::string> names;

 private:
  TapeObserver* previous_;
};

std::vector<GradcheckCase> every_gradcheck_case() {
  std::vector<GradcheckCase> cases = ops_gradcheck_cases();
  for (GradcheckCase& c : nn_gradcheck_cases()) cases.push_back(std::move(c));
  return cases;
}

std::string comma_separated(const std::vector<std::string>& names) {
  std::ostringstream text;
  for (size_t i = 0; i < names.size(); ++i) text << (i ? ", " : "") << names[i];
  return text.str();
}

}  // namespace

TEST_CASE("gradcheck coverage: every differentiable op is recorded by a gradcheck case",
          "[op_registry][gradcheck_coverage]") {
  std::set<std::string> recorded;
  {
    const RecordedOpNames observer;
    for (const GradcheckCase& check : every_gradcheck_case()) {
      INFO("case " << check.name);
      REQUIRE(check.run(kCPU).passed);  // a case that fails checks nothing it records
    }
    recorded = observer.names;
  }
  std::vector<std::string> without_case;
  for (const RegisteredOp& op : registered_ops()) {
    if (op.gradient == OpGradient::checked && recorded.count(op.name) == 0) {
      without_case.push_back(op.name);
    }
  }
  INFO("differentiable ops that no gradcheck case records: " << comma_separated(without_case)
       << " (add a case to ops/gradcheck_cases*.cpp or nn/gradcheck_cases*.cpp; see "
          "docs/adding-an-op.md)");
  CHECK(without_case.empty());

  // The other way round record() enforces: every name the cases recorded is registered, and
  // as checked on the CPU (not as recorded only between devices, nor as not differentiable).
  std::vector<std::string> recorded_unlike_registered;
  for (const std::string& name : recorded) {
    bool checked = false;
    for (const RegisteredOp& op : registered_ops()) {
      checked |= op.name == name && op.gradient == OpGradient::checked;
    }
    if (!checked) recorded_unlike_registered.push_back(name);
  }
  INFO("recorded on the CPU but not registered as checked: "
       << comma_separated(recorded_unlike_registered));
  CHECK(recorded_unlike_registered.empty());
  REQUIRE(recorded.count("matmul") == 1);  // the observer saw the cases at all
}

TEST_CASE("gradcheck coverage: an op recorded only between devices has a case named after it",
          "[op_registry][gradcheck_coverage]") {
  // Such a case records the op where the registry's cases run on a GPU (tests/cuda/ runs them
  // all there, on the emulated device too); on the CPU it records nothing to collect.
  std::vector<std::string> ops, without_case;
  for (const RegisteredOp& op : registered_ops()) {
    if (op.gradient != OpGradient::between_devices) continue;
    ops.push_back(op.name);
    bool named = false;
    for (const GradcheckCase& check : every_gradcheck_case()) {
      named |= check.name.rfind(op.name + "/", 0) == 0;
    }
    if (!named) without_case.push_back(op.name);
  }
  INFO("ops recorded between devices without a case named \"<op>/...\": "
       << comma_separated(without_case));
  CHECK(without_case.empty());
  REQUIRE(ops == std::vector<std::string>{"to_device"});
}
