#include "graph/function_graph.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Graph, TypesOfInputs) {
  EXPECT_EQ(scalar().type().ndim(), 0);
  EXPECT_EQ(matrix("m", f64).type().str(), "f64[?,?]");
  EXPECT_EQ(tensor(i32, {true, false}).type().str(), "i32[1,?]");
  EXPECT_EQ(matrix("m").name(), "m");
  Var c = constant(Tensor::from({1.0, 2.0}, {1, 2}));
  EXPECT_EQ(c.type().str(), "f64[1,?]");
  EXPECT_TRUE(c.get()->is_constant());
}

TEST(Graph, NodesRecordTheUsersSourceLine) {
  Var x = vector("x");
  Var y = exp(x);  const int line = __LINE__;
  EXPECT_EQ(y.get()->owner->where(), "graph_test.cpp:" + std::to_string(line));
  Var z = x + 1.0;  const int line2 = __LINE__;
  EXPECT_EQ(z.get()->owner->where(), "graph_test.cpp:" + std::to_string(line2));
}

TEST(Graph, FunctionGraphClonesAndAppliesGivens) {
  Var x = vector("x", f64), y = vector("y", f64);
  Var out = exp(x) + y;
  FunctionGraph g({x}, {out}, {{y, x * 2.0}});
  EXPECT_FALSE(g.outputs()[0].same(out));
  EXPECT_EQ(g.toposort().size(), 3u);  // exp, mul, add
  std::vector<Variable*> leaves = g.leaves();
  bool has_y = false;
  for (Variable* v : leaves) has_y |= v == y.get();
  EXPECT_FALSE(has_y);
  // The user's graph is untouched.
  EXPECT_TRUE(out.get()->owner->inputs[1].same(y));
}

TEST(Graph, ReplaceRewiresClients) {
  Var x = vector("x", f64);
  Var a = exp(x);
  Var b = a * 2.0;
  FunctionGraph g({x}, {b});
  Var cloned_a = g.toposort()[0]->output(0);
  EXPECT_EQ(g.clients(cloned_a.get()).size(), 1u);
  Var replacement = log(x);
  g.replace(cloned_a, replacement);
  EXPECT_EQ(g.clients(cloned_a.get()).size(), 0u);
  expect_error<TypeError>([&] { g.replace(replacement, vector("w", f32)); }, {"cannot be replaced"});
}

TEST(Graph, ChangedSinceListsOnlyTheChangedLiveNodesInputsFirst) {
  Var x = vector("x", f64);
  Var a = exp(x);
  Var b = a * 2.0;
  Var c = tanh(b);
  Var d = c + 1.0;
  FunctionGraph g({x}, {d});
  const std::vector<Node*> order = g.toposort();
  ASSERT_EQ(order.size(), 4u);
  const uint64_t before = g.version();
  EXPECT_TRUE(g.changed_since(before).empty());
  // a is replaced by log(sin(x)): the two new nodes and a's reader change; tanh and the add do not.
  Var s = sin(x);
  Var replacement = log(s);
  g.replace(order[0]->output(0), replacement);
  const std::vector<Node*> changed = g.changed_since(before);
  ASSERT_EQ(changed.size(), 3u);
  EXPECT_EQ(changed[0], s.get()->owner);
  EXPECT_EQ(changed[1], replacement.get()->owner);
  EXPECT_EQ(changed[2], order[1]);  // the multiplication, which now reads log(sin(x))
  // The replaced exp is no longer live and is not listed; a later version sees nothing.
  for (Node* n : changed) EXPECT_NE(n, order[0]);
  EXPECT_TRUE(g.changed_since(g.version()).empty());
}

TEST(Graph, DeepGraphsDoNotRecurse) {
  Var x = vector("x", f64);
  Var y = x;
  for (int i = 0; i < 100000; ++i) y = y + 1.0;
  EXPECT_EQ(topological_order({y}).size(), 100000u);
  y = Var();  // releasing the chain must not recurse either
}

TEST(Graph, TypeErrorsNameOpTypesAndLine) {
  Var a = matrix("a"), v = vector("v", i32);
  expect_error<TypeError>([&] { dot(tensor3("t"), a); }, {"dot", "f32[?,?,?]", "graph_test.cpp"});
  expect_error<TypeError>([&] { take(a, vector("i", f32)); }, {"take", "f32[?]", "graph_test.cpp"});
}
