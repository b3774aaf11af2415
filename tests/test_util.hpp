#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::test {

inline void expect_values(const Tensor& t, const std::vector<double>& expected, double tol = 1e-6) {
  std::vector<double> got = t.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size()) << "tensor " << t.str();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i;
      continue;
    }
    if (got[i] == expected[i]) continue;  // equal infinities too (their difference is NaN)
    EXPECT_NEAR(got[i], expected[i], tol * std::max(1.0, std::fabs(expected[i]))) << "element " << i << " of " << t.str();
  }
}

// Compiles and runs outputs of the given inputs once.
inline std::vector<Tensor> eval(const std::vector<Var>& inputs, const std::vector<Var>& outputs,
                                const std::vector<Tensor>& values) {
  std::vector<In> ins(inputs.begin(), inputs.end());
  std::vector<Out> outs(outputs.begin(), outputs.end());
  return function(ins, outs, {.allow_unused_inputs = true})(values);
}

inline Tensor eval1(const std::vector<Var>& inputs, const Var& output, const std::vector<Tensor>& values) {
  return eval(inputs, {output}, values)[0];
}

// Deterministic pseudo-random values in [lo, hi).
inline Tensor random_tensor(const Shape& shape, DType dtype = DType::f64, double lo = -1.0, double hi = 1.0,
                            uint64_t seed = 7) {
  std::vector<double> v(shape_numel(shape));
  uint64_t s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  for (double& x : v) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    x = lo + (hi - lo) * static_cast<double>(s >> 11) / static_cast<double>(1ULL << 53);
  }
  return Tensor::from(v, shape).to(dtype);
}

// How many nodes of each op (by printed name, parameters stripped) the compiled graph holds; the
// ops inside a fused composite{...} count too (and the composite itself as "composite").
inline std::map<std::string, int> op_counts(const Function& f) {
  std::map<std::string, int> counts;
  std::set<std::string> seen;
  std::istringstream lines(f.graph_text());
  std::string line;
  static const std::regex node(R"(([A-Za-z_0-9]+)(\{[^ ]*\}|\[[^ ]*\]|\([^ ]*\))? \[id ([A-Z]+)\])");
  std::smatch m;
  while (std::getline(lines, line)) {
    if (!std::regex_search(line, m, node) || !seen.insert(m[3]).second) continue;
    ++counts[m[1]];
    if (m[1] != "composite") continue;
    std::string body = m[2].str().substr(1, m[2].length() - 2);
    body = body.substr(0, body.find('|'));
    std::istringstream ops(body);
    for (std::string op; std::getline(ops, op, ',');) ++counts[op.substr(0, op.find('['))];  // "add[out1]": an add
  }
  return counts;
}

// How many nodes the compiled graph holds (a composite counts once).
inline int node_count(const Function& f) {
  std::set<std::string> ids;
  std::istringstream lines(f.graph_text());
  static const std::regex id(R"(\[id ([A-Z]+)\])");
  std::smatch m;
  for (std::string line; std::getline(lines, line);)
    if (std::regex_search(line, m, id)) ids.insert(m[1]);
  return static_cast<int>(ids.size());
}

inline int count_op(const Function& f, const std::string& name) {
  auto c = op_counts(f);
  return c.count(name) ? c[name] : 0;
}

inline Mode plain_mode() { return Mode("plain", {}); }

// Sets the number of threads for a scope and restores the previous number when it ends.
class ThreadsForScope {
 public:
  explicit ThreadsForScope(int n) : previous_(num_threads()) { set_num_threads(n); }
  ~ThreadsForScope() { set_num_threads(previous_); }
  ThreadsForScope(const ThreadsForScope&) = delete;
  ThreadsForScope& operator=(const ThreadsForScope&) = delete;

 private:
  int previous_;
};

// Compiles outputs with `mode` and without any rewrite, checks that both give the same shapes,
// dtypes and values on `values`, and returns the rewritten function (to inspect its graph).
inline Function compare_with_plain(const std::vector<Var>& inputs, const std::vector<Var>& outputs,
                                   const std::vector<Tensor>& values, double tol = 1e-12, Mode mode = Mode::fast_run()) {
  std::vector<In> ins(inputs.begin(), inputs.end());
  std::vector<Out> outs(outputs.begin(), outputs.end());
  Function rewritten = function(ins, outs, {.mode = mode, .allow_unused_inputs = true});
  Function plain = function(ins, outs, {.mode = plain_mode(), .allow_unused_inputs = true});
  auto a = rewritten(values), b = plain(values);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].shape(), b[i].shape()) << "output " << i;
    EXPECT_EQ(a[i].dtype(), b[i].dtype()) << "output " << i;
    expect_values(a[i], b[i].to_vector<double>(), tol);
  }
  return rewritten;
}

inline Function compare_with_plain(const std::vector<Var>& inputs, const Var& output, const std::vector<Tensor>& values,
                                   double tol = 1e-12) {
  return compare_with_plain(inputs, std::vector<Var>{output}, values, tol);
}

template <class E, class F> void expect_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
    ADD_FAILURE() << "no error was raised";
  } catch (const E& e) {
    for (const auto& frag : fragments)
      EXPECT_NE(std::string(e.what()).find(frag), std::string::npos) << "message lacks '" << frag << "': " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong error type: " << e.what();
  }
}

}  // namespace kiln::test
