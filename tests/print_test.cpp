#include <sstream>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Print, DebugprintShowsOpsTypesAndLines) {
  Var x = matrix("x"), w = matrix("w");
  Var y = tanh(dot(x, w));
  std::ostringstream s;
  debugprint(y, s);
  const std::string text = s.str();
  EXPECT_NE(text.find("tanh [id A] f32[?,?]"), std::string::npos) << text;
  EXPECT_NE(text.find("dot [id B]"), std::string::npos) << text;
  EXPECT_NE(text.find("x f32[?,?] (input)"), std::string::npos) << text;
  EXPECT_NE(text.find("print_test.cpp:"), std::string::npos) << text;
}

TEST(Print, SharedSubgraphsPrintOnce) {
  Var x = vector("x");
  Var e = exp(x);
  std::ostringstream s;
  debugprint(e + e, s);
  const std::string text = s.str();
  EXPECT_EQ(text.find("(input)"), text.rfind("(input)")) << text;
}

TEST(Print, FunctionAndDot) {
  Var x = vector("x");
  Function f = function({x}, {sigmoid(x)});
  std::ostringstream s;
  debugprint(f, s);
  EXPECT_NE(s.str().find("sigmoid"), std::string::npos);
  const std::string dot_text = to_dot(f);
  EXPECT_EQ(dot_text.rfind("digraph kiln {", 0), 0u);
  EXPECT_NE(dot_text.find("sigmoid"), std::string::npos);
  EXPECT_NE(dot_text.find("->"), std::string::npos);
}
