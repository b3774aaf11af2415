// jacobian and hessian (src/grad/jacobian.cpp): built with a loop over the output's elements,
// checked against finite differences on an MLP and an RNN.
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// Central differences of f's output, element by element, for each element of input `wrt`.
std::vector<double> numeric_jacobian(Function& f, std::vector<Tensor> at, size_t wrt, double eps = 1e-6) {
  const int64_t n = at[wrt].numel();
  std::vector<double> out;
  std::vector<std::vector<double>> columns;
  for (int64_t j = 0; j < n; ++j) {
    std::vector<double> up = at[wrt].to_vector<double>(), down = up;
    up[j] += eps, down[j] -= eps;
    std::vector<Tensor> a = at, b = at;
    a[wrt] = Tensor::from(up, at[wrt].shape());
    b[wrt] = Tensor::from(down, at[wrt].shape());
    const std::vector<double> fu = f(a)[0].to_vector<double>(), fd = f(b)[0].to_vector<double>();
    std::vector<double> col;
    for (size_t i = 0; i < fu.size(); ++i) col.push_back((fu[i] - fd[i]) / (2 * eps));
    columns.push_back(col);
  }
  for (size_t i = 0; i < columns[0].size(); ++i)
    for (int64_t j = 0; j < n; ++j) out.push_back(columns[j][i]);
  return out;  // row-major: output element, then input element
}

}  // namespace

TEST(Jacobian, OfAnMlpLayerMatchesFiniteDifferences) {
  Var x = vector("x", f64), W = matrix("W", f64), b = vector("b", f64);
  const Var y = tanh(dot(W, x) + b);
  const std::vector<Tensor> at{random_tensor({3}, f64, -1, 1, 1), random_tensor({4, 3}, f64, -1, 1, 2), random_tensor({4}, f64, -1, 1, 3)};
  Function f = function({x, W, b}, {y});
  const Var jx = jacobian(y, x), jW = jacobian(y, W);
  EXPECT_EQ(jx.ndim(), 2);
  EXPECT_EQ(jW.ndim(), 3);
  const std::vector<Tensor> r = eval({x, W, b}, {jx, jW}, at);
  EXPECT_EQ(r[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(r[1].shape(), (Shape{4, 4, 3}));
  expect_values(r[0], numeric_jacobian(f, at, 0), 1e-8);
  expect_values(r[1], numeric_jacobian(f, at, 1), 1e-8);
}

TEST(Jacobian, OfAnRnnsStatesMatchesFiniteDifferences) {
  Var xs = matrix("xs", f64), W = matrix("W", f64), h0 = vector("h0", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[1], W) + a[0])}; },
                      {.sequences = {xs}, .outputs_info = {h0}});
  const std::vector<Tensor> at{random_tensor({4, 3}, f64, -1, 1, 4), random_tensor({3, 3}, f64, -1, 1, 5), random_tensor({3}, f64, -1, 1, 6)};
  Function f = function({xs, W, h0}, {r.outputs[0]});
  const Tensor j = eval1({xs, W, h0}, jacobian(r.outputs[0], W), at);
  EXPECT_EQ(j.shape(), (Shape{4, 3, 3, 3}));
  expect_values(j, numeric_jacobian(f, at, 1), 1e-8);
}

TEST(Jacobian, TheGraphDoesNotGrowWithTheOutputsLength) {
  Var x = vector("x", f64);
  const Var y = sin(x) * x;
  Function small = function({x}, {jacobian(y, x)});
  const int nodes = node_count(small);
  expect_values(small(Tensor::from(std::vector<double>{0.5, 1.0}))[0], {std::sin(0.5) + 0.5 * std::cos(0.5), 0, 0, std::sin(1.0) + std::cos(1.0)}, 1e-12);
  const Tensor big = small(random_tensor({200}, f64, -1, 1, 7))[0];
  EXPECT_EQ(big.shape(), (Shape{200, 200}));
  EXPECT_EQ(node_count(small), nodes);
}

TEST(Hessian, OfAnMlpLossMatchesFiniteDifferencesOfItsGradient) {
  Var w = vector("w", f64);
  const Tensor X = random_tensor({6, 2}, f64, -1, 1, 8);
  const Var W1 = reshape(slice(w, 0, 0, 6), {2, 3}), W2 = slice(w, 0, 6, 9);
  const Var loss = mean(softplus(dot(tanh(dot(constant(X), W1)), W2)));
  const Tensor at = random_tensor({9}, f64, -1, 1, 9);
  Function g = function({w}, {grad(loss, w)});
  const Tensor h = eval1({w}, hessian(loss, w), {at});
  EXPECT_EQ(h.shape(), (Shape{9, 9}));
  expect_values(h, numeric_jacobian(g, {at}, 0), 1e-7);
  expect_error<GradError>([&] { hessian(dot(constant(X), W1), w); }, {"hessian: the cost must be a scalar"});
  Var z = vector("z", f64);
  expect_error<GradError>([&] { jacobian(z * 2.0, w); }, {"jacobian of y f64[?] in x 'w'", "does not depend on", "DisconnectedInputs::zero"});
  expect_values(eval1({z, w}, jacobian(z * 2.0, w, {.disconnected_inputs = DisconnectedInputs::zero}), {Tensor::from(std::vector<double>{1, 2}), at}),
                std::vector<double>(18, 0.0));
}

TEST(Hessian, OfAnRnnLossMatchesFiniteDifferencesOfItsGradient) {
  Var xs = matrix("xs", f64), W = matrix("W", f64), h0 = vector("h0", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[1], W) + a[0])}; },
                      {.sequences = {xs}, .outputs_info = {h0}});
  const Var loss = sum(r.outputs[0] * r.outputs[0]);
  const std::vector<Tensor> at{random_tensor({4, 3}, f64, -1, 1, 10), random_tensor({3, 3}, f64, -1, 1, 11), random_tensor({3}, f64, -1, 1, 12)};
  Function g = function({xs, W, h0}, {grad(loss, W)});
  const Tensor h = eval1({xs, W, h0}, hessian(loss, W), at);
  EXPECT_EQ(h.shape(), (Shape{3, 3, 3, 3}));
  expect_values(h, numeric_jacobian(g, at, 1), 1e-7);
}
