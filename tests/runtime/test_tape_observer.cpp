// The engine's seam (runtime/tape_observer.h): what an installed observer hears of record(),
// backward() and ProfileRegions, in order, and that every span it saw open is closed, also when
// backward throws. The expected event lists are written out by hand from the graphs built here.
#include <catch2/catch.hpp>

#include <string>
#include <string_view>
#include <vector>

#include "tapegrad/autograd/error.h"
#include "tapegrad/autograd/tape.h"
#include "tapegrad/ops/elementwise.h"
#include "tapegrad/ops/reduce.h"
#include "tapegrad/runtime/profiler.h"
#include "tapegrad/runtime/tape_observer.h"

namespace {

// Writes every event down as one string; installs itself for its lifetime.
class ObserverEventLog final : public tg::TapeObserver {
 public:
  ObserverEventLog() : previous_(tg::set_tape_observer(this)) {}
  ~ObserverEventLog() override { tg::set_tape_observer(previous_); }

  void op_recorded(const char* op, const std::vector<tg::Tensor>& inputs) override {
    events.push_back(std::string("op ") + op + "/" + std::to_string(inputs.size()));
  }
  void backward_started() override { events.push_back("backward {"); }
  void backward_finished() override { events.push_back("} backward"); }
  void node_started(const tg::Node& node) override { events.push_back(node.op + " {"); }
  void node_finished(const tg::Node& node) override { events.push_back("} " + node.op); }
  void region_started(std::string_view name, const char* suffix) override {
    events.push_back(std::string(name) + suffix + " {");
  }
  void region_finished() override { events.push_back("} region"); }

  std::vector<std::string> events;

 private:
  tg::TapeObserver* previous_;
};

tg::Tensor observed_leaf(std::vector<double> values) {
  tg::Tensor t = tg::from_values(values, {static_cast<int64_t>(values.size())});
  t.requires_grad_();
  return t;
}

}  // namespace

TEST_CASE("tape observer: each taped op, the sweep and each node's backward, in order",
          "[tape_observer]") {
  const tg::Tensor x = observed_leaf({1, 2}), w = observed_leaf({3, 4});
  ObserverEventLog log;
  const tg::Tensor loss = tg::sum(tg::mul(x, w));  // two nodes: mul, then sum
  tg::backward(loss);
  // The sweep runs the nodes latest first; their backward functions compute under NoGrad, so
  // nothing is recorded (or heard) inside them.
  REQUIRE(log.events == std::vector<std::string>{"op mul/2", "op sum/1", "backward {", "sum {",
                                                 "} sum", "mul {", "} mul", "} backward"});
  // The gradients are the engine's, unchanged by the observer: d sum(x w)/dx = w, /dw = x.
  REQUIRE(x.grad().to_host_f64() == std::vector<double>{3, 4});
  REQUIRE(w.grad().to_host_f64() == std::vector<double>{1, 2});
}

TEST_CASE("tape observer: untaped ops are not heard, regions are, with their names",
          "[tape_observer]") {
  const tg::Tensor x = observed_leaf({1, 2});
  ObserverEventLog log;
  {
    const tg::NoGrad no_grad;
    (void)tg::mul(x, x);  // not recorded: not heard
  }
  (void)tg::mul(tg::from_values({1, 2}, {2}), 2.0);  // no input requires grad: not recorded
  {
    const tg::ProfileRegion region("AdamW", ".step");
    (void)tg::neg(x);
  }
  REQUIRE(log.events == std::vector<std::string>{"AdamW.step {", "op neg/1", "} region"});
}

TEST_CASE("tape observer: a backward that throws still closes the sweep's span",
          "[tape_observer]") {
  const tg::Tensor x = observed_leaf({1, 2}), w = observed_leaf({3, 4});
  const tg::Tensor loss = tg::sum(tg::mul(x, w));
  {
    const tg::NoGrad no_grad;
    w.fill_(0);  // an in-place write to what mul saved: its backward refuses to run
  }
  ObserverEventLog log;
  REQUIRE_THROWS_AS(tg::backward(loss), tg::Error);
  // sum's node ran; mul's was refused before its span opened; the sweep's span is closed.
  REQUIRE(log.events ==
          std::vector<std::string>{"backward {", "sum {", "} sum", "} backward"});
}

TEST_CASE("tape observer: set_tape_observer hands back the one it replaces", "[tape_observer]") {
  REQUIRE(tg::tape_observer() == nullptr);
  {
    ObserverEventLog outer;
    REQUIRE(tg::tape_observer() == &outer);
    {
      ObserverEventLog inner;  // replaces outer until it ends; events go to inner alone
      REQUIRE(tg::tape_observer() == &inner);
      (void)tg::neg(observed_leaf({1}));
      REQUIRE(inner.events == std::vector<std::string>{"op neg/1"});
    }
    REQUIRE(tg::tape_observer() == &outer);
    REQUIRE(outer.events.empty());
  }
  REQUIRE(tg::tape_observer() == nullptr);
}
