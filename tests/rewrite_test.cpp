// The engine, merge and constant folding: each checks the rewritten graph and its values.
#include "graph/op.hpp"
#include "ops/composite.hpp"
#include "ops/nnet.hpp"
#include "ops/reduce.hpp"
#include "rewrite/engine.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;


TEST(Merge, IdenticalNodesBecomeOne) {
  Var x = vector("x", f64);
  Var a = exp(x) * 2.0, b = exp(x) * 2.0;
  Function f = compare_with_plain({x}, {a + b}, {random_tensor({5})}, 1e-12, Mode::fast_compile());
  EXPECT_EQ(count_op(f, "exp"), 1);
  EXPECT_EQ(count_op(f, "mul"), 1);
  Function plain = function({x}, {a + b}, {.mode = plain_mode()});
  EXPECT_EQ(count_op(plain, "exp"), 2);
}

TEST(Merge, EqualConstantsBecomeOne) {
  Var x = vector("x", f64);
  Var c1 = constant(Tensor::from({1.0, 2.0}, {2})), c2 = constant(Tensor::from({1.0, 2.0}, {2}));
  Function f = compare_with_plain({x}, {(x + c1) * (x + c2)}, {random_tensor({2})}, 1e-12, Mode::fast_compile());
  EXPECT_EQ(count_op(f, "add"), 1);
}

TEST(ConstantFolding, FoldsConstantSubgraphs) {
  Var x = vector("x", f64);
  Var c = exp(constant(Tensor::from({0.0, 1.0}, {2}))) * 2.0;
  Function f = compare_with_plain({x}, {x + c}, {random_tensor({2})}, 1e-12, Mode::fast_compile());
  EXPECT_EQ(count_op(f, "exp"), 0);
  EXPECT_EQ(count_op(f, "mul"), 0);
  EXPECT_EQ(count_op(f, "add"), 1);
}

TEST(ConstantFolding, LeavesLargeBroadcastsToTheRun) {
  Var x = vector("x", f64);
  Var big = zeros_like(constant(Tensor::zeros({1000, 1000}, f64))) + 1.0;
  Function f = function({x}, {sum(big) + sum(x)}, {.mode = Mode::fast_compile()});
  EXPECT_NEAR(f(Tensor::from({1.0}, {1}))[0].item<double>(), 1e6 + 1, 1e-6);
}

TEST(Engine, ReportCountsFiredRewrites) {
  Var x = vector("x", f64);
  Function f = function({x}, {exp(x) + exp(x)}, {.mode = Mode::fast_compile()});
  const CompileReport& r = f.compile_report();
  EXPECT_GT(r.nodes_before, r.nodes_after);
  int64_t merged = 0;
  for (const RewriteStat& s : r.rewrites)
    if (s.name == "merge_nodes") merged += s.fired;
  EXPECT_EQ(merged, 1);
  EXPECT_NE(r.str().find("merge/merge_nodes: fired 1"), std::string::npos) << r.str();
}

TEST(Engine, CyclesAreReportedNotLooped) {
  // Two rewrites that undo each other: exp <-> sin of the same input.
  RewriteGroup flip{"flip", {},
                    {{"exp_to_sin", {}, [](FunctionGraph&, Node& n) -> std::vector<Var> {
                        if (n.op->name() != "exp") return {};
                        return {sin(n.inputs[0])};
                      }},
                     {"sin_to_exp", {}, [](FunctionGraph&, Node& n) -> std::vector<Var> {
                        if (n.op->name() != "sin") return {};
                        return {exp(n.inputs[0])};
                      }}}};
  Var x = vector("x", f64);
  FunctionGraph g({x}, {exp(x)});
  CompileReport report;
  expect_error<Error>([&] { apply_group(g, flip, report, 10); }, {"'flip'", "did not settle", "exp_to_sin", "sin_to_exp"});
}

TEST(Engine, UnknownGroupIsAnError) {
  Var x = vector("x");
  expect_error<Error>([&] { function({x}, {x * 2.0}, {.mode = Mode("mine", {"no_such_group"})}); }, {"no_such_group"});
}

// Issue 9, item 9: fused expressions that print alike, composite{sub,mul}, were merged under a mode
// running fusion then merge: (x - y) * y gave 2 for (x - y) * x too.
TEST(Merge, FusedExpressionsThatPrintAlikeAreNotMerged) {
  Var x = scalar("x"), y = scalar("y");
  Function f = function({x, y}, {(x - y) * y, (x - y) * x}, {.mode = Mode("fuse_then_merge", {"fusion", "merge"})});
  auto o = f(Tensor::scalar(3.f), Tensor::scalar(1.f));
  EXPECT_EQ(o[0].item<float>(), 2.f);
  EXPECT_EQ(o[1].item<float>(), 6.f);
}

TEST(Merge, OpsAreEqualByTheirParametersNotTheirNames) {
  const Type t{f32, {}};
  auto program = [](int second_factor) {
    return std::vector<ScalarInstruction>{{ScalarOp::sub, f32, {0, 1}}, {ScalarOp::mul, f32, {2, second_factor}}};
  };
  Composite times_y(2, program(1), t, std::nullopt), times_x(2, program(0), t, std::nullopt), again(2, program(1), t, std::nullopt);
  EXPECT_EQ(times_y.name(), times_x.name());
  EXPECT_FALSE(times_y.equals(times_x));
  EXPECT_TRUE(times_y.equals(again));
  EXPECT_EQ(times_y.hash(), again.hash());
  EXPECT_FALSE(Composite(2, program(1), Type{f64, {}}, std::nullopt).equals(times_y));
  EXPECT_FALSE(Reduce(ReduceKind::sum, {0}, false).equals(Reduce(ReduceKind::sum, {0}, true)));
  EXPECT_TRUE(Softmax(1, true).equals(Softmax(1, true)));
  EXPECT_FALSE(Softmax(1, true).equals(Softmax(1, false)));
  // Identical fused nodes still merge into one.
  Var x = vector("x"), y = vector("y");
  Function f = function({x, y}, {exp(x - y) * y + exp(x - y) * y}, {.mode = Mode("fuse_then_merge", {"merge", "fusion", "merge"})});
  EXPECT_EQ(count_op(f, "exp"), 1);
}
