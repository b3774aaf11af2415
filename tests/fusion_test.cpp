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

// An operand that is neither one value nor in the result's shape is copied into the fused loop's
// blocks a run along the last axis at a time: every layout and element size of such an operand,
// with blocks that end inside a row.
TEST(Fusion, BroadcastOperandsOfEveryLayoutAgreeWithTheUnfusedOps) {
  Var x = matrix("x"), bias = tensor(f32, {true, false}, "bias");  // a row over a batch
  Function f = compare_with_plain({x, bias}, {tanh(x + bias)}, {random_tensor({7, 1000}, f32), random_tensor({1, 1000}, f32, -1, 1, 3)}, 1e-6);
  EXPECT_EQ(count_op(f, "composite"), 1);
  Var m = matrix("m", f64), v = vector("v", f64), column = tensor(f64, {false, true}, "column");
  compare_with_plain({m, v}, {exp(m) * v + v}, {random_tensor({500, 3}), random_tensor({3}, f64, -1, 1, 4)});  // runs of 3
  compare_with_plain({m, column}, {sqrt(abs(m)) - column}, {random_tensor({301, 7}), random_tensor({301, 1}, f64, -1, 1, 5)});
  Var images = tensor4("images"), per_channel = tensor(f32, {true, false, true, true}, "per_channel");
  compare_with_plain({images, per_channel}, {exp(-images) * per_channel},
                     {random_tensor({3, 5, 9, 11}, f32), random_tensor({1, 5, 1, 1}, f32, -1, 1, 6)}, 1e-6);
  Var cube = tensor3("cube", f64), middle = tensor(f64, {false, true, false}, "middle");
  compare_with_plain({cube, middle}, {cube * middle - 1.0}, {random_tensor({4, 6, 50}), random_tensor({4, 1, 50}, f64, -1, 1, 8)});
  Tensor transposed = random_tensor({40, 300}).view({300, 40}, {1, 300}, 0);  // a stride along the last axis
  compare_with_plain({m, v}, {exp(m) + v}, {transposed, random_tensor({40}, f64, -1, 1, 9)});
  compare_with_plain({images, per_channel}, {tanh(images + per_channel) * 2.0},  // trailing axes of size 1
                     {random_tensor({6, 5, 1, 1}, f32, -1, 1, 10), random_tensor({1, 5, 1, 1}, f32, -1, 1, 11)}, 1e-6);
  Tensor reversed = random_tensor({40}, f64, -1, 1, 12);
  reversed = reversed.view({40}, {-1}, 39);  // a negative stride
  compare_with_plain({m, v}, {m * v}, {random_tensor({30, 40}), reversed});
  Tensor stretched = random_tensor({30, 1}, f64, -1, 1, 13).view({30, 40}, {1, 0}, 0);  // a user's stride 0
  Var full = matrix("full", f64);
  compare_with_plain({m, full}, {exp(m) - full}, {random_tensor({30, 40}), stretched});
  std::vector<bool> keep(1000);
  for (size_t j = 0; j < keep.size(); ++j) keep[j] = j % 3 != 0;
  Var mask = tensor(DType::b8, {true, false}, "mask");  // one byte an element
  compare_with_plain({x, mask}, {where(mask, exp(x), -x)}, {random_tensor({5, 1000}, f32), Tensor::from(keep, {1, 1000})}, 1e-6);
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

// The distinct fused nodes of f with more than one output ("[id C].1" is output 1 of node C).
int multi_output_composites(const Function& f) {
  std::set<std::string> ids;
  std::istringstream lines(f.graph_text());
  static const std::regex extra(R"(^[^a-z]*composite\{[^ ]*\} \[id ([A-Z]+)\]\.[1-9])");
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, extra)) ids.insert(m[1]);
  return static_cast<int>(ids.size());
}

TEST(Fusion, ValuesAlsoReadOutsideTheGroupComeOutOfTheSamePass) {
  // a is an output of the function and an operand of b: one pass writes both.
  Var x = vector("x", f64), y = vector("y", f64);
  Var a = exp(x) * y;
  Var b = tanh(a) + x * 2.0;
  Function f = compare_with_plain({x, y}, {a, b}, {random_tensor({1000}), random_tensor({1000}, f64, -1, 1, 2)}, 1e-12);
  EXPECT_EQ(node_count(f), 1) << f.graph_text();
  EXPECT_EQ(multi_output_composites(f), 1) << f.graph_text();
  EXPECT_NE(f.graph_text().find("mul[out1]"), std::string::npos) << f.graph_text();
  // Also with the other dtypes of a mixed program, and large enough for threads and streaming stores.
  Var u = vector("u", f32), k = vector("k", i32);
  Var scaled = cast(k, f32) * u;
  Function g = compare_with_plain({u, k}, {scaled, where(scaled > 0.0, scaled, -u) + 1.0},
                                  {random_tensor({2'000'001}, f32), Tensor::full({2'000'001}, 3.0, i32)}, 1e-6);
  EXPECT_EQ(multi_output_composites(g), 1) << g.graph_text();
}

// A dimension not declared broadcastable may be 1 when the function runs, and NumPy broadcasts it:
// a value read outside the group that the group widens against another input keeps its own shape
// (the pass computes it in the group's shape, then its own rows are copied out).
TEST(Fusion, AValueTheGroupWidensAtRunTimeKeepsItsShape) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  const Var h = x * 2.0;
  const Tensor row = Tensor::from({1.0, 2.0, 3.0}, {1, 3}), ones = Tensor::ones({4, 3}, f64);
  Function f = compare_with_plain({x, y}, {h + y, sum(h, {0}), h}, {row, ones});
  EXPECT_EQ(multi_output_composites(f), 1) << f.graph_text();
  EXPECT_EQ(f(row, ones)[2].shape(), (Shape{1, 3}));
  expect_values(f(row, ones)[1], {2, 4, 6});
  // The same function on shapes that need no widening, then again on ones that do.
  expect_values(f(Tensor::full({4, 3}, 1.0, f64), ones)[1], {8, 8, 8});
  expect_values(f(Tensor::from({1.0, 2.0, 3.0, 4.0}, {4, 1}), ones)[1], {20});
  // A result empty along an axis where the value read outside is 1: that value is still computed.
  const auto empty_rows = f(row, Tensor::zeros({0, 3}, f64));
  EXPECT_EQ(empty_rows[0].shape(), (Shape{0, 3}));
  expect_values(empty_rows[2], {2, 4, 6});
  // Large enough for the pass to run on threads.
  const Tensor wide = random_tensor({1, 300000}, f64, -1, 1, 3), tall = random_tensor({4, 300000}, f64, -1, 1, 4);
  compare_with_plain({x, y}, {h + y, sum(h, {0}), h}, {wide, tall});
  // The same read by a gradient and by a shared variable's update, which keeps its shape.
  Shared scale = shared(Tensor::zeros({1, 3}, f64), "log_scale");
  const Var g = grad(sum(x * exp(scale)), scale);
  expect_values(function({x}, {g})(ones)[0], {4, 4, 4});
  Shared s = shared(row, "s");
  const Var doubled = s * 2.0;
  function({y}, {doubled + y}, {.updates = {{s, doubled}}})(ones);
  EXPECT_EQ(s.get_value().shape(), (Shape{1, 3}));
  expect_values(s.get_value(), {2, 4, 6});
  // Where the other inputs are 1 along every axis, the value cannot be widened: one pass writes both.
  Var v = vector("v", f64), c = scalar("c", f64);
  const Var e = exp(v) * c;
  Function one_pass = compare_with_plain({v, c}, {e, tanh(e) + 1.0}, {random_tensor({7}), Tensor::scalar(0.5)}, 1e-12);
  EXPECT_EQ(multi_output_composites(one_pass), 1) << one_pass.graph_text();
}

TEST(Fusion, AValueReadByWhatFeedsTheGroupStaysOutside) {
  // s reads a and feeds the root: a joining the root's pass as an extra output would make the
  // fused node read its own output. The same through a second group of another shape: c reads a
  // (broadcast) and d, read by the root through a sum, is in c's group.
  Var x = vector("x", f64), y = vector("y", f64), m = matrix("m", f64);
  Var a = exp(x) * y;
  Var s = sum(a);
  Var root = tanh(a) + s;
  Var c = m + a;
  Var d = tanh(m * 3.0);
  Var root2 = c * d;
  Var e = (sum(d, {0}) + a) * 2.0;
  const std::vector<Tensor> values{random_tensor({6}), random_tensor({6}, f64, -1, 1, 2), random_tensor({5, 6}, f64, -1, 1, 3)};
  Function f = compare_with_plain({x, y, m}, {root, e, root2}, values, 1e-12);
  EXPECT_EQ(count_op(f, "exp"), 1) << f.graph_text();  // never recomputed
}

TEST(Fusion, TwoOutputsNeverTakeTheBufferOfOneInput) {
  // t dies at the fused node and has the shape and dtype of both its outputs: one of them may be
  // written over it, not both.
  Var x = matrix("x", f64), w = matrix("w", f64), v = matrix("v", f64);
  Var t = dot(x, w);
  Var a = exp(t) * 2.0;
  Var r = a + t;
  Function f = compare_with_plain({x, w, v}, {dot(r, v), dot(a, v)},
                                  {random_tensor({40, 30}), random_tensor({30, 50}, f64, -1, 1, 2), random_tensor({50, 3}, f64, -1, 1, 3)},
                                  1e-10);
  EXPECT_EQ(multi_output_composites(f), 1) << f.graph_text();
}

TEST(Fusion, AGroupWhoseSumAccumulatesInItsPassKeepsOneOutput) {
  // sum(b) accumulates inside b's pass, so b's group writes nothing else: a is its own pass, as
  // before, rather than b being written out for a separate sum.
  Var x = matrix("x", f64), y = matrix("y", f64);
  Var a = tanh(x * y);
  Var b = a * x + 1.0;
  Function f = compare_with_plain({x, y}, {sum(b), a}, {random_tensor({4, 5}), random_tensor({4, 5}, f64, -1, 1, 2)}, 1e-12);
  EXPECT_EQ(multi_output_composites(f), 0) << f.graph_text();
  EXPECT_EQ(count_op(f, "sum"), 0) << f.graph_text();
}

TEST(Fusion, GradientsThroughAFusedNodeWithTwoOutputs) {
  // Compiled, one fused node writes a and b, both read by the cost's product.
  auto fn = [](std::vector<Var> v) {
    Var a = tanh(v[0] * v[1]);
    Var b = a * v[0] + 1.0;
    return sum(dot(b, transpose(a)));
  };
  Var x = matrix("x", f64), y = matrix("y", f64);
  Function f = function({x, y}, {fn({x, y})});
  EXPECT_EQ(multi_output_composites(f), 1) << f.graph_text();
  const std::vector<Tensor> at{random_tensor({4, 5}), random_tensor({4, 5}, f64, -1, 1, 2)};
  EXPECT_NO_THROW(verify_grad(fn, at));
  EXPECT_NO_THROW(verify_rop(fn, at));
}

TEST(Fusion, CompositesThatWriteDifferentOutputsAreNotEqual) {
  // Merge must not take one for the other: the outputs are part of what a composite computes.
  const std::vector<ScalarInstruction> program{{ScalarOp::exp, f64, {0}}, {ScalarOp::mul, f64, {1, 0}}, {ScalarOp::add, f64, {2, 1}}};
  const Type type = vector("x", f64).type();
  const Composite one_output(1, program, type, std::nullopt), writes_exp(1, program, type, std::nullopt, {1}),
      writes_mul(1, program, type, std::nullopt, {2}), writes_exp_again(1, program, type, std::nullopt, {1});
  EXPECT_FALSE(one_output.equals(writes_exp));
  EXPECT_FALSE(writes_exp.equals(writes_mul));
  EXPECT_TRUE(writes_exp.equals(writes_exp_again));
  EXPECT_EQ(writes_exp.hash(), writes_exp_again.hash());
  EXPECT_EQ(writes_exp.name(), "composite{exp[out1],mul,add}");
  EXPECT_EQ(writes_exp.infer_types({type}).size(), 2u);
  // Output 0 is always the last instruction's; a reduction keeps one output.
  expect_error<TypeError>([&] { Composite(1, program, type, std::nullopt, {3}); }, {"composite", "output register 3"});
  expect_error<TypeError>([&] { Composite(1, program, type, FusedReduction{ReduceKind::sum, {0}, false}, {1}); },
                          {"without a reduction"});
}

// A fused op whose inputs do not broadcast names the fused node that fails and the user's line, as
// the unfused graph would (it named only the fused op, built at the line of its last node).
TEST(Fusion, ABroadcastErrorNamesTheFusedNodeThatFails) {
  Var x = vector("x"), y = vector("y");
  const Var z = exp(x) * 2.0;
  const Var out = z + y;  const int add_line = __LINE__;
  const Var g = grad(sum(out * out), x);
  expect_error<ShapeError>([&] { function({x, y}, {out, g})(Tensor::ones({3}), Tensor::ones({2})); },
                           {"cannot be broadcast", "in add", "fusion_test.cpp:" + std::to_string(add_line), "(3,) and (2,)"});
}
