#include <cstdlib>
#include <fstream>
#include <iterator>
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

// Issue 9, item 14: to_dot wrote each variable's declaration in the middle of an edge statement,
// so Graphviz applied the node attributes to edges. The text is rendered by Graphviz itself.
TEST(Print, ToDotIsGraphvizThatRenders) {
  Var x = matrix("x \"quoted\""), w = matrix("w");
  Function f = function({x, w}, {tanh(dot(x, w)) + 1.0, grad(sum(exp(dot(x, w))), w)});
  const std::string text = to_dot(f);
  std::istringstream lines(text);
  int declared = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("->") != std::string::npos) EXPECT_EQ(line.find("shape="), std::string::npos) << line;
    if (line.find("shape=") != std::string::npos) ++declared;
  }
  const std::string path = ::testing::TempDir() + "kiln_print_test.dot";
  std::ofstream(path) << text;
  const std::string svg = path + ".svg", log = path + ".log";
  ASSERT_EQ(std::system(("dot -Tsvg " + path + " -o " + svg + " 2> " + log).c_str()), 0)
      << "Graphviz's dot refused the graph (scripts/setup.sh installs graphviz):\n" << text;
  std::ifstream errors(log);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(errors), {}), "") << "dot warned about:\n" << text;
  std::ifstream rendered(svg);
  const std::string picture(std::istreambuf_iterator<char>(rendered), {});
  int drawn = 0;
  for (size_t at = picture.find("class=\"node\""); at != std::string::npos; at = picture.find("class=\"node\"", at + 1)) ++drawn;
  EXPECT_EQ(drawn, declared) << "every declared node is drawn as a node, none as an edge";
  EXPECT_GT(declared, 8);
}

TEST(Print, KilnDebugShowsEveryStageScheduleAndMemoryPlan) {
  Var x = matrix("x"), w = matrix("w");
  Var y = sum(tanh(dot(x, w)));  const int line = __LINE__;
  ::setenv("KILN_DEBUG", "1", 1);
  ::testing::internal::CaptureStderr();
  Function f = function({x, w}, {y});
  f(Tensor::ones({2, 3}), Tensor::ones({3, 4}));
  const std::string text = ::testing::internal::GetCapturedStderr();
  ::unsetenv("KILN_DEBUG");
  for (const std::string& fragment :
       {std::string("kiln: after clone"), std::string("kiln: after fusion"), std::string("kiln: schedule depth-first:"),
        std::string("<- dot(s"), "print_test.cpp:" + std::to_string(line),
        std::string("kiln: memory plan for input and shared shapes (2,3), (3,4)"), std::string("arena @"),
        std::string("own buffer (leaves the call)")})
    EXPECT_NE(text.find(fragment), std::string::npos) << "missing '" << fragment << "' in:\n" << text;
}
