#include "ops/composite.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;


TEST(Fusion, AChainBecomesOneOp) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  Var z = tanh(x * y + 1.0) * exp(-x) - sqrt(abs(y));
  Function f = compare_with_plain({x, y}, {z}, {random_tensor({30, 40}), random_tensor({30, 40}, f64, -1, 1, 2)});
  EXPECT_EQ(node_count(f), 1) << f.graph_text();
  EXPECT_EQ(count_op(f, "composite"), 1);
  EXPECT_EQ(count_op(f, "mul"), 2);  // inside it
}

TEST(Fusion, BroadcastScalarsAndStridedInputs) {
  Var m = matrix("m", f64), row = vector("row", f64), s = scalar("s", f64);
  Tensor mt = random_tensor({40, 30}).view({30, 40}, {1, 30}, 0);  // transposed: gathered
  Function f = compare_with_plain({m, row, s}, {exp(m + row) * s - 2.0}, {mt, random_tensor({40}, f64, -1, 1, 2), Tensor::scalar(0.5)});
  EXPECT_EQ(count_op(f, "composite"), 1);
}

TEST(Fusion, MixedDtypesComparisonsAndWhere) {
  Var x = vector("x", f32), k = vector("k", i32);
  Var z = where(x > 0.0, cast(k, f32) * x, -x) + 1.0;
  compare_with_plain({x, k}, {z}, {random_tensor({1000}, f32), Tensor::from(std::vector<int32_t>(1000, 3))}, 1e-6);
}

TEST(Fusion, SharedIntermediatesStayOutside) {
  Var x = vector("x", f64);
  Var e = exp(x) * 2.0;
  Function f = compare_with_plain({x}, {e + 1.0, e * 3.0}, {random_tensor({64})});
  // e is read by two groups: it is computed once, not fused into both.
  EXPECT_EQ(count_op(f, "exp"), 1) << f.graph_text();
}

TEST(Fusion, LargeInputsUseThreadsAndAgree) {
  Var x = vector("x", f32), y = vector("y", f32);
  Tensor xv = random_tensor({300001}, f32), yv = random_tensor({300001}, f32, -1, 1, 2);
  compare_with_plain({x, y}, {sigmoid(x * y) + tanh(x) * 0.5, sum(x * y)}, {xv, yv}, 1e-5);
}

TEST(Fusion, ReductionAccumulatesInsideTheFusedPass) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  std::vector<Tensor> v{random_tensor({50, 70}), random_tensor({50, 70}, f64, -1, 1, 2)};
  for (Var r : {sum(x * y), sum(x * y, {0}), sum(x * y, {1}), mean(exp(x) - y, {1}, true), mean(x * y, {0})}) {
    Function f = compare_with_plain({x, y}, {r}, v, 1e-10);
    auto counts = op_counts(f);
    EXPECT_EQ(counts["composite"], 1) << f.graph_text();
    EXPECT_EQ(counts["sum"] + counts["mean"], 0) << f.graph_text();
  }
  // A middle axis of three is not a run a row-major walk can accumulate: left as is.
  Var t = tensor3("t", f64);
  Function g = compare_with_plain({t}, {sum(t * t, {1})}, {random_tensor({3, 4, 5})});
  EXPECT_EQ(count_op(g, "sum"), 1);
}

TEST(Fusion, GradientsOfFusedGraphs) {
  Var x = matrix("x", f64), w = matrix("w", f64);
  Var cost = sum(tanh(dot(x, w)) * 3.0 + sigmoid(dot(x, w)));
  Var gw = grad(cost, w);
  Function f = compare_with_plain({x, w}, {cost, gw}, {random_tensor({5, 4}), random_tensor({4, 3}, f64, -1, 1, 2)}, 1e-10);
  EXPECT_GE(count_op(f, "composite"), 1);
}

TEST(Fusion, FusedOpsAreNotDifferentiated) {
  Var x = vector("x", f64);
  auto op = std::make_shared<Composite>(1, std::vector<ScalarInstruction>{{ScalarOp::exp, f64, {0}}}, x.type(), std::nullopt);
  Var y = apply1(op, {x}, Loc::current());
  expect_error<GradError>([&] { grad(sum(y), x); }, {"composite", "differentiate the graph before compiling"});
}
