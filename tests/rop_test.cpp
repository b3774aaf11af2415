// Forward mode (src/grad/rop.cpp): Jacobian-vector products checked against directional finite
// differences, against the reverse mode (<Rop v, u> = <v, Lop u>), and the products built from
// both (Hessian-vector, Gauss-Newton).
#include "random_graphs.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

double inner(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

}  // namespace

TEST(Rop, MatchesDirectionalFiniteDifferencesOpByOp) {
  using Fn = std::function<Var(std::vector<Var>)>;
  const Tensor m = random_tensor({3, 4}, f64, -1, 1, 1), w = random_tensor({4, 2}, f64, -1, 1, 2), v = random_tensor({4}, f64, -1, 1, 3);
  const std::vector<std::pair<Fn, std::vector<Tensor>>> cases{
      {[](std::vector<Var> a) { return tanh(a[0]) * a[0] + exp(a[0] * 0.5) / (1.0 + a[0] * a[0]); }, {m}},
      {[](std::vector<Var> a) { return dot(a[0], a[1]); }, {m, w}},
      {[](std::vector<Var> a) { return a[0] * a[1]; }, {m, v}},  // broadcasting
      {[](std::vector<Var> a) { return softmax(a[0]); }, {m}},
      {[](std::vector<Var> a) { return log_softmax(a[0]); }, {m}},
      {[](std::vector<Var> a) { return sum(a[0], {1}) + max(a[0], {1}) + mean(a[0], {1}); }, {m}},
      {[](std::vector<Var> a) { return logsumexp(a[0], {0}); }, {m}},
      {[](std::vector<Var> a) { return transpose(a[0])[VarIndex(1)] + reshape(a[0], {4, 3})[VarIndex(2)]; }, {m}},
      {[](std::vector<Var> a) { return take(a[0], constant(Tensor::from<int64_t>({2, 0, 2}, {3}))); }, {m}},
      {[](std::vector<Var> a) { return concatenate({a[0], a[0] * 2.0}, 1); }, {m}},
      {[](std::vector<Var> a) { return inc_subtensor(slice(a[0], 1, 1, 3), slice(a[0][VarIndex(0)], 0, 1, 3)); }, {m}},
      {[](std::vector<Var> a) { return categorical_crossentropy(softmax(a[0]), constant(Tensor::from<int64_t>({1, 3, 0}, {3}))); }, {m}},
      {[](std::vector<Var> a) { return ifelse(sum(a[0]) > 0.0, a[0] * 3.0, sin(a[0])); }, {m}},
      {[](std::vector<Var> a) { return sigmoid(a[0]) + softplus(a[0]) + abs(a[0]) + sqrt(1.0 + a[0] * a[0]); }, {m}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    verify_rop(cases[i].first, cases[i].second);
  }
}

TEST(Rop, IsTheTransposeOfLopOnRandomGraphs) {
  // <J v, u> = <v, J^T u> for random graphs of the fuzzers' ops.
  int checked = 0;
  for (uint32_t seed = 1; seed <= 25; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    Var a = matrix("A", f64), b = matrix("B", f64), x = vector("x", f64);
    RandomGraph g(seed, {{a, {4, 5}}, {b, {4, 5}}, {x, {5}}});
    for (int i = 0; i < 12; ++i) g.step();
    const Value y = g.pool().back();
    if (!is_float(y.var.dtype())) continue;
    Var da = matrix("dA", f64), db = matrix("dB", f64), dx = vector("dx", f64), u = tensor(y.var.dtype(), y.var.type().broadcastable, "u");
    const GradOptions zero{.disconnected_inputs = DisconnectedInputs::zero};
    const Var jv = Rop({y.var}, {a, b, x}, {da, db, dx}, zero)[0];
    const std::vector<Var> jtu = Lop({y.var}, {a, b, x}, {u}, zero);
    const std::vector<Tensor> at{random_tensor({4, 5}, f64, -1, 1, seed), random_tensor({4, 5}, f64, -1, 1, seed + 100), random_tensor({5}, f64, -1, 1, seed + 200)};
    const std::vector<Tensor> dirs{random_tensor({4, 5}, f64, -1, 1, seed + 300), random_tensor({4, 5}, f64, -1, 1, seed + 400), random_tensor({5}, f64, -1, 1, seed + 500)};
    const Tensor uv = random_tensor(y.shape, y.var.dtype(), -1, 1, seed + 600);
    const std::vector<Tensor> r = eval({a, b, x, da, db, dx, u}, {jv, jtu[0], jtu[1], jtu[2]}, {at[0], at[1], at[2], dirs[0], dirs[1], dirs[2], uv});
    const double left = inner(r[0], uv), right = inner(dirs[0], r[1]) + inner(dirs[1], r[2]) + inner(dirs[2], r[3]);
    // Exact but for rounding: some graphs round values through f32 (the fuzzers' cast op).
    EXPECT_NEAR(left, right, 1e-6 * std::max(1.0, std::fabs(left))) << y.var.type().str();
    ++checked;
  }
  EXPECT_GE(checked, 20);
}

TEST(Rop, HessianVectorProductsAndGaussNewtonProducts) {
  // A one-hidden-layer network's loss as a function of its flat weights w.
  Var w = vector("w", f64), v = vector("v", f64);
  const Tensor X = random_tensor({5, 3}, f64, -1, 1, 7);
  const Var W1 = reshape(slice(w, 0, 0, 12), {3, 4}), W2 = reshape(slice(w, 0, 12, 20), {4, 2});
  const Var f = dot(tanh(dot(constant(X), W1)), W2);  // the network's outputs, 5 x 2
  const Var loss = sum(f * f) * 0.5;
  const Tensor wv = random_tensor({20}, f64, -1, 1, 8), vv = random_tensor({20}, f64, -1, 1, 9);
  // Pearlmutter: R{grad} = H v, against the Hessian built with scan.
  const Var hv = Rop({grad(loss, w)}, {w}, {v})[0];
  const Var H = hessian(loss, w);
  const std::vector<Tensor> r = eval({w, v}, {hv, dot(H, v), H}, {wv, vv});
  expect_values(r[0], r[1].to_vector<double>(), 1e-10);
  // H is symmetric, and its rows are finite differences of the gradient.
  const std::vector<double> h = r[2].to_vector<double>();
  for (int i = 0; i < 20; ++i)
    for (int j = 0; j < 20; ++j) EXPECT_NEAR(h[i * 20 + j], h[j * 20 + i], 1e-10);
  Function g = function({w}, {grad(loss, w)});
  const double eps = 1e-6;
  for (int j = 0; j < 20; j += 7) {
    std::vector<double> up = wv.to_vector<double>(), down = up;
    up[j] += eps, down[j] -= eps;
    const std::vector<double> gu = g(Tensor::from(up))[0].to_vector<double>(), gd = g(Tensor::from(down))[0].to_vector<double>();
    for (int i = 0; i < 20; ++i) EXPECT_NEAR(h[i * 20 + j], (gu[i] - gd[i]) / (2 * eps), 1e-6);
  }
  // Gauss-Newton: J^T (J v) in two passes, against the Jacobian built with scan.
  const Var gv = Lop({f}, {w}, {Rop({f}, {w}, {v})[0]})[0];
  const Var J = reshape(jacobian(f, w), {10, 20});
  const std::vector<Tensor> q = eval({w, v}, {gv, dot(transpose(J), dot(J, v))}, {wv, vv});
  expect_values(q[0], q[1].to_vector<double>(), 1e-10);
}

TEST(Rop, ThroughALoop) {
  // An Elman recurrence: the tangent of every state, against finite differences.
  verify_rop(
      [](std::vector<Var> a) {
        ScanResult r = scan([&](const std::vector<Var>& s) { return std::vector<Var>{tanh(dot(s[1], a[1]) + s[0])}; },
                            {.sequences = {a[0]}, .outputs_info = {a[2]}});
        return r.outputs[0];
      },
      {random_tensor({5, 3}, f64, -1, 1, 11), random_tensor({3, 3}, f64, -1, 1, 12), random_tensor({3}, f64, -1, 1, 13)});
}

TEST(Rop, BadEvalPointsAndDisconnectedOutputsAreClearErrors) {
  Var x = matrix("x", f64), y = matrix("y", f64), v = vector("v", f64);
  expect_error<GradError>([&] { Rop({tanh(x)}, {x}, {v}); }, {"Rop: eval point 0", "f64[?]", "'x'", "same rank"});
  expect_error<GradError>([&] { Rop({tanh(x)}, {x}, {}); }, {"1 wrt but 0 eval points"});
  // Of the right rank but another shape: broadcasting would take it silently; the call says so.
  Var m = matrix("m", f64);
  Function f = function({x, m}, {Rop({tanh(x)}, {x}, {m})[0]});
  expect_error<ShapeError>([&] { f(Tensor::ones({2, 3}, f64), Tensor::ones({1, 3}, f64)); },
                           {"Rop: eval point 0 (for wrt[0] 'x') has shape (1,3) but must have shape (2,3)", "rop_test.cpp"});
  expect_values(f(Tensor::zeros({1, 2}, f64), Tensor::ones({1, 2}, f64))[0], {1, 1});
  expect_error<GradError>([&] { Rop({tanh(y)}, {x}, {x}); }, {"does not depend on any wrt", "DisconnectedInputs::zero"});
  const Var zero = Rop({tanh(y)}, {x}, {x}, {.disconnected_inputs = DisconnectedInputs::zero})[0];
  expect_values(eval1({x, y}, zero, {Tensor::ones({2, 2}, f64), Tensor::ones({2, 2}, f64)}), {0, 0, 0, 0});
  Var i = vector("i", i64);
  expect_error<GradError>([&] { Rop({x}, {i}, {v}); }, {"integer and boolean values have no derivative"});
  // An integer value on the way (argmax) carries no tangent: what follows it is disconnected.
  Var w = vector("w", f64);
  expect_error<GradError>([&] { Rop({cast(argmax(w, {0}), f64)}, {w}, {w}); }, {"does not depend on any wrt"});
  const Var through_argmax = Rop({cast(argmax(w, {0}), f64) + w}, {w}, {w})[0];
  expect_values(eval1({w}, through_argmax, {Tensor::from(std::vector<double>{1, 3})}), {1, 3});
}

TEST(Rop, VerifyRopReportsAProductThatDiffersFromFiniteDifferences) {
  // At the kink of 3x (x > 0) / x (otherwise), differences across it see slope 2; the symbolic
  // product takes the branch the point is on (slope 1).
  expect_error<GradError>([] { verify_rop([](std::vector<Var> a) { return ifelse(sum(a[0]) > 0.0, a[0] * 3.0, a[0]); }, {Tensor::zeros({1}, f64)}); },
                          {"verify_rop: the Jacobian-vector product at output element 0", "differs from finite differences"});
}

TEST(Rop, ChainsWithAStableFormCarryFiniteTangentsAtLargeValues) {
  // exp(1000) overflows; the tangent of log(1 + exp(x)) is carried through softplus instead.
  Var x = vector("x", f64), v = vector("v", f64);
  const Var y = log(1.0 + exp(x)) + log(sigmoid(x));
  const Tensor t = eval1({x, v}, Rop({y}, {x}, {v})[0], {Tensor::from(std::vector<double>{1000, -1000, 0}), Tensor::from(std::vector<double>{2, 3, 4})});
  expect_values(t, {2, 3, 4}, 1e-12);  // (sigmoid(x) + 1 - sigmoid(x)) v
}

TEST(Rop, AGaussNewtonProductPlansLittleMoreThanAGradient) {
  // Of an MLP at a large batch, the forward tangent of the hidden layer is the only value a
  // Gauss-Newton product holds beyond what a gradient holds; fill(x, v) in the transposed
  // products reads x for its shape alone, so x's buffer is free before it (Op::shape_only_inputs).
  Var x = matrix("x"), y = vector("y", i64), W1 = matrix("W1"), b1 = vector("b1"), W2 = matrix("W2"), b2 = vector("b2");
  Var v1 = matrix("v1"), c1 = vector("c1"), v2 = matrix("v2"), c2 = vector("c2");
  const Var logits = dot(tanh(dot(x, W1) + b1), W2) + b2;
  const Var loss = mean(categorical_crossentropy(softmax(logits), y));
  const std::vector<Var> params{W1, b1, W2, b2}, v{v1, c1, v2, c2};
  const Var jv = Rop({logits}, params, v)[0];
  const Var p = softmax(logits);
  const std::vector<Var> gn = Lop({logits}, params, {(p * jv - p * sum(p * jv, {1}, true)) / 1000.0});
  const std::vector<Var> g = grad(loss, params);
  std::vector<Var> inputs{x, y};
  inputs.insert(inputs.end(), params.begin(), params.end());
  inputs.insert(inputs.end(), v.begin(), v.end());
  const std::vector<Shape> shapes{{1000, 64}, {1000}, {64, 48}, {48}, {48, 4}, {4}, {64, 48}, {48}, {48, 4}, {4}};
  auto peak = [&](const std::vector<Var>& outputs) {
    return function(std::vector<In>(inputs.begin(), inputs.end()), std::vector<Out>(outputs.begin(), outputs.end()), {.allow_unused_inputs = true})
        .memory_report(shapes)
        .planned_peak_bytes;
  };
  EXPECT_LE(static_cast<double>(peak(gn)), 1.5 * static_cast<double>(peak(g)));
}
