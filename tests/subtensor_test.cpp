#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {
Tensor m34() { return Tensor::from({0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0}, {3, 4}); }
}  // namespace

TEST(Subtensor, IndexAndSliceWithNumpyRules) {
  Var x = matrix("x", f64);
  auto o = eval({x}, {x[1], x[-1], slice(x, 1, 1, 3), slice(x, 1, std::nullopt, std::nullopt, -1), slice(x, 0, 0, 100, 2),
                      slice(x, 1, -2), slice(x, 0, 5, 9)},
                {m34()});
  expect_values(o[0], {4, 5, 6, 7});
  expect_values(o[1], {8, 9, 10, 11});
  expect_values(o[2], {1, 2, 5, 6, 9, 10});
  expect_values(o[3], {3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8});
  expect_values(o[4], {0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(o[5], {2, 3, 6, 7, 10, 11});
  EXPECT_EQ(o[6].shape(), (Shape{0, 4}));
}

TEST(Subtensor, StepsNearTheLimitsOfI64TakeOneElementAsInNumPy) {
  // The length (stop - start + step - 1) / step overflowed: x[0:10:INT64_MAX] came out empty.
  Var x = vector("x", f64), i = scalar("i", i64);
  const Tensor values = Tensor::from({0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0}, {10});
  auto o = eval({x, i},
                {slice(x, 0, 0, 10, INT64_MAX), slice(x, 0, 9, 0, INT64_MIN), slice(x, 0, 0, 10, INT64_MAX - 5),
                 slice(x, 0, Var(i), std::nullopt, INT64_MIN), set_subtensor(slice(x, 0, 0, 10, INT64_MAX), -1.0)},
                {values, Tensor::scalar<int64_t>(-3)});
  expect_values(o[0], {0});
  expect_values(o[1], {9});
  expect_values(o[2], {0});
  expect_values(o[3], {7});
  expect_values(o[4], {-1, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  expect_values(slice(values, 0, 0, 10, INT64_MAX), {0});
}

TEST(Subtensor, SymbolicIndexUsesTake) {
  Var x = matrix("x", f64), i = scalar("i", i64);
  expect_values(eval1({x, i}, x[i], {m34(), Tensor::scalar<int64_t>(2)}), {8, 9, 10, 11});
}

TEST(Subtensor, IndexOutOfBounds) {
  Var x = matrix("x");
  Function f = function({x}, {x[5]});
  expect_error<ShapeError>([&] { f(Tensor::zeros({3, 4})); }, {"index 5", "out of bounds", "axis 0", "size 3"});
  expect_error<TypeError>([&] { (void)scalar("s")[0]; }, {"cannot index a 0-d"});
}

TEST(Subtensor, Take) {
  Var x = matrix("x", f64), idx = vector("idx", i64), idx2 = matrix("idx2", i32);
  auto o = eval({x, idx, idx2}, {take(x, idx, 0), take(x, idx, 1), take(x, idx2, 0)},
                {m34(), Tensor::from(std::vector<int64_t>{2, 0, -1}), Tensor::from(std::vector<int32_t>{0, 1}, {1, 2})});
  expect_values(o[0], {8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  expect_values(o[1], {2, 0, 3, 6, 4, 7, 10, 8, 11});
  EXPECT_EQ(o[2].shape(), (Shape{1, 2, 4}));
  Function f = function({x, idx}, {take(x, idx)});
  expect_error<ShapeError>([&] { f(m34(), Tensor::from(std::vector<int64_t>{3})); }, {"index 3", "out of bounds"});
  expect_error<TypeError>([&] { take(x, vector("f", f32)); }, {"indices must be integers"});
}

TEST(Subtensor, SetAndIncSubtensor) {
  Var x = matrix("x", f64), v = vector("v", f64), idx = vector("idx", i64);
  Tensor xv = m34();
  auto o = eval({x, v, idx}, {set_subtensor(x[1], v), inc_subtensor(slice(x, 1, 0, 2), 10.0),
                              inc_subtensor(take(x, idx), v), set_subtensor(take(x, idx), 0.0)},
                {xv, Tensor::from({1.0, 1.0, 1.0, 1.0}, {4}), Tensor::from(std::vector<int64_t>{0, 0})});
  expect_values(o[0], {0, 1, 2, 3, 1, 1, 1, 1, 8, 9, 10, 11});
  expect_values(o[1], {10, 11, 2, 3, 14, 15, 6, 7, 18, 19, 10, 11});
  expect_values(o[2], {2, 3, 4, 5, 4, 5, 6, 7, 8, 9, 10, 11});  // repeated indices accumulate
  expect_values(o[3], {0, 0, 0, 0, 4, 5, 6, 7, 8, 9, 10, 11});
  expect_values(xv, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});  // the input is untouched
  expect_error<TypeError>([&] { set_subtensor(x * 2.0, v); }, {"set_subtensor", "indexing result"});
}

TEST(Subtensor, IncrementsOfAHigherKindAreRefusedAsNumPy) {
  // x[0:2] += 1.5 on integers: NumPy refuses it (same_kind); kiln cut 1.5 to 1 before adding.
  Var x = vector("x", i32), f = vector("f", f64);
  expect_error<TypeError>([&] { inc_subtensor(slice(x, 0, 0, 2), 1.5); },
                          {"inc_subtensor", "f64", "i32", "same_kind", "cast(v, i32)", "subtensor_test.cpp"});
  expect_error<TypeError>([&] { inc_subtensor(take(x, constant(Tensor::from<int64_t>({0, 0}))), f); }, {"inc_subtensor", "same_kind"});
  expect_error<TypeError>([&] { inc_subtensor(vector("b", b8)[0], 2.0); }, {"inc_subtensor", "b8"});
  // Incrementing booleans is refused when the graph is built (it failed only when it ran).
  expect_error<TypeError>([&] { inc_subtensor(matrix("bm", b8)[0], vector("bv", b8)); }, {"inc_subtensor", "cannot increment b8", "maximum"});
  // A bare number the target holds exactly is taken (x[0:2] += 2), and set_subtensor casts as
  // NumPy's assignment does.
  Function g = function({x}, {inc_subtensor(slice(x, 0, 0, 2), 2.0), set_subtensor(slice(x, 0, 0, 2), 1.5),
                              inc_subtensor(take(x, constant(Tensor::from<int64_t>({0, 0}))), 3.0)});
  const std::vector<Tensor> r = g(Tensor::from<int32_t>({-6, 2, 5}));
  EXPECT_EQ(r[0].to_vector<int32_t>(), (std::vector<int32_t>{-4, 4, 5}));
  EXPECT_EQ(r[1].to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 5}));
  EXPECT_EQ(r[2].to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 5}));
}

TEST(Subtensor, Gradients) {
  for (DType dt : {f64, f32}) {
    Tensor x = random_tensor({4, 5}, dt);
    Tensor y = random_tensor({5}, dt, -1, 1, 3);
    Tensor idx = Tensor::from(std::vector<int64_t>{3, 1, 3});
    verify_grad([](std::vector<Var> v) { return v[0][2] * 3.0; }, {x});
    verify_grad([](std::vector<Var> v) { return slice(v[0], 1, 4, 0, -2); }, {x});
    verify_grad([&](std::vector<Var> v) { return take(v[0], constant(idx)); }, {x});
    verify_grad([](std::vector<Var> v) { return set_subtensor(v[0][1], v[1]); }, {x, y});
    verify_grad([](std::vector<Var> v) { return inc_subtensor(slice(v[0], 0, 1, 3), v[1]); }, {x, y});
    verify_grad([&](std::vector<Var> v) { return inc_subtensor(take(v[0], constant(idx)), v[1]); }, {x, y});
    verify_grad([&](std::vector<Var> v) { return set_subtensor(take(v[0], constant(idx)), v[1]); }, {x, y});
  }
}

// one_hot (issue 15): NumPy's eye(n, dtype)[indices].

TEST(Subtensor, OneHotOfVectorsAndMatricesOfIndices) {
  Var i = vector("i", i64);
  Tensor h = eval1({i}, one_hot(i, 4), {Tensor::from(std::vector<int64_t>{2, 0, -1, 3})});
  EXPECT_EQ(h.dtype(), f32);
  EXPECT_EQ(h.shape(), (Shape{4, 4}));
  expect_values(h, {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1}, 0);  // -1 counts from the end
  Var m = matrix("m", i32);
  Tensor hm = eval1({m}, one_hot(m, 3, i64), {Tensor::from(std::vector<int32_t>{1, 2, 0, 1}, {2, 2})});
  EXPECT_EQ(hm.dtype(), i64);
  EXPECT_EQ(hm.shape(), (Shape{2, 2, 3}));
  expect_values(hm, {0, 1, 0, 0, 0, 1, 1, 0, 0, 0, 1, 0}, 0);
  // Strided indices, b8 and f64 results, no indices at all.
  Var t = matrix("t", i64);
  expect_values(eval1({t}, one_hot(transpose(t), 2, b8), {Tensor::from(std::vector<int64_t>{0, 1, 1, 0}, {2, 2})}),
                {1, 0, 0, 1, 0, 1, 1, 0}, 0);
  EXPECT_EQ(eval1({i}, one_hot(i, 5, f64), {Tensor::zeros({0}, i64)}).shape(), (Shape{0, 5}));
  EXPECT_EQ(eval1({i}, one_hot(i, 0), {Tensor::zeros({0}, i64)}).shape(), (Shape{0, 0}));
}

TEST(Subtensor, OneHotRefusesBadIndicesClearly) {
  Var i = vector("i", i64);
  Function f = function({i}, {one_hot(i, 3)});
  expect_error<ShapeError>([&] { f(Tensor::from(std::vector<int64_t>{0, 3})); }, {"one_hot", "index 3", "out of bounds", "3 classes"});
  expect_error<ShapeError>([&] { f(Tensor::from(std::vector<int64_t>{-4})); }, {"one_hot", "index -4"});
  expect_error<TypeError>([&] { one_hot(vector("x", f32), 3); }, {"one_hot", "integers", "f32"});
  expect_error<TypeError>([&] { one_hot(i, -1); }, {"one_hot", "-1"});
  // No gradient reaches the indices, and a one-hot target differentiates with the rest.
  Var z = matrix("z", f64);
  Var cost = sum(one_hot(i, 3, f64) * log_softmax(z));
  Function g = function({z, i}, {grad(cost, z)});
  EXPECT_EQ(g(Tensor::zeros({2, 3}, f64), Tensor::from(std::vector<int64_t>{0, 2}))[0].shape(), (Shape{2, 3}));
}

TEST(Subtensor, EagerOneHot) {
  expect_values(one_hot(Tensor::from(std::vector<int64_t>{1, 0}), 2), {0, 1, 1, 0}, 0);
}

TEST(Subtensor, SlicesWithSymbolicBoundsFollowNumPy) {
  Var x = vector("x", f64), start = scalar("start", i64), stop = scalar("stop", i64), step = scalar("step", i64);
  Function f = function({x, start, stop, step}, {slice(x, 0, start, stop, step), slice(x, 0, start, std::nullopt), slice(x, 0, std::nullopt, std::nullopt, step)});
  std::vector<double> ten;
  for (int i = 0; i < 10; ++i) ten.push_back(i);
  const Tensor xv = Tensor::from(ten);
  auto s = [](int64_t v) { return Tensor::scalar(v); };
  std::vector<Tensor> out = f(xv, s(2), s(5), s(1));
  expect_values(out[0], {2, 3, 4});
  expect_values(out[1], {2, 3, 4, 5, 6, 7, 8, 9});
  expect_values(out[2], ten);
  out = f(xv, s(-3), s(100), s(-2));
  EXPECT_EQ(out[0].numel(), 0) << "from 7 down to 100 is empty";
  expect_values(out[1], {7, 8, 9});
  expect_values(out[2], {9, 7, 5, 3, 1});
  out = f(xv, s(8), s(-100), s(-3));
  expect_values(out[0], {8, 5, 2});  // clamped below: down to the first element
  expect_error<ShapeError>([&] { f(xv, s(0), s(1), s(0)); }, {"dynamic_slice", "step is zero"});
  expect_error<TypeError>([&] { slice(x, 0, scalar("f", f32), 3); }, {"slice", "start must be a 0-d integer", "f32[]"});
}

TEST(Subtensor, AMinibatchOfSharedDataWithGivens) {
  // As Theano's tutorial writes it: the batch index is the input, the data stay in a shared variable.
  std::vector<double> rows;
  for (int i = 0; i < 30; ++i) rows.push_back(i);
  Shared data = shared(Tensor::from(rows, {10, 3}), "data");
  Var i = scalar("i", i64), x = matrix("x", f64);
  const int64_t batch = 4;
  Function batch_sum = function({i}, {sum(x, 1)}, {.givens = {{x, slice(data, 0, i * batch, (i + 1) * batch)}}});
  expect_values(batch_sum(Tensor::scalar(int64_t{0}))[0], {3, 12, 21, 30});
  expect_values(batch_sum(Tensor::scalar(int64_t{2}))[0], {75, 84});  // the last batch holds 2 rows
  // Its gradient reaches only the batch's rows; set_subtensor and inc_subtensor take the slice too.
  Var y = matrix("y", f64), j = scalar("j", i64);
  Var part = slice(y, 0, j, j + 2);
  const std::vector<Tensor> g = function({y, j}, {grad(sum(sqr(part)), y), set_subtensor(part, 0.0), inc_subtensor(part, 1.0)})(
      Tensor::from(rows, {10, 3}), Tensor::scalar(int64_t{3}));
  const std::vector<double> gv = g[0].to_vector<double>(), sv = g[1].to_vector<double>(), iv = g[2].to_vector<double>();
  for (int r = 0; r < 10; ++r)
    for (int c = 0; c < 3; ++c) {
      const double v = rows[r * 3 + c];
      const bool inside = r == 3 || r == 4;
      EXPECT_EQ(gv[r * 3 + c], inside ? 2 * v : 0) << r << "," << c;
      EXPECT_EQ(sv[r * 3 + c], inside ? 0 : v);
      EXPECT_EQ(iv[r * 3 + c], inside ? v + 1 : v);
    }
  verify_grad([](std::vector<Var> v) { return sqr(slice(v[0], 1, Var(int64_t{1}), Var(int64_t{-1}))); }, {random_tensor({3, 4})});
  verify_grad([](std::vector<Var> v) { return set_subtensor(slice(v[0], 0, Var(int64_t{1}), 3), v[1] * 2.0); },
              {random_tensor({4, 2}), random_tensor({2, 2})});
}

TEST(Subtensor, UpdatesOfNestedViewsChangeTheRootAsNumPy) {
  // x[1][0:2] = v changes x in NumPy; kiln returned x[1] changed, a value of another shape. A
  // lookup of several indices is a copy in NumPy too, and the update stops there.
  Var x = matrix("x", f64), v = vector("v", f64), i = scalar("i", i64);
  Function f = function({x, v, i}, {set_subtensor(slice(x[1], 0, 0, 2), v), inc_subtensor(slice(x, 0, 1, 3)[0], 10.0),
                                    set_subtensor(x[i][1], 5.0), set_subtensor(take(x, constant(Tensor::from<int64_t>({0, 0})))[0], 9.0)});
  const std::vector<Tensor> r = f(Tensor::zeros({3, 4}, f64), Tensor::from<double>({7, 8}), Tensor::scalar<int64_t>(2));
  expect_values(r[0], {0, 0, 0, 0, 7, 8, 0, 0, 0, 0, 0, 0});
  expect_values(r[1], {0, 0, 0, 0, 10, 10, 10, 10, 0, 0, 0, 0});
  expect_values(r[2], {0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0});
  EXPECT_EQ(r[3].shape(), (Shape{2, 4}));
  verify_grad([](std::vector<Var> a) { return set_subtensor(slice(a[0][1], 0, 0, 2), a[1] * a[1]) * a[0]; },
              {random_tensor({3, 4}, f64, -1, 1, 3), random_tensor({2}, f64, -1, 1, 4)});
}
