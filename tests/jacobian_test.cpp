// jacobian and hessian (src/grad/jacobian.cpp): built with a loop over the output's elements or vectorized,
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

TEST(Hessian, OfAnMlpLossMatchesFiniteDifferencesOfItsGradientInBothForms) {
  Var w = vector("w", f64);
  const Tensor X = random_tensor({6, 2}, f64, -1, 1, 8);
  const Var W1 = reshape(slice(w, 0, 0, 6), {2, 3}), W2 = slice(w, 0, 6, 9);
  const Var loss = mean(softplus(dot(tanh(dot(constant(X), W1)), W2)));
  const Tensor at = random_tensor({9}, f64, -1, 1, 9);
  Function g = function({w}, {grad(loss, w)});
  const std::vector<Tensor> h = eval({w}, {hessian(loss, w), hessian(loss, w, {.vectorize = true})}, {at});
  EXPECT_EQ(h[0].shape(), (Shape{9, 9}));
  expect_values(h[0], numeric_jacobian(g, {at}, 0), 1e-7);
  expect_values(h[1], h[0].to_vector<double>(), 1e-12);
  expect_error<GradError>([&] { hessian(dot(constant(X), W1), w); }, {"hessian: the cost must be a scalar"});
  Var z = vector("z", f64);
  expect_error<GradError>([&] { hessian(sum(z), w); }, {"hessian: grad:", "DisconnectedInputs::zero"});  // it named grad alone
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

// The vectorized form (JacobianOptions::vectorize): the vector-Jacobian product vectorized over
// the identity's rows (grad/vectorize.cpp), checked against the scan form and finite differences.

namespace {

struct SmallMlp {
  Var X, W1, b1, W2, b2;
  Var out;  // the batch's mean of softmax(tanh(X W1 + b1) W2 + b2): one probability per class
  std::vector<Tensor> at;
};

SmallMlp small_mlp(DType dtype) {
  SmallMlp m{matrix("X", dtype), matrix("W1", dtype), vector("b1", dtype), matrix("W2", dtype), vector("b2", dtype), Var(), {}};
  m.out = mean(softmax(dot(tanh(dot(m.X, m.W1) + m.b1), m.W2) + m.b2), {0});
  m.at = {random_tensor({5, 4}, dtype, -1, 1, 20), random_tensor({4, 6}, dtype, -1, 1, 21), random_tensor({6}, dtype, -1, 1, 22),
          random_tensor({6, 3}, dtype, -1, 1, 23), random_tensor({3}, dtype, -1, 1, 24)};
  return m;
}

}  // namespace

TEST(Jacobian, VectorizedOfAnMlpMatchesTheScanFormAndFiniteDifferences) {
  SmallMlp m = small_mlp(f64);
  const std::vector<Var> in{m.X, m.W1, m.b1, m.W2, m.b2};
  Function f = function(std::vector<In>(in.begin(), in.end()), {m.out});
  for (size_t wrt : {0, 1, 2, 3, 4}) {
    const Var vectorized = jacobian(m.out, in[wrt], {.vectorize = true});
    const std::vector<Tensor> r = eval(in, {vectorized, jacobian(m.out, in[wrt])}, m.at);
    Shape shape{3};
    shape.insert(shape.end(), m.at[wrt].shape().begin(), m.at[wrt].shape().end());
    EXPECT_EQ(r[0].shape(), shape) << "wrt " << wrt;
    expect_values(r[0], r[1].to_vector<double>(), 1e-12);
    expect_values(r[0], numeric_jacobian(f, m.at, wrt), 1e-8);
  }
}

TEST(Jacobian, VectorizedInF32) {
  SmallMlp m = small_mlp(f32);
  const std::vector<Var> in{m.X, m.W1, m.b1, m.W2, m.b2};
  const Var vectorized = jacobian(m.out, m.W1, {.vectorize = true});
  EXPECT_EQ(vectorized.dtype(), f32);
  const std::vector<Tensor> r = eval(in, {vectorized, jacobian(m.out, m.W1)}, m.at);
  EXPECT_EQ(r[0].dtype(), f32);
  expect_values(r[0], r[1].to_vector<double>(), 1e-5);
  std::vector<Tensor> at64;
  for (const Tensor& t : m.at) at64.push_back(t.to(f64));
  SmallMlp m64 = small_mlp(f64);
  Function f = function({m64.X, m64.W1, m64.b1, m64.W2, m64.b2}, {m64.out});
  expect_values(r[0], numeric_jacobian(f, at64, 1), 1e-4);
}

TEST(Jacobian, VectorizedOfAMatrixOutputKeepsItsShape) {
  Var x = vector("x", f64), W = matrix("W", f64);
  const Var y = sigmoid(dimshuffle(x, {0, -1}) * W);
  const std::vector<Tensor> at{random_tensor({3}, f64, -1, 1, 25), random_tensor({3, 2}, f64, -1, 1, 26)};
  Function f = function({x, W}, {y});
  const Tensor j = eval1({x, W}, jacobian(y, x, {.vectorize = true}), at);
  EXPECT_EQ(j.shape(), (Shape{3, 2, 3}));
  expect_values(j, numeric_jacobian(f, at, 0), 1e-8);
  // A y that declares its one element broadcastable: so does the cotangent the product reads.
  const Var one = sum(x * x, {0}, true);
  EXPECT_TRUE(one.type().broadcastable[0]);
  expect_values(eval1({x}, jacobian(one, x, {.vectorize = true}), {at[0]}), [&] {
    std::vector<double> twice;
    for (double v : at[0].to_vector<double>()) twice.push_back(2 * v);
    return twice;
  }(), 1e-12);
}

TEST(Jacobian, VectorizedOfAnRnnLoopsOverTheBatchInsideTheGradient) {
  Var xs = matrix("xs", f64), W = matrix("W", f64), h0 = vector("h0", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[1], W) + a[0])}; },
                      {.sequences = {xs}, .outputs_info = {h0}});
  const std::vector<Tensor> at{random_tensor({4, 3}, f64, -1, 1, 4), random_tensor({3, 3}, f64, -1, 1, 5), random_tensor({3}, f64, -1, 1, 6)};
  Function f = function({xs, W, h0}, {r.outputs[0]});
  const std::vector<Tensor> j = eval({xs, W, h0}, {jacobian(r.outputs[0], W, {.vectorize = true}), jacobian(r.outputs[0], W)}, at);
  EXPECT_EQ(j[0].shape(), (Shape{4, 3, 3, 3}));
  expect_values(j[0], j[1].to_vector<double>(), 1e-12);
  expect_values(j[0], numeric_jacobian(f, at, 1), 1e-8);
}

TEST(Jacobian, VectorizedGraphDoesNotGrowWithTheOutputsLengthEither) {
  Var x = vector("x", f64);
  Function small = function({x}, {jacobian(sin(x) * x, x, {.vectorize = true})});
  const int nodes = node_count(small);
  expect_values(small(Tensor::from(std::vector<double>{0.5, 1.0}))[0], {std::sin(0.5) + 0.5 * std::cos(0.5), 0, 0, std::sin(1.0) + std::cos(1.0)}, 1e-12);
  EXPECT_EQ(small(random_tensor({50}, f64, -1, 1, 7))[0].shape(), (Shape{50, 50}));
  EXPECT_EQ(node_count(small), nodes);
}

TEST(Hessian, VectorizedOfAnMlpLossMatchesTheScanForm) {
  SmallMlp m = small_mlp(f64);
  const Var cost = sum(log(m.out));
  const std::vector<Var> in{m.X, m.W1, m.b1, m.W2, m.b2};
  const std::vector<Tensor> r = eval(in, {hessian(cost, m.W2, {.vectorize = true}), hessian(cost, m.W2)}, m.at);
  EXPECT_EQ(r[0].shape(), (Shape{6, 3, 6, 3}));
  expect_values(r[0], r[1].to_vector<double>(), 1e-10);
}

TEST(Jacobian, OfALoopEndingOnUntilSaysWhatToChange) {
  // Found by a new-user trial: the error named internal nodes (row_range) and nothing to do.
  Var x = vector("x", f64);
  ScanResult r = scan(
      [](const std::vector<Var>& a) {
        const Var next = a[0] * 0.5;
        return std::vector<Var>{next, until(sum(next) < 0.1)};
      },
      {.outputs_info = {Taps(x)}, .n_steps = Var(int64_t{10})});
  Function f = function({x}, {jacobian(flatten(r.outputs[0]), x)});
  expect_error<ShapeError>([&] { f(Tensor::from(std::vector<double>{1, 2})); }, {"until()", "fixed number of steps", "grad or Lop"});
}

TEST(Jacobian, VectorizedErrorsNameTheirForm) {
  Var w = vector("w", f64), z = vector("z", f64);
  expect_error<GradError>([&] { jacobian(z * 2.0, w, {.vectorize = true}); },
                          {"jacobian of y f64[?] in x 'w'", "every element of y at once", "does not depend on", "DisconnectedInputs::zero"});
  expect_error<GradError>([&] { hessian(z * 2.0, w, {.vectorize = true}); }, {"hessian: the cost must be a scalar"});
  expect_error<GradError>([&] { jacobian(cast(z, i64), z, {.vectorize = true}); }, {"jacobian: y must be a float value"});
  const Var zero = jacobian(z * 2.0, w, {.vectorize = true, .grad = {.disconnected_inputs = DisconnectedInputs::zero}});
  const Tensor j = eval1({z, w}, zero, {Tensor::from(std::vector<double>{1, 2}), Tensor::from(std::vector<double>{1, 2, 3})});
  EXPECT_EQ(j.shape(), (Shape{2, 3}));
  expect_values(j, std::vector<double>(6, 0.0));
  // A 0-d y is its gradient.
  expect_values(eval1({w}, jacobian(sum(w * w), w, {.vectorize = true}), {Tensor::from(std::vector<double>{1, 2, 3})}), {2, 4, 6});
}
