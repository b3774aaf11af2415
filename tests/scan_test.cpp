#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

using Body = std::function<std::vector<Var>(const std::vector<Var>&)>;

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

Tensor f64_vector(std::vector<double> v) { return Tensor::from(v); }

// Both derivatives of a loop: the gradient (the loop run backwards) and the Jacobian-vector
// product (a loop carrying tangents), each against finite differences.
void verify_grad_and_rop(const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at) {
  verify_grad(fn, at);
  verify_rop(fn, at);
}

}  // namespace

// ---- The loop ----

TEST(Scan, CumulativeSumOverASequence) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {.sequences = {x}, .outputs_info = {s0}});
  expect_values(eval1({x, s0}, r.outputs[0], {f64_vector({1, 2, 3, 4}), Tensor::scalar(10.0)}), {11, 13, 16, 20});
}

TEST(Scan, GoBackwardsReadsTheLastRowFirst) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + 2.0 * a[1]}; },
                      {.sequences = {x}, .outputs_info = {s0}, .go_backwards = true});
  // 4, 3 + 8, 2 + 22, 1 + 48
  expect_values(eval1({x, s0}, r.outputs[0], {f64_vector({1, 2, 3, 4}), Tensor::scalar(0.0)}), {4, 11, 24, 49});
}

TEST(Scan, GoBackwardsReversesEachSequenceThenRunsToTheShortest) {
  // Theano's order (scan_module/scan.py): each sequence is reversed, then cut to the steps run, so
  // every sequence is read from its own last row.
  Var xs = vector("xs", f64), ys = vector("ys", f64);
  ScanResult both = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 10.0 + a[1]}; },
                         {.sequences = {xs, ys}, .outputs_info = {std::nullopt}, .go_backwards = true});
  expect_values(eval1({xs, ys}, both.outputs[0], {f64_vector({1, 2, 3, 4}), f64_vector({5, 6})}), {46, 35});
  ScanResult two = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 1.0}; },
                        {.sequences = {xs}, .outputs_info = {std::nullopt}, .n_steps = Var(int64_t{2}), .go_backwards = true});
  expect_values(eval1({xs}, two.outputs[0], {f64_vector({1, 2, 3, 4})}), {4, 3});
}

TEST(Scan, OutputTapsReachBackSeveralSteps) {
  Var init = vector("init", f64), n = scalar("n", i64);
  ScanResult fib = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; },
                        {.outputs_info = {Taps{init, {-2, -1}}}, .n_steps = n});
  expect_values(eval1({init, n}, fib.outputs[0], {f64_vector({0, 1}), Tensor::scalar(int64_t{8})}), {1, 2, 3, 5, 8, 13, 21, 34});
  // An initial value with more rows than the taps reach: its last rows are the steps before.
  expect_values(eval1({init, n}, fib.outputs[0], {f64_vector({100, 2, 3}), Tensor::scalar(int64_t{3})}), {5, 8, 13});
  // Taps given in any order: the body receives them in the order given.
  ScanResult lag = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] - a[1]}; },
                        {.outputs_info = {Taps{init, {-1, -2}}}, .n_steps = n});
  // y[t] = y[t-1] - y[t-2] from (2, 5): 3, -2, -5
  expect_values(eval1({init, n}, lag.outputs[0], {f64_vector({2, 5}), Tensor::scalar(int64_t{3})}), {3, -2, -5});
}

TEST(Scan, SequenceTapsReadAWindow) {
  Var x = vector("x", f64);
  ScanResult r = map([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + 10.0 * a[1] + 100.0 * a[2]}; },
                     {SeqTaps{x, {-1, 0, 1}}});
  // Steps run while every tap has a row: t = 1 .. 3 of 5 rows.
  expect_values(eval1({x}, r.outputs[0], {f64_vector({1, 2, 3, 4, 5})}), {321, 432, 543});
}

TEST(Scan, RunsToTheShortestSequence) {
  Var x = vector("x", f64), y = vector("y", f64);
  ScanResult r = map([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * a[1]}; }, {x, y});
  expect_values(eval1({x, y}, r.outputs[0], {f64_vector({1, 2, 3, 4}), f64_vector({5, 6})}), {5, 12});
}

TEST(Scan, OutputsNotFedBackAndSeveralOutputs) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult r = scan(
      [](const std::vector<Var>& a) {
        Var sum = a[0] + a[1];
        return std::vector<Var>{sum, sum * sum};
      },
      {.sequences = {x}, .outputs_info = {s0, std::nullopt}});
  std::vector<Tensor> out = eval({x, s0}, r.outputs, {f64_vector({1, 2, 3}), Tensor::scalar(0.0)});
  expect_values(out[0], {1, 3, 6});
  expect_values(out[1], {1, 9, 36});
}

TEST(Scan, NonSequencesAndCapturedValuesReachEveryStep) {
  Var x = vector("x", f64), w = scalar("w", f64), c = scalar("c", f64);
  ScanResult r = map([&](const std::vector<Var>& a) { return std::vector<Var>{a[0] * a[1] + c}; }, {x}, {w});
  expect_values(eval1({x, w, c}, r.outputs[0], {f64_vector({1, 2, 3}), Tensor::scalar(2.0), Tensor::scalar(0.5)}), {2.5, 4.5, 6.5});
}

TEST(Scan, MatrixStateElmanNetwork) {
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[1], W) + a[0])}; },
                      {.sequences = {X}, .outputs_info = {h0}});
  const Tensor xv = random_tensor({4, 3}, f64, -1, 1, 1), wv = random_tensor({3, 3}, f64, -1, 1, 2);
  const Tensor got = eval1({X, h0, W}, r.outputs[0], {xv, Tensor::zeros({3}, f64), wv});
  std::vector<double> h(3, 0.0), expected;
  const std::vector<double> xs = values(xv), ws = values(wv);
  for (int t = 0; t < 4; ++t) {
    std::vector<double> next(3);
    for (int j = 0; j < 3; ++j) {
      double acc = xs[t * 3 + j];
      for (int i = 0; i < 3; ++i) acc += h[i] * ws[i * 3 + j];
      next[j] = std::tanh(acc);
    }
    h = next;
    expected.insert(expected.end(), h.begin(), h.end());
  }
  expect_values(got, expected, 1e-12);
}

TEST(Scan, UntilStopsAfterTheStepWhereItHolds) {
  Var one = scalar("one", f64), lim = scalar("lim", f64);
  ScanResult r = scan(
      [](const std::vector<Var>& a) {
        Var v = a[0] * 2.0;
        return std::vector<Var>{v, until(v > a[1])};
      },
      {.outputs_info = {Taps{one}}, .non_sequences = {lim}, .n_steps = 100});
  Function f = function({one, lim}, {r.outputs[0]});
  expect_values(f(Tensor::scalar(1.0), Tensor::scalar(100.0))[0], {2, 4, 8, 16, 32, 64, 128});
  expect_values(f(Tensor::scalar(1.0), Tensor::scalar(1.0))[0], {2});
  // The condition never holds: n_steps bounds the loop.
  EXPECT_EQ(f(Tensor::scalar(1.0), Tensor::scalar(1e300))[0].shape(), (Shape{100}));
}

TEST(Scan, SharedVariableUpdatedEveryStep) {
  Shared acc = shared(Tensor::scalar(0.0), "acc");
  Var xs = vector("xs", f64);
  ScanResult r = scan(
      [&](const std::vector<Var>& a) {
        scan_update(acc, acc + a[0]);
        return std::vector<Var>{a[0] * 2.0 + acc};
      },
      {.sequences = {xs}});
  Function f = function({xs}, {r.outputs[0]}, {.updates = r.updates});
  // The body reads acc before the step's update: 0, 1, 3.
  expect_values(f(f64_vector({1, 2, 3}))[0], {2, 5, 9});
  expect_values(acc.get_value(), {6});
  f(f64_vector({1, 2, 3}));
  expect_values(acc.get_value(), {12});
}

TEST(Scan, ReduceFoldlFoldrAndNoStep) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  Body sub = [](const std::vector<Var>& a) { return std::vector<Var>{a[1] * 10.0 + a[0]}; };
  Var left = foldl(sub, {x}, {s0}).outputs[0], right = foldr(sub, {x}, {s0}).outputs[0];
  Var total = reduce([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {x}, {s0}).outputs[0];
  std::vector<Tensor> out = eval({x, s0}, {left, right, total}, {f64_vector({1, 2, 3}), Tensor::scalar(0.0)});
  expect_values(out[0], {123});
  expect_values(out[1], {321});
  expect_values(out[2], {6});
  // No step at all: the initial value comes back, the stacked outputs are empty.
  ScanResult none = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {.sequences = {x}, .outputs_info = {s0}});
  out = eval({x, s0}, {total, none.outputs[0]}, {Tensor::from(std::vector<double>{}), Tensor::scalar(7.0)});
  expect_values(out[0], {7});
  EXPECT_EQ(out[1].shape(), (Shape{0}));
}

TEST(Scan, NestedScan) {
  Var X = matrix("X", f64);
  // The sum of each row by an inner scan, then a running total of the rows' sums.
  ScanResult r = scan(
      [](const std::vector<Var>& a) {
        Var row_sum = reduce([](const std::vector<Var>& b) { return std::vector<Var>{b[0] + b[1]}; }, {a[0]},
                             {constant(Tensor::scalar(0.0))})
                          .outputs[0];
        return std::vector<Var>{a[1] + row_sum};
      },
      {.sequences = {X}, .outputs_info = {constant(Tensor::scalar(0.0))}});
  expect_values(eval1({X}, r.outputs[0], {Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2})}), {3, 10, 21});
}

TEST(Scan, IfelseInsideTheBody) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{ifelse(a[0] > 0.0, a[1] + a[0], a[1] * 0.5)}; },
                      {.sequences = {x}, .outputs_info = {s0}});
  // 4 + 2, 6 * 0.5, 3 + 1, 4 * 0.5
  expect_values(eval1({x, s0}, r.outputs[0], {f64_vector({2, -1, 1, -3}), Tensor::scalar(4.0)}), {6, 3, 4, 2});
}

TEST(Scan, ZeroStepsKeepTheTrailingShape) {
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(a[0] + dot(a[1], W)), dot(a[0], W)}; },
                      {.sequences = {X}, .outputs_info = {h0, std::nullopt}});
  std::vector<Tensor> out = eval({X, h0, W}, {r.outputs[0], r.outputs[1]}, {Tensor::zeros({0, 3}, f64), Tensor::zeros({3}, f64), Tensor::zeros({3, 3}, f64)});
  EXPECT_EQ(out[0].shape(), (Shape{0, 3}));
  EXPECT_EQ(out[1].shape(), (Shape{0, 3}));
  ScanResult mapped = map([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 2.0}; }, {X});
  EXPECT_EQ(eval1({X}, mapped.outputs[0], {Tensor::zeros({0, 4}, f64)}).shape(), (Shape{0, 4}));
}

TEST(Scan, ABodyReshapesToAConstantShape) {
  Var m = matrix("m", f64);
  Tensor rows = Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {2, 3});
  Body column = [](const std::vector<Var>& a) { return std::vector<Var>{reshape(a[0], {3, 1})}; };
  Tensor columns = eval1({m}, map(column, {m}).outputs[0], {rows});
  EXPECT_EQ(columns.shape(), (Shape{2, 3, 1}));
  expect_values(columns, {1, 2, 3, 4, 5, 6});
  // Flattening (to a constant -1, by flatten, and inside cumsum and repeat with no axis).
  Body flat = [](const std::vector<Var>& a) {
    return std::vector<Var>{reshape(a[0], {-1}), flatten(a[0]), cumsum(a[0]), repeat(a[0], 2)};
  };
  Var two_d = tensor3("two_d", f64);
  ScanResult r = map(flat, {two_d});
  std::vector<Tensor> out = eval({two_d}, r.outputs, {Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})});
  expect_values(out[0], {1, 2, 3, 4, 5, 6, 7, 8});
  expect_values(out[1], {1, 2, 3, 4, 5, 6, 7, 8});
  expect_values(out[2], {1, 3, 6, 10, 5, 11, 18, 26});
  expect_values(out[3], {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8});
}

TEST(Scan, EachStepDrawsFreshRandomNumbers) {
  RandomStreams rng(5);
  ScanResult r = scan([&](const std::vector<Var>&) { return std::vector<Var>{rng.uniform({3}, 0.0, 1.0, f64)}; },
                      {.outputs_info = {std::nullopt}, .n_steps = Var(int64_t{4})});
  ASSERT_EQ(r.updates.size(), 1u);  // the stream's state after the last step
  EXPECT_TRUE(r.updates[0].first.same(rng.states()[0]));
  Function f = function({}, {r.outputs[0]}, {.updates = r.updates});
  const std::vector<double> first = values(f({})[0]), second = values(f({})[0]);
  auto rows_differ = [](const std::vector<double>& v) {
    for (size_t t = 1; t < 4; ++t)
      if (std::equal(v.begin(), v.begin() + 3, v.begin() + static_cast<int64_t>(3 * t))) return false;
    return true;
  };
  EXPECT_TRUE(rows_differ(first));
  EXPECT_NE(first, second);
  // A draw shaped by the step's row (a dropout mask per row), and draws in a nested loop: each
  // outer step starts the inner loop where the last one left the stream.
  Var m = matrix("m", f64);
  ScanResult masks = map([&](const std::vector<Var>& a) { return std::vector<Var>{a[0] * rng.binomial(shape_of(a[0]), 1, 0.5, f64)}; }, {m});
  ASSERT_EQ(masks.updates.size(), 1u);
  const std::vector<double> mask = values(function({m}, {masks.outputs[0]}, {.updates = masks.updates})(Tensor::ones({4, 16}, f64))[0]);
  EXPECT_FALSE(std::equal(mask.begin(), mask.begin() + 16, mask.begin() + 16));
  ScanResult nested = scan(
      [&](const std::vector<Var>&) {
        return map([&](const std::vector<Var>& b) { return std::vector<Var>{b[0] + rng.normal({2}, 0.0, 1.0, f64)}; },
                   {constant(Tensor::zeros({2, 2}, f64))})
            .outputs;
      },
      {.outputs_info = {std::nullopt}, .n_steps = Var(int64_t{2})});
  ASSERT_EQ(nested.updates.size(), 1u);
  const std::vector<double> draws = values(function({}, {nested.outputs[0]}, {.updates = nested.updates})({})[0]);
  ASSERT_EQ(draws.size(), 8u);
  EXPECT_FALSE(std::equal(draws.begin(), draws.begin() + 4, draws.begin() + 4));
  EXPECT_FALSE(std::equal(draws.begin(), draws.begin() + 2, draws.begin() + 2));
}

TEST(Scan, ADrawMadeBeforeTheBodyIsTheSameAtEveryStep) {
  // A value captured by the body is passed to every step unchanged, a draw too (the trial after
  // the fix above found it redrawn per step, and so the scan-form jacobian of x * u wrong past its
  // first row).
  RandomStreams rng(6);
  const Var u = rng.uniform({3}, 0.0, 1.0, f64);
  ScanResult r = scan([&](const std::vector<Var>&) { return std::vector<Var>{u * 1.0}; },
                      {.outputs_info = {std::nullopt}, .n_steps = Var(int64_t{3})});
  EXPECT_TRUE(r.updates.empty());
  const std::vector<Tensor> out = function({}, {r.outputs[0], u})({});
  const std::vector<double> rows = values(out[0]), drawn = values(out[1]);
  for (size_t t = 0; t < 3; ++t) EXPECT_EQ(std::vector<double>(rows.begin() + 3 * t, rows.begin() + 3 * (t + 1)), drawn) << "row " << t;
  Var x = vector("x", f64);
  const std::vector<Tensor> j = function({x}, {jacobian(x * u, x), u})({Tensor::from(std::vector<double>{1, 2, 3})});
  const std::vector<double> jv = values(j[0]), uv = values(j[1]);
  for (size_t i = 0; i < 3; ++i) EXPECT_DOUBLE_EQ(jv[i * 3 + i], uv[i]) << "diagonal " << i;
}

// ---- Errors ----

TEST(ScanErrors, BadBodiesAndArgumentsAreNamed) {
  Var x = vector("x", f64), s0 = scalar("s0", f64), s32 = scalar("s32", f32);
  auto throws = [](const std::function<void()>& build, const std::string& part) {
    try {
      build();
      ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  throws([&] { scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; }, {}); }, "give n_steps or at least one sequence");
  throws([&] { scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0], a[0]}; }, {.sequences = {x}, .outputs_info = {s0}}); },
         "returned 2 values");
  throws([&] { scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {.sequences = {x}, .outputs_info = {s32}}); },
         "cast(");
  throws([&] { scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; }, {.outputs_info = {Taps{x, {0}}}, .n_steps = 3}); },
         "earlier steps");
  throws([&] { scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; }, {.outputs_info = {Taps{s0, {-2}}}, .n_steps = 3}); },
         "needs that many rows");
  throws([&] { scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * 2.0}; }, {.outputs_info = {s0}, .n_steps = Var(2.7)}); },
         "n_steps must be an integer scalar");
  throws([&] { until(s0 > 1.0); }, "only a scan's body");
  throws([&] { scan_update(shared(Tensor::scalar(0.0)), s0); }, "only a scan's body");
  throws(
      [&] {
        scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0], until(a[0] > 1.0) * 1.0}; }, {.sequences = {x}});
      },
      "did not return it last");
  try {
    scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0]}; }, {.sequences = {x}, .outputs_info = {s32}});
    ADD_FAILURE() << "no error";
  } catch (const TypeError& e) {
    EXPECT_NE(std::string(e.what()).find("scan_test.cpp"), std::string::npos) << "names the user's line: " << e.what();
  }
}

TEST(ScanErrors, ShapesKnownAtRunTimeAreChecked) {
  Var x = vector("x", f64), n = scalar("n", i64), h0 = vector("h0", f64), s0 = scalar("s0", f64);
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; },
                      {.sequences = {x}, .outputs_info = {s0}, .n_steps = n});
  Function f = function({x, n, s0}, {r.outputs[0]});
  EXPECT_THROW(f(f64_vector({1, 2}), Tensor::scalar(int64_t{3}), Tensor::scalar(0.0)), ShapeError);
  EXPECT_THROW(f(f64_vector({1, 2}), Tensor::scalar(int64_t{-1}), Tensor::scalar(0.0)), ShapeError);
  // The body changes the shape of what it feeds back.
  ScanResult grows = scan([](const std::vector<Var>& a) { return std::vector<Var>{concatenate({a[0], a[0]})}; },
                          {.outputs_info = {h0}, .n_steps = 2});
  Function g = function({h0}, {grows.outputs[0]});
  try {
    g(f64_vector({1, 2}));
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("fed back"), std::string::npos) << e.what();
  }
  // An initial value with fewer rows than its taps reach back.
  Var init = vector("init", f64);
  ScanResult fib = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; },
                        {.outputs_info = {Taps{init, {-3, -1}}}, .n_steps = 2});
  try {
    eval1({init}, fib.outputs[0], {f64_vector({1, 2})});
    ADD_FAILURE() << "no error";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("must hold 3 rows"), std::string::npos) << e.what();
  }
  // until on a value that is not a scalar
  EXPECT_THROW(scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0], until(a[0] > 0.0)}; }, {.sequences = {matrix("M", f64)}}),
               TypeError);
  // A sequence shorter than its taps' spread allows no step, as Theano's slices of it are empty
  // (it was an error for mixed taps, with the rows of another sequence in the message, and 0 steps
  // for taps on one side); with n_steps given, the loop says how many steps the rows allow.
  ScanResult window = map([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; }, {SeqTaps{x, {0, 3}}});
  ScanResult counted = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; },
                            {.sequences = {SeqTaps{x, {-2, 0}}}, .n_steps = Var(int64_t{1})});
  for (Mode mode : {plain_mode(), Mode::fast_run()}) {
    EXPECT_EQ(function({x}, {window.outputs[0]}, {.mode = mode})(f64_vector({1, 2}))[0].numel(), 0) << mode.name();
    expect_error<ShapeError>([&] { function({x}, {counted.outputs[0]}, {.mode = mode})(f64_vector({1, 2})); },
                             {"n_steps is 1", "only 0 steps"});
  }
}

// ---- Gradients (back-propagation through time), against finite differences ----

TEST(ScanGrad, ElmanNetwork) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        const Var &X = v[0], &h0 = v[1], &W = v[2], &U = v[3], &b = v[4];
        ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W) + dot(a[1], U) + b)}; },
                            {.sequences = {X}, .outputs_info = {h0}});
        return r.outputs[0];
      },
      {random_tensor({5, 3}, f64, -1, 1, 1), random_tensor({4}, f64, -1, 1, 2), random_tensor({3, 4}, f64, -1, 1, 3),
       random_tensor({4, 4}, f64, -1, 1, 4), random_tensor({4}, f64, -1, 1, 5)});
}

TEST(ScanGrad, TwoTapRecurrenceReachesTheInitialRows) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        const Var &x = v[0], &init = v[1], &a = v[2], &b = v[3];
        ScanResult r = scan([&](const std::vector<Var>& in) { return std::vector<Var>{a * in[1] + b * tanh(in[2]) + in[0]}; },
                            {.sequences = {x}, .outputs_info = {Taps{init, {-2, -1}}}});
        return r.outputs[0];
      },
      {random_tensor({6}, f64, -1, 1, 1), random_tensor({3}, f64, -1, 1, 2), Tensor::scalar(0.7), Tensor::scalar(-0.4)});
}

TEST(ScanGrad, SequenceTapsAndOutputsNotFedBack) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        const Var &x = v[0], &s0 = v[1];
        ScanResult r = scan(
            [](const std::vector<Var>& a) {
              Var s = a[2] * a[0] + sin(a[1]);
              return std::vector<Var>{s, s * a[1]};
            },
            {.sequences = {SeqTaps{x, {-1, 1}}}, .outputs_info = {s0, std::nullopt}});
        return r.outputs[0] + r.outputs[1];
      },
      {random_tensor({6}, f64, -1, 1, 1), Tensor::scalar(0.3)});
}

TEST(ScanGrad, LstmCell) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        const Var &X = v[0], &W = v[1], &U = v[2], &h0 = v[3], &c0 = v[4];
        ScanResult r = scan(
            [&](const std::vector<Var>& a) {
              const Var z = dot(a[0], W) + dot(a[1], U);  // 4 gates of width 3 side by side
              const Var i = sigmoid(slice(z, 0, 0, 3)), f = sigmoid(slice(z, 0, 3, 6)), o = sigmoid(slice(z, 0, 6, 9));
              const Var g = tanh(slice(z, 0, 9, 12));
              const Var c = f * a[2] + i * g;
              return std::vector<Var>{o * tanh(c), c};
            },
            {.sequences = {X}, .outputs_info = {Taps{h0}, Taps{c0}}});
        return r.outputs[0];
      },
      {random_tensor({4, 2}, f64, -1, 1, 1), random_tensor({2, 12}, f64, -1, 1, 2), random_tensor({3, 12}, f64, -1, 1, 3),
       random_tensor({3}, f64, -1, 1, 4), random_tensor({3}, f64, -1, 1, 5)});
}

TEST(ScanGrad, GoBackwardsAndReduce) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        Var back = scan([&](const std::vector<Var>& a) { return std::vector<Var>{a[1] * v[2] + a[0] * a[0]}; },
                        {.sequences = {v[0]}, .outputs_info = {v[1]}, .go_backwards = true})
                       .outputs[0];
        Var last = reduce([&](const std::vector<Var>& a) { return std::vector<Var>{cos(a[1]) + a[0]}; }, {v[0]}, {v[1]}).outputs[0];
        return back * last;
      },
      {random_tensor({5}, f64, -1, 1, 1), Tensor::scalar(0.5), Tensor::scalar(0.8)});
}

TEST(ScanGrad, UntilDifferentiatesTheStepsRun) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        ScanResult r = scan(
            [&](const std::vector<Var>& a) {
              Var next = a[0] * v[1];
              return std::vector<Var>{next, until(next > 10.0)};
            },
            {.outputs_info = {v[0]}, .n_steps = 50});
        return r.outputs[0];
      },
      {Tensor::scalar(1.0), Tensor::scalar(1.5)});  // 1.5^6 = 11.4: six steps, away from the edge
}

TEST(ScanGrad, IntegerSequenceLooksUpRows) {
  Var ids = vector("ids", i64);
  verify_grad_and_rop(
      [&](std::vector<Var> v) {
        ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(v[0][VarIndex(a[0])] + a[1])}; },
                            {.sequences = {constant(Tensor::from(std::vector<int64_t>{2, 0, 2, 1}))}, .outputs_info = {v[1]}});
        return r.outputs[0];
      },
      {random_tensor({3, 2}, f64, -1, 1, 1), random_tensor({2}, f64, -1, 1, 2)});
}

TEST(ScanGrad, NestedScan) {
  verify_grad_and_rop(
      [](std::vector<Var> v) {
        ScanResult r = scan(
            [&](const std::vector<Var>& a) {
              Var inner = reduce([&](const std::vector<Var>& b) { return std::vector<Var>{b[1] * v[1] + sin(b[0])}; }, {a[0]}, {a[1]})
                              .outputs[0];
              return std::vector<Var>{inner};
            },
            {.sequences = {v[0]}, .outputs_info = {constant(Tensor::scalar(0.1))}});
        return r.outputs[0];
      },
      {random_tensor({3, 4}, f64, -1, 1, 1), Tensor::scalar(0.9)});
}

TEST(ScanGrad, TruncateGradientStopsAfterKStepsBack) {
  Var x = vector("x", f64), s0 = scalar("s0", f64);
  auto cumulative = [&](int64_t k) {
    ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] + a[1]}; },
                        {.sequences = {x}, .outputs_info = {s0}, .truncate_gradient = k});
    Var last = r.outputs[0][VarIndex(-1)];
    return grad(last, {x, s0});
  };
  const std::vector<Tensor> at{f64_vector({1, 2, 3, 4, 5}), Tensor::scalar(0.0)};
  std::vector<Tensor> g = eval({x, s0}, cumulative(2), at);
  expect_values(g[0], {0, 0, 0, 1, 1});
  expect_values(g[1], {0});
  g = eval({x, s0}, cumulative(5), at);
  expect_values(g[0], {1, 1, 1, 1, 1});
  expect_values(g[1], {1});
}

// ---- Forward mode ----

namespace {
int loops_of(const Function& f) {
  const std::string text = f.graph_text();
  int loops = 0;
  for (size_t at = text.find("\nscan{"); at != std::string::npos; at = text.find("\nscan{", at + 1)) ++loops;
  return loops;
}
}  // namespace

TEST(ScanGrad, CumsumWithNoAxisInALoopOfGradients) {
  Var x = vector("x", f64);
  Tensor at = f64_vector({0.5, -1.0, 2.0});
  Var eye = constant(Tensor::from(std::vector<double>{1, 0, 0, 0, 1, 0, 0, 0, 1}, {3, 3}));
  ScanResult rows = map([&](const std::vector<Var>& a) { return std::vector<Var>{Lop({cumsum(x * 3.0)}, {x}, {a[0]})[0]}; }, {eye});
  for (const Mode& mode : {plain_mode(), Mode::fast_run()}) {
    std::vector<Tensor> out = function({x}, {jacobian(cumsum(x * 3.0), x), jacobian(cumsum(x * x), x), rows.outputs[0]}, {.mode = mode})(at);
    expect_values(out[0], {3, 0, 0, 3, 3, 0, 3, 3, 3});
    expect_values(out[1], {1, 0, 0, 1, -2, 0, 1, -2, 4});
    expect_values(out[2], {3, 0, 0, 3, 3, 0, 3, 3, 3});
  }
}

TEST(ScanGrad, TileAndRepeatInABody) {
  // Their shapes are shape arithmetic in the body (shape_of(v) times the repetitions).
  for (bool use_tile : {true, false})
    verify_grad_and_rop(
        [&](std::vector<Var> v) {
          ScanResult r = scan(
              [&](const std::vector<Var>& a) {
                const Var head = slice(a[1] * a[0], 0, 0, 2);
                return std::vector<Var>{use_tile ? tile(head, {2}) : repeat(head, 2, 0)};
              },
              {.sequences = {v[0]}, .outputs_info = {Taps(v[1])}});
          return r.outputs[0];
        },
        {random_tensor({3, 4}, f64, -1, 1, 1), random_tensor({4}, f64, -1, 1, 2)});
}

TEST(ScanGrad, SecondDerivativesThroughANestedScan) {
  auto product_of_rows = [](const Var& m) {
    ScanResult outer = scan(
        [&](const std::vector<Var>& a) {
          ScanResult inner = scan([&](const std::vector<Var>& b) { return std::vector<Var>{b[1] * (1.0 + b[0])}; },
                                  {.sequences = {a[0]}, .outputs_info = {Taps(a[1])}});
          return std::vector<Var>{inner.outputs[0][VarIndex(-1)]};
        },
        {.sequences = {m}, .outputs_info = {Taps(Var(1.0))}});
    return outer.outputs[0][VarIndex(-1)];  // prod(1 + m)
  };
  verify_grad([&](std::vector<Var> v) { return grad(product_of_rows(v[0]), {v[0]})[0]; }, {random_tensor({2, 3}, f64, -0.5, 0.5, 7)});
  Var m = matrix("m", f64);
  Tensor at = Tensor::from(std::vector<double>{0.1, 0.2, -0.3, 0.4, 0.5, -0.6}, {2, 3});
  const std::vector<double> h = values(function({m}, {hessian(product_of_rows(m), m)})(at)[0]);
  const std::vector<double> x = values(at);
  double p = 1;
  for (double xi : x) p *= 1 + xi;
  for (size_t i = 0; i < 6; ++i)
    for (size_t j = 0; j < 6; ++j)
      EXPECT_NEAR(h[i * 6 + j], i == j ? 0.0 : p / ((1 + x[i]) * (1 + x[j])), 1e-9) << i << "," << j;
}

TEST(ScanRop, TheTangentsRunInTheStatesOwnLoop) {
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64), U = matrix("U", f64), vW = matrix("vW", f64), vU = matrix("vU", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], W) + dot(a[1], U))}; },
                      {.sequences = {X}, .outputs_info = {h0}});
  const Var tangent = Rop({r.outputs[0]}, {W, U}, {vW, vU})[0];
  Function f = function({X, h0, W, U, vW, vU}, {r.outputs[0], tangent});
  EXPECT_EQ(loops_of(f), 1) << f.graph_text();  // the tangent loop computes the states again; scan_merge keeps one copy
  // The tangent of a state is the directional derivative: compare with a small step along (vW, vU).
  const std::vector<Tensor> at{random_tensor({5, 3}, f64, -1, 1, 1), random_tensor({4}, f64, -1, 1, 2), random_tensor({3, 4}, f64, -1, 1, 3),
                               random_tensor({4, 4}, f64, -1, 1, 4), random_tensor({3, 4}, f64, -1, 1, 5), random_tensor({4, 4}, f64, -1, 1, 6)};
  const std::vector<Tensor> out = f(at);
  const double eps = 1e-6;
  auto moved = [&](double t) {
    std::vector<Tensor> m = at;
    m[2] = eval1({W, vW}, W + t * vW, {at[2], at[4]});
    m[3] = eval1({U, vU}, U + t * vU, {at[3], at[5]});
    return f(m)[0].to_vector<double>();
  };
  const std::vector<double> up = moved(eps), down = moved(-eps), tangent_values = out[1].to_vector<double>();
  for (size_t i = 0; i < up.size(); ++i) EXPECT_NEAR(tangent_values[i], (up[i] - down[i]) / (2 * eps), 1e-7);
}

TEST(ScanRop, AGaussNewtonProductThroughALoopIsTwoPasses) {
  // Lop(f, W, Rop(f, W, v)): the states with their tangents in one loop, the way back in another
  // (the seed's "two passes"), and equal to J^T (J v) with J built by jacobian.
  Var X = matrix("X", f64), h0 = vector("h0", f64), W = matrix("W", f64), v = matrix("v", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[1], W) + a[0])}; },
                      {.sequences = {X}, .outputs_info = {h0}});
  const Var y = r.outputs[0];
  const Var gv = Lop({y}, {W}, {Rop({y}, {W}, {v})[0]})[0];
  Function f = function({X, h0, W, v}, {y, gv});
  EXPECT_EQ(loops_of(f), 2) << f.graph_text();
  const Var J = reshape(jacobian(y, W), {12, 9});
  const Var expected = reshape(dot(transpose(J), dot(J, flatten(v, 1))), {3, 3});
  const std::vector<Tensor> at{random_tensor({4, 3}, f64, -1, 1, 7), random_tensor({3}, f64, -1, 1, 8), random_tensor({3, 3}, f64, -1, 1, 9),
                               random_tensor({3, 3}, f64, -1, 1, 10)};
  expect_values(f(at)[1], eval1({X, h0, W, v}, expected, at).to_vector<double>(), 1e-10);
}

// A body whose ifelse has a branch that cannot run for these shapes (a product whose shapes do not
// align), never taken: the step's output has the other branch's shape, so the loop plans.
TEST(Scan, ABranchThatCannotRunForTheseShapesIsPlannedAsTheOtherSide) {
  Var xs = vector("xs", f64), h0 = vector("h0", f64), A = matrix("A", f64);
  ScanResult r = scan(
      [&](const std::vector<Var>& a) {
        const Var xt = a[0], h = a[1];
        return std::vector<Var>{ifelse(xt > 100.0, dot(h, a[2]), h * xt)};
      },
      {.sequences = {xs}, .outputs_info = {h0}, .non_sequences = {A}});
  const Var y = sum(r.outputs[0]);
  const Tensor xv = Tensor::from({0.5, -1.0, 2.0}, {3}), h0v = Tensor::from({1.5, 2.0}, {2}), Av = Tensor::zeros({3, 3}, f64);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode()}) {
    Function f = function({xs, h0, A}, {y}, {.mode = mode});
    EXPECT_DOUBLE_EQ(f(xv, h0v, Av)[0].item<double>(), 3.5 * (0.5 - 0.5 - 1.0)) << mode.name();
    EXPECT_THROW(f(Tensor::from({0.5, 200.0, 2.0}, {3}), h0v, Av), ShapeError) << mode.name();
  }
  // y = sum(h0) (x1 + x1 x2 + x1 x2 x3), in fast_run (the other modes keep the gradient of the
  // product that cannot run, and its shapes, in the loop).
  const std::vector<Var> g = grad(y, {h0, xs});
  const auto out = function({xs, h0, A}, {g[0], g[1]})(xv, h0v, Av);
  expect_values(out[0], {-1.0, -1.0});
  expect_values(out[1], {3.5 * (1.0 - 1.0 - 2.0), 3.5 * (0.5 + 0.5 * 2.0), 3.5 * (0.5 * -1.0)});
}

// What the body builds from values outside it runs before the loop, once, unless only a branch
// of an ifelse reads it: then it runs in the steps that take the branch (here it could not run).
TEST(Scan, WorkTheBodyBuildsForABranchRunsOnlyWhenItIsTaken) {
  Var x = vector("x", f64), k = scalar("k", i64), W = matrix("W", f64);
  ScanResult r = scan(
      [&](const std::vector<Var>& a) {
        return std::vector<Var>{a[1] + ifelse(a[0] > 0.0, W[VarIndex(k)] * a[0], zeros_like(a[1]))};
      },
      {.sequences = {x}, .outputs_info = {constant(Tensor::zeros({2}, f64))}});
  const Tensor Wv = Tensor::from({1.0, 2.0, 10.0, 20.0, 100.0, 200.0}, {3, 2});
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), plain_mode()}) {
    Function f = function({x, k, W}, {r.outputs[0]}, {.mode = mode});
    expect_values(f(Tensor::from({-1.0, -2.0}, {2}), Tensor::scalar(int64_t{7}), Wv)[0], {0, 0, 0, 0});
    expect_values(f(Tensor::from({-1.0, 2.0}, {2}), Tensor::scalar(int64_t{1}), Wv)[0], {0, 0, 20, 40});
    EXPECT_THROW(f(Tensor::from({-1.0, 2.0}, {2}), Tensor::scalar(int64_t{7}), Wv), ShapeError) << mode.name();
  }
}

// An ifelse in a loop's body, then an op that broadcasts: the body's gradient sums back to the
// ifelse's shape, which is an ifelse of the branches' shapes. Equal, they are known when the body
// is planned, whichever branch runs (fast_run had raised "an inner graph computes an output whose
// shape is known only while it runs").
TEST(Scan, GradientOfABodyWithAnIfElseInEveryMode) {
  auto loss = [](const std::vector<Var>& in) {
    const Var xs = constant(Tensor::from({0.5, -1.0, 2.0}, {3}));
    const Var w = in[1];
    ScanResult r = scan(
        [&](const std::vector<Var>& a) {
          const Var xt = a[0], h = a[1];
          const Var once = ifelse(xt > 0.0, h * xt, sin(h)) * w;
          return std::vector<Var>{ifelse(xt > 0.0, once * 2.0, once + 1.0)};
        },
        {.sequences = {xs}, .outputs_info = {in[0]}, .non_sequences = {w}});
    return sum(r.outputs[0]);
  };
  Var h0 = vector("h0", f64), w = vector("w", f64);
  const Var cost = loss({h0, w});
  const std::vector<Var> grads = grad(cost, {h0, w});
  const Tensor h0v = Tensor::from({1.5, 2.0}, {2}), wv = Tensor::from({0.5, 0.25}, {2});
  const auto expected = function({h0, w}, {cost, grads[0], grads[1]}, {.mode = plain_mode()})(h0v, wv);
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile()}) {
    const auto out = function({h0, w}, {cost, grads[0], grads[1]}, {.mode = mode})(h0v, wv);
    for (size_t i = 0; i < out.size(); ++i) expect_values(out[i], expected[i].to_vector<double>());
  }
  verify_grad(loss, {h0v, wv});
}

// n_steps beyond what a sequence allows is the loop's error in every mode, also where a rewrite
// moved the body's work on the sequence out of the loop (it named an internal row_range there).
TEST(Scan, NStepsBeyondASequenceIsTheLoopsErrorInEveryMode) {
  Var xs = matrix("xs", f64), w = matrix("w", f64), n = scalar("n", i64), h0 = vector("h0", f64);
  ScanResult r = scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(dot(a[0], w)) + a[1]}; },
                      {.sequences = {xs}, .outputs_info = {Taps(h0)}, .non_sequences = {w}, .n_steps = n});
  for (const Mode& mode : {Mode::fast_run(), Mode::fast_compile(), Mode("plain", {})}) {
    Function f = function({xs, w, n, h0}, {r.outputs[0]}, {.mode = mode});
    const Tensor seq = Tensor::ones({20, 4}, f64), wv = Tensor::ones({4, 4}, f64), h = Tensor::zeros({4}, f64);
    expect_error<ShapeError>([&] { f(seq, wv, Tensor::scalar<int64_t>(21), h); }, {"n_steps is 21", "20 steps", "scan_test.cpp"});
    expect_error<ShapeError>([&] { f(seq, wv, Tensor::scalar<int64_t>(-1), h); }, {"n_steps is -1", "scan_test.cpp"});
    EXPECT_EQ(f(seq, wv, Tensor::scalar<int64_t>(20), h)[0].shape(), (Shape{20, 4})) << mode.name();
  }
}

TEST(Scan, AKeptArenaRemakesViewsOfRowsAnUntilDecides) {
  // Found by the loop fuzzer: with keep_buffers, a call whose loop stopped after fewer steps than
  // the call before read the stored rows reversed (the backward loop's view of a view whose row
  // count until() decides) with the last call's geometry: a gradient of 3.47 instead of 0.39.
  Var b = vector("b", f64), limit = scalar("limit", f64);
  ScanResult r = scan([](const std::vector<Var>& a) { return std::vector<Var>{tanh(a[0] * 2.0), until(a[1] > 0.0)}; },
                      {.outputs_info = {std::nullopt}, .non_sequences = {b, limit}, .n_steps = Var(int64_t{3})});
  Var s = sum(r.outputs[0], {0});
  Var g = grad(sum(s * s), b);
  for (Mode mode : {plain_mode(), Mode::fast_run()}) {
    Function kept = function({b, limit}, {s, g}, {.mode = mode, .keep_buffers = true});
    Function fresh = function({b, limit}, {s, g}, {.mode = mode});
    const Tensor b1 = Tensor::from(std::vector<double>{0.1, 0.15}), b2 = Tensor::from(std::vector<double>{0.1, 0.9});
    for (const auto& [bv, lv] : std::vector<std::pair<Tensor, double>>{{b1, -1.0}, {b2, 1.0}, {b1, -1.0}, {b2, 1.0}}) {
      const std::vector<Tensor> got = kept(bv, Tensor::scalar(lv)), want = fresh(bv, Tensor::scalar(lv));
      expect_values(got[0], want[0].to_vector<double>(), 1e-12);
      expect_values(got[1], want[1].to_vector<double>(), 1e-12);
    }
    // One step at b2: d/db of (tanh(2 b))^2 summed is 4 tanh(2b) (1 - tanh(2b)^2).
    const double t = std::tanh(1.8);
    expect_values(kept(b2, Tensor::scalar(1.0))[1], {4 * std::tanh(0.2) * (1 - std::tanh(0.2) * std::tanh(0.2)), 4 * t * (1 - t * t)}, 1e-12);
  }
}

TEST(Scan, SequenceTapsCountFromTheCurrentStepsRowAsInTheano) {
  // Taps all after the current row ({1}: the row after) or all before it ({-1}) read as Theano
  // reads them (they read x[t] over len(x) steps, as if shifted to 0); backwards, the same steps
  // run in reverse, a tap -1 still reading the row before in x's order (they read the reversed
  // rows at the taps).
  Var x = vector("x", f64);
  const Tensor xv = Tensor::from(std::vector<double>{1, 2, 3, 4, 5});
  auto digits = [](const std::vector<Var>& a) {
    Var v = a[0];
    for (size_t i = 1; i < a.size(); ++i) v = v * 10.0 + a[i];
    return std::vector<Var>{v};
  };
  const std::vector<std::pair<std::vector<int>, std::vector<double>>> cases{
      {{1}, {2, 3, 4, 5}}, {{-1}, {1, 2, 3, 4}}, {{2}, {3, 4, 5}}, {{-2, -1}, {12, 23, 34}}, {{1, 2}, {23, 34, 45}},
      {{-1, 1}, {13, 24, 35}}, {{-3, 2}, {}}, {{-1, 0, 2}, {124, 235}}};
  for (const auto& [taps, forwards] : cases)
    for (Mode mode : {plain_mode(), Mode::fast_run()}) {
      const std::vector<double> backwards(forwards.rbegin(), forwards.rend());
      const Var f = scan(digits, {.sequences = {SeqTaps{x, taps}}}).outputs[0];
      const Var b = scan(digits, {.sequences = {SeqTaps{x, taps}}, .go_backwards = true}).outputs[0];
      const std::vector<Tensor> r = function({x}, {f, b}, {.mode = mode})(xv);
      expect_values(r[0], forwards);
      expect_values(r[1], backwards);
    }
  verify_grad([](std::vector<Var> v) { return sum(scan([](const std::vector<Var>& a) { return std::vector<Var>{a[0] * a[0]}; },
                                                       {.sequences = {SeqTaps{v[0], {1}}}}).outputs[0]); },
              {Tensor::from(std::vector<double>{0.5, -1, 2})});
}

TEST(ScanRop, TappedSequencesAndHessianVectorProductsThroughALoop) {
  // Found by the derivatives trial: forward mode rebuilt the loop from its own (already cut)
  // sequences with the user's taps, cutting them again: Rop of y[t] = x[t+1]^2 gave [6, 8] for
  // [4, 6, 8], and Rop of a gradient through any loop with a state failed (its backward loop
  // reads the states at tap +1).
  Var xs = vector("xs", f64), dx = vector("dx", f64);
  const std::vector<std::tuple<std::vector<int>, std::vector<double>>> cases{
      {{1}, {4, 6, 8}}, {{-1}, {2, 4, 6}}, {{-2, -1}, {3, 5}}, {{0, 2}, {4, 6}}};
  for (const auto& [taps, expected] : cases) {
    const Var y = scan([](const std::vector<Var>& a) {
                    Var p = a[0];
                    for (size_t i = 1; i < a.size(); ++i) p = p * a[i];
                    return std::vector<Var>{a.size() == 1 ? p * a[0] : p};
                  },
                  {.sequences = {SeqTaps{xs, taps}}})
                      .outputs[0];
    for (Mode mode : {plain_mode(), Mode::fast_run()})
      expect_values(function({xs, dx}, {Rop({y}, {xs}, {dx})[0]}, {.mode = mode})(Tensor::from(std::vector<double>{1, 2, 3, 4}),
                                                                                 Tensor::ones({4}, f64))[0],
                    expected, 1e-12);
  }
  Var w = scalar("w", f64), h0 = scalar("h0", f64), v = scalar("v", f64);
  const Var cost = sum(scan([&](const std::vector<Var>& a) { return std::vector<Var>{tanh(a[0] * w + a[1])}; },
                            {.sequences = {xs}, .outputs_info = {h0}})
                           .outputs[0]);
  const std::vector<Tensor> at{Tensor::from(std::vector<double>{0.5, -0.3, 0.8}), Tensor::scalar(0.7), Tensor::scalar(0.1)};
  for (Mode mode : {plain_mode(), Mode::fast_run()}) {
    Function hv = function({xs, w, h0, v}, {Rop({grad(cost, w)}, {w}, {v})[0], hessian(cost, w)}, {.mode = mode});
    const std::vector<Tensor> r = hv(at[0], at[1], at[2], Tensor::scalar(1.0));
    expect_values(r[0], r[1].to_vector<double>(), 1e-12);
    EXPECT_NEAR(r[0].item<double>(), -1.06169, 1e-5);
  }
}
