// The execution layer: every node runs through its backend's executable and run_node.
#include <gtest/gtest.h>

#include "exec/backend.hpp"
#include "exec/run_node.hpp"
#include "graph/op.hpp"
#include "tensor/parallel.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// An op with no kernel on any backend.
class Unrunnable final : public Op {
 public:
  std::string name() const override { return "unrunnable"; }
  void params(OpParams&) const override {}
  std::vector<Type> infer_types(const std::vector<Type>& in) const override { return {in[0]}; }
  std::vector<Shape> infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const override { return {in[0]}; }
};

// An op whose kernel rejects a negative first element from inside an OpenMP region.
class RejectsNegatives final : public Op {
 public:
  std::string name() const override { return "rejects_negatives"; }
  void params(OpParams&) const override {}
  std::vector<Type> infer_types(const std::vector<Type>& in) const override { return {in[0]}; }
  std::vector<Shape> infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const override { return {in[0]}; }
};
struct RejectsNegativesKernel final : Executable {
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const double first = in[0].item_as_double(0);
    parallel_region(2, [&](int thread, int) {
      if (thread == 0 && first < 0) throw ShapeError("rejects_negatives: the first element is " + std::to_string(first));
    });
    out[0].copy_from(in[0]);
  }
};

// An op whose kernel declares scratch and checks it arrives, aligned and as long as declared.
class NeedsScratch final : public Op {
 public:
  std::string name() const override { return "needs_scratch"; }
  void params(OpParams&) const override {}
  std::vector<Type> infer_types(const std::vector<Type>& in) const override { return {in[0]}; }
  std::vector<Shape> infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const override { return {in[0]}; }
  bool may_fail_on_values() const override { return false; }
};
struct NeedsScratchKernel final : Executable {
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    return shape_numel(in[0]) * static_cast<int64_t>(sizeof(double));
  }
  // out = 2 * x, computed through the scratch.
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const int64_t n = in[0].numel();
    if (static_cast<int64_t>(scratch.size()) < n * 8 || reinterpret_cast<uintptr_t>(scratch.data()) % 64 != 0)
      throw Error("needs_scratch: got " + std::to_string(scratch.size()) + " bytes of scratch");
    auto* tmp = reinterpret_cast<double*>(scratch.data());
    for (int64_t i = 0; i < n; ++i) tmp[i] = 2 * in[0].item_as_double(i);
    for (int64_t i = 0; i < n; ++i) out[0].data<double>()[i] = tmp[i];
  }
};

const bool kernels_added = [] {
  cpu_backend().kernels().add<RejectsNegatives>([](auto, const Node&) { return std::make_unique<RejectsNegativesKernel>(); });
  cpu_backend().kernels().add<NeedsScratch>([](auto, const Node&) { return std::make_unique<NeedsScratchKernel>(); });
  return true;
}();

}  // namespace

TEST(Exec, AnOpWithoutAKernelIsRefusedWhenCompiledNamingItsLine) {
  Var x = vector("x", f64);
  Var y = apply1(std::make_shared<Unrunnable>(), {x}, Loc::current());  const int line = __LINE__;
  expect_error<Error>([&] { function({x}, {y}); },
                      {"unrunnable", "exec_test.cpp:" + std::to_string(line), "no kernel on this backend"});
}

TEST(Exec, AnErrorRaisedOnAnyThreadKeepsItsTypeAndNamesTheNode) {
  ThreadsForScope threads(2);
  Var x = vector("x", f64);
  Var y = apply1(std::make_shared<RejectsNegatives>(), {x * 2.0}, Loc::current());  const int line = __LINE__;
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), Mode::debug()}) {
    Function f = function({x}, {y}, {.mode = mode});
    expect_values(f(Tensor::from({1.0, 2.0}, {2}))[0], {2, 4});
    expect_error<ShapeError>([&] { f(Tensor::from({-1.0, 2.0}, {2})); },
                             {"the first element is -2", "while running rejects_negatives on f64(2,)",
                              "exec_test.cpp:" + std::to_string(line)});
  }
}

TEST(Exec, ScratchIsPlannedInTheArenaAndCountedInTheReport) {
  Var x = vector("x", f64);
  Var y = apply1(std::make_shared<NeedsScratch>(), {x + 1.0}, Loc::current());
  for (bool keep : {false, true}) {
    Function f = function({x}, {Out(y, {.borrow = keep})}, {.keep_buffers = keep});
    for (int call = 0; call < 3; ++call) expect_values(f(Tensor::from({1.0, 2.0, 3.0}, {3}))[0], {4, 6, 8});
    // x + 1 (64 bytes) and the 24 bytes of scratch (64 aligned) live together in the arena.
    EXPECT_GE(f.memory_report().planned_peak_bytes, 64 + 64);
  }
}

TEST(Exec, EvaluateNodeRunsANodeOutsideAnyPlan) {
  Var a = matrix("a", f64), b = matrix("b", f64);
  Var c = dot(a, b);
  const Node& node = *c.get()->owner;
  const auto executable = cpu_backend().executable(node);
  const std::vector<Tensor> in{Tensor::from({1.0, 2.0, 3.0, 4.0}, {2, 2}), Tensor::from({1.0, 0.0, 0.0, 1.0}, {2, 2})};
  expect_values(evaluate_node(node, *executable, in, cpu_backend())[0], {1, 2, 3, 4});
  const std::vector<Tensor> bad{Tensor::zeros({2, 3}, f64), Tensor::zeros({2, 3}, f64)};
  expect_error<ShapeError>([&] { evaluate_node(node, *executable, bad, cpu_backend()); }, {"dot", "(2,3)"});
}
