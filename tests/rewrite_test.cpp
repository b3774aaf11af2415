// The engine, merge and constant folding: each checks the rewritten graph and its values.
#include "graph/op.hpp"
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
