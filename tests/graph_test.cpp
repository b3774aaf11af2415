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
