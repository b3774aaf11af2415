// Optimizers as update rules (src/grad/optimizers.cpp): three steps of each rule against the same
// rule written out in doubles, their state in shared variables, rates given as shared variables,
// the per-parameter step fused, convergence, and clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <sstream>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// cost = sum(c * p^2 + d * p) over two parameters; its gradient is 2 c p + d.
const std::vector<double> kStart{0.5, -1.0, 2.0}, kC{1.0, 2.0, 0.5}, kD{0.3, -0.2, 0.1};

struct Problem {
  Shared p = shared(Tensor::from(kStart), "p");
  Var cost = sum(constant(Tensor::from(kC)) * sqr(p) + constant(Tensor::from(kD)) * p);
};

// Runs `steps` steps of the reference rule: state is per element, step(g, state, t) -> delta.
std::vector<double> reference(int steps, const std::function<double(double g, std::vector<double>& state, int t)>& step, int n_state) {
  std::vector<double> p = kStart;
  std::vector<std::vector<double>> state(p.size(), std::vector<double>(static_cast<size_t>(n_state), 0.0));
  for (int t = 1; t <= steps; ++t)
    for (size_t i = 0; i < p.size(); ++i) p[i] += step(2 * kC[i] * p[i] + kD[i], state[i], t);
  return p;
}

std::vector<double> run(Problem& problem, const Updates& updates, int steps) {
  Function f = function({}, {problem.cost}, {.updates = updates});
  for (int i = 0; i < steps; ++i) f({});
  return problem.p.get_value().to_vector<double>();
}

}  // namespace

TEST(Optimizers, EachRuleMatchesItsFormula) {
  const double lr = 0.1, mu = 0.8, eps = 1e-6, rho = 0.7, b1 = 0.9, b2 = 0.99, adam_eps = 1e-8;
  {
    Problem q;
    expect_values(Tensor::from(run(q, sgd(q.cost, {q.p}, lr), 3)),
                  reference(3, [&](double g, std::vector<double>&, int) { return -lr * g; }, 0), 1e-12);
  }
  {
    Problem q;
    expect_values(Tensor::from(run(q, momentum(q.cost, {q.p}, lr, mu), 3)), reference(3, [&](double g, std::vector<double>& s, int) {
                    s[0] = mu * s[0] - lr * g;
                    return s[0];
                  }, 1), 1e-12);
  }
  {
    Problem q;
    expect_values(Tensor::from(run(q, nesterov(q.cost, {q.p}, lr, mu), 3)), reference(3, [&](double g, std::vector<double>& s, int) {
                    s[0] = mu * s[0] - lr * g;
                    return mu * s[0] - lr * g;
                  }, 1), 1e-12);
  }
  {
    Problem q;
    expect_values(Tensor::from(run(q, adagrad(q.cost, {q.p}, lr, eps), 3)), reference(3, [&](double g, std::vector<double>& s, int) {
                    s[0] += g * g;
                    return -lr * g / std::sqrt(s[0] + eps);
                  }, 1), 1e-12);
  }
  {
    Problem q;
    expect_values(Tensor::from(run(q, rmsprop(q.cost, {q.p}, lr, rho, eps), 3)), reference(3, [&](double g, std::vector<double>& s, int) {
                    s[0] = rho * s[0] + (1 - rho) * g * g;
                    return -lr * g / std::sqrt(s[0] + eps);
                  }, 1), 1e-12);
  }
  {
    Problem q;
    expect_values(Tensor::from(run(q, adam(q.cost, {q.p}, {.learning_rate = lr, .beta1 = b1, .beta2 = b2, .epsilon = adam_eps}), 3)),
                  reference(3, [&](double g, std::vector<double>& s, int t) {
                    s[0] = b1 * s[0] + (1 - b1) * g;
                    s[1] = b2 * s[1] + (1 - b2) * g * g;
                    const double step = lr * std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t));
                    return -step * s[0] / (std::sqrt(s[1]) + adam_eps);
                  }, 2), 1e-12);
  }
}

TEST(Optimizers, StateLivesInSharedVariablesAndRatesMayBeShared) {
  Problem q;
  Shared rate = shared(Tensor::scalar(0.1), "rate");
  const Updates updates = momentum(q.cost, {q.p}, rate, 0.5);
  ASSERT_EQ(updates.size(), 2u);  // the velocity, then the parameter
  EXPECT_EQ(updates[0].first.name(), "p.velocity");
  Function step = function({}, {q.cost}, {.updates = updates});
  step({});
  const std::vector<double> velocity = updates[0].first.get_value().to_vector<double>();
  for (size_t i = 0; i < kStart.size(); ++i) EXPECT_NEAR(velocity[i], -0.1 * (2 * kC[i] * kStart[i] + kD[i]), 1e-12);
  rate.set_value(Tensor::scalar(0.0));  // with no learning rate, the velocity only decays
  const std::vector<double> p_before = q.p.get_value().to_vector<double>();
  step({});
  const std::vector<double> p_after = q.p.get_value().to_vector<double>();
  for (size_t i = 0; i < kStart.size(); ++i) EXPECT_NEAR(p_after[i], p_before[i] + 0.5 * velocity[i], 1e-12);
}

TEST(Optimizers, SinglePrecisionParametersStaySinglePrecisionAndConverge) {
  Shared w = shared(Tensor::from(std::vector<float>{5, -4}), "w");
  Var cost = sum(sqr(w - 3.0));
  Function step = function({}, {cost}, {.updates = adam(cost, {w}, {.learning_rate = 0.1})});
  for (int i = 0; i < 300; ++i) step({});
  EXPECT_EQ(w.get_value().dtype(), DType::f32);
  expect_values(w.get_value(), {3, 3}, 1e-2);
}

// The first lines of the trees of a step's graph: one per output (the cost, then every updated
// value).
std::vector<std::string> root_lines(const Function& step) {
  std::istringstream text(step.graph_text());
  std::vector<std::string> roots;
  for (std::string line; std::getline(text, line);)
    if (!line.empty() && line[0] != ' ' && static_cast<unsigned char>(line[0]) < 0x80) roots.push_back(line);  // not inside a tree
  return roots;
}

// The distinct composite nodes among those roots ("[id C]" in the lines that start with one).
std::set<std::string> fused_nodes(const std::vector<std::string>& roots) {
  std::set<std::string> ids;
  for (const std::string& line : roots)
    if (const size_t id = line.find("[id "); line.rfind("composite{", 0) == 0 && id != std::string::npos)
      ids.insert(line.substr(id, line.find(']', id) - id));
  return ids;
}

TEST(Optimizers, EveryParameterStepIsOneFusedLoop) {
  // Adam's three new values per parameter (both moments and the parameter) come out of one fused
  // loop over the parameter's elements: the graph's roots are outputs of one composite per
  // parameter, but for the cost and the step count (fused with the step size, a scalar).
  Shared w = shared(Tensor::zeros({64, 32}), "w"), b = shared(Tensor::zeros({32}), "b");
  Var x = matrix("x");
  Var cost = mean(sqr(tanh(dot(x, w) + b)));
  const Updates updates = adam(cost, {w, b});  const int adam_line = __LINE__;
  Function step = function({x}, {cost}, {.updates = updates});
  const std::vector<std::string> roots = root_lines(step);
  ASSERT_EQ(roots.size(), 1u + 1u + 3u * 2u);  // the cost, t + 1, and m, v, p for w and for b
  EXPECT_EQ(roots[0].rfind("mean", 0), 0u) << roots[0];
  for (size_t r = 2; r < roots.size(); ++r) {
    EXPECT_EQ(roots[r].rfind("composite{", 0), 0u) << roots[r];
    EXPECT_NE(roots[r].find("optimizers_test.cpp:" + std::to_string(adam_line)), std::string::npos)
        << "built at the line that called adam: " << roots[r];
  }
  EXPECT_EQ(fused_nodes({roots.begin() + 2, roots.end()}).size(), 2u) << step.graph_text();
}

TEST(Optimizers, EveryRulesParameterStepIsOneFusedLoop) {
  struct Rule {
    const char* name;
    std::function<Updates(const Gradients& gradients, const std::vector<Shared>& params)> updates;
    size_t states;
  };
  const Rule rules[] = {
      {"sgd", [](const Gradients& g, const std::vector<Shared>& p) { return sgd(g, p); }, 0},
      {"momentum", [](const Gradients& g, const std::vector<Shared>& p) { return momentum(g, p); }, 1},
      {"nesterov", [](const Gradients& g, const std::vector<Shared>& p) { return nesterov(g, p); }, 1},
      {"adagrad", [](const Gradients& g, const std::vector<Shared>& p) { return adagrad(g, p); }, 1},
      {"rmsprop", [](const Gradients& g, const std::vector<Shared>& p) { return rmsprop(g, p); }, 1},
  };
  // The gradients are given: from a cost, a matrix product's gradient takes the rule's scaling
  // into its gemm (sgd's whole step is then one gemm), which no elementwise loop can join.
  for (const Rule& rule : rules) {
    SCOPED_TRACE(rule.name);
    Shared w = shared(Tensor::zeros({64, 32}), "w"), b = shared(Tensor::zeros({32}), "b");
    Var gw = matrix("gw"), gb = vector("gb");
    Function step = function({gw, gb}, {}, {.updates = rule.updates(Gradients({gw, gb}), {w, b})});
    const std::vector<std::string> roots = root_lines(step);
    ASSERT_EQ(roots.size(), (rule.states + 1) * 2);
    for (const std::string& line : roots) EXPECT_EQ(line.rfind("composite{", 0), 0u) << line;
    EXPECT_EQ(fused_nodes(roots).size(), 2u) << step.graph_text();
  }
}

TEST(Optimizers, BadArgumentsAreClearErrors) {
  Problem q;
  Shared count = shared(Tensor::from(std::vector<int64_t>{1}), "count");
  expect_error<TypeError>([&] { sgd(q.cost, {}); }, {"sgd", "at least one parameter"});
  expect_error<TypeError>([&] { adam(q.cost, {count}); }, {"adam", "float shared variable", "'count'", "i64"});
  expect_error<TypeError>([&] { rmsprop(std::vector<Var>{}, {q.p}); }, {"rmsprop", "0 gradients for 1 parameters"});
  // Found by a new-user trial: an f64 gradient of an f32 parameter failed in function() naming
  // 'w.mean_square', a state variable the user never made; a parameter the cost ignores got grad's
  // advice to pass GradOptions, which no optimizer takes.
  Shared w = shared(Tensor::from(std::vector<float>{1, 2}), "w"), unused = shared(Tensor::ones({2}), "unused");
  Var scaled = grad(sum(sqr(w)), Var(w)) * scalar("scale", f64);
  expect_error<TypeError>([&] { rmsprop(std::vector<Var>{scaled}, {w}); }, {"rmsprop", "gradient of 'w'", "f64", "cast(g, f32)"});
  expect_error<TypeError>([&] { sgd(std::vector<Var>{scaled}, {w}); }, {"sgd", "gradient of 'w'", "f64"});
  expect_error<GradError>([&] { adam(sum(sqr(w)), {w, unused}); }, {"adam", "does not depend on parameter 'unused'", "leave it out"});
}
