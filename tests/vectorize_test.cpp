// vectorize_graph (src/grad/vectorize.cpp): for each rule and for the loop that covers every other
// op, the batched graph's value equals the unbatched graph evaluated on each batch element, stacked.
#include "grad/vectorize.hpp"
#include "ops/nnet.hpp"
#include "ops/reduce.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

Var batch_of(const Var& v) {
  std::vector<bool> broadcastable(v.ndim() + 1, false);
  return tensor(v.dtype(), broadcastable, v.name() + "_batch");
}

// Element b of a batch: the tensor without its leading axis.
Tensor element(const Tensor& batch, int64_t b) {
  const Shape shape(batch.shape().begin() + 1, batch.shape().end());
  const std::vector<double> all = batch.to_vector<double>();
  const int64_t n = shape_numel(shape);
  return Tensor::from(std::vector<double>(all.begin() + b * n, all.begin() + (b + 1) * n), shape).to(batch.dtype());
}

// Vectorizes `out` over a batch of the inputs named by `batched` (their values in `batches`, one
// leading axis of length B) and checks the batched value against B runs of the original graph.
// Returns the batched graph's function, for tests that look at its ops.
Function expect_batches_like_a_loop(const std::vector<Var>& inputs, const Var& out, const std::vector<size_t>& batched,
                                    const std::vector<Tensor>& at, const std::vector<Tensor>& batches, double tol = 1e-12) {
  std::vector<std::pair<Var, Var>> replacements;
  std::vector<Var> batched_inputs = inputs;
  std::vector<Tensor> batched_at = at;
  for (size_t i = 0; i < batched.size(); ++i) {
    replacements.push_back({inputs[batched[i]], batch_of(inputs[batched[i]])});
    batched_inputs[batched[i]] = replacements.back().second;
    batched_at[batched[i]] = batches[i];
  }
  const Var vectorized = vectorize_graph({out}, replacements)[0];
  EXPECT_EQ(vectorized.ndim(), out.ndim() + 1);
  EXPECT_EQ(vectorized.dtype(), out.dtype());
  Function f = function(std::vector<In>(batched_inputs.begin(), batched_inputs.end()), {vectorized}, {.allow_unused_inputs = true});
  const Tensor got = f(batched_at)[0];
  Function one = function(std::vector<In>(inputs.begin(), inputs.end()), {out}, {.allow_unused_inputs = true});
  const int64_t B = batches[0].shape()[0];
  std::vector<double> expected;
  Shape element_shape;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<Tensor> values = at;
    for (size_t i = 0; i < batched.size(); ++i) values[batched[i]] = element(batches[i], b);
    const Tensor r = one(values)[0];
    element_shape = r.shape();
    const std::vector<double> v = r.to_vector<double>();
    expected.insert(expected.end(), v.begin(), v.end());
  }
  Shape shape{B};
  shape.insert(shape.end(), element_shape.begin(), element_shape.end());
  EXPECT_EQ(got.shape(), shape);
  expect_values(got, expected, tol);
  return f;
}

Tensor rnd(const Shape& shape, uint64_t seed, DType dtype = f64) { return random_tensor(shape, dtype, -1, 1, seed); }

}  // namespace

TEST(Vectorize, ElementwiseBroadcastsTheUnbatchedOperands) {
  Var x = matrix("x", f64), y = vector("y", f64);
  const Var out = tanh(x) * y + 2.0;
  const std::vector<Tensor> at{rnd({2, 3}, 1), rnd({3}, 2)};
  expect_batches_like_a_loop({x, y}, out, {0}, at, {rnd({4, 2, 3}, 3)});
  expect_batches_like_a_loop({x, y}, out, {1}, at, {rnd({4, 3}, 4)});
  expect_batches_like_a_loop({x, y}, out, {0, 1}, at, {rnd({4, 2, 3}, 5), rnd({4, 3}, 6)});
  expect_batches_like_a_loop({x, y}, where(x > y, x, y), {1}, at, {rnd({5, 3}, 7)});
  expect_batches_like_a_loop({x, y}, zeros_like(x) + ones_like(y), {0}, at, {rnd({4, 2, 3}, 3)});
}

TEST(Vectorize, ReductionsShiftTheirAxes) {
  Var x = tensor3("x", f64);
  const std::vector<Tensor> at{rnd({2, 3, 4}, 8)};
  const std::vector<Tensor> batch{rnd({3, 2, 3, 4}, 9)};
  expect_batches_like_a_loop({x}, sum(x, {1}), {0}, at, batch);
  expect_batches_like_a_loop({x}, mean(x), {0}, at, batch);
  expect_batches_like_a_loop({x}, max(x, {0, 2}, true), {0}, at, batch);
  expect_batches_like_a_loop({x}, prod(x, {2}), {0}, at, batch);
  expect_batches_like_a_loop({x}, argmax(x, {1}), {0}, at, batch);
  expect_batches_like_a_loop({x}, argmax(x), {0}, at, batch);  // all axes: loops
  expect_batches_like_a_loop({x}, logsumexp(x, {2}, true), {0}, at, batch);
  Var s = scalar("s", f64);  // a 0-d value reduces over no axis, batched or not
  expect_batches_like_a_loop({s}, sum(s) * 2.0, {0}, {Tensor::scalar(0.5)}, {rnd({3}, 48)});
}

TEST(Vectorize, ShapeOpsShiftOrPrependTheBatchAxis) {
  Var x = matrix("x", f64), t = tensor3("t", f64);
  const std::vector<Tensor> at{rnd({2, 3}, 10), rnd({2, 3, 2}, 11)};
  const std::vector<Tensor> xb{rnd({4, 2, 3}, 12)}, tb{rnd({4, 2, 3, 2}, 13)};
  expect_batches_like_a_loop({x, t}, transpose(x), {0}, at, xb);
  expect_batches_like_a_loop({x, t}, dimshuffle(x, {1, -1, 0}), {0}, at, xb);
  expect_batches_like_a_loop({x, t}, reshape(x, {6}), {0}, at, xb);
  expect_batches_like_a_loop({x, t}, reshape(x, {-1, 2}), {0}, at, xb);
  expect_batches_like_a_loop({x, t}, flatten(t, 2), {1}, at, tb);
  expect_batches_like_a_loop({x, t}, reshape(t, shape_of(x) * constant(Tensor::from(std::vector<int64_t>{1, 2}, {2})), 2), {1}, at, tb);
  // An element's shape is the same for all of them: computed once, not batched.
  const Var shape = vectorize_graph({shape_of(x)}, {{x, batch_of(x)}})[0];
  EXPECT_EQ(shape.ndim(), 1);
  expect_batches_like_a_loop({x, t}, x * cast(shape_of(x)[1], f64), {0}, at, xb);
}

TEST(Vectorize, IndexingKeepsTheBatchInFront) {
  Var x = matrix("x", f64), y = vector("y", f64), s = scalar("s", f64);
  const std::vector<Var> in{x, y, s};
  const std::vector<Tensor> at{rnd({3, 4}, 43), rnd({4}, 44), Tensor::scalar(0.5)};
  const Tensor xb = rnd({2, 3, 4}, 45), yb = rnd({2, 4}, 46), sb = rnd({2}, 47);
  expect_batches_like_a_loop(in, x[1], {0}, at, {xb});
  expect_batches_like_a_loop(in, slice(x, 1, 1, std::nullopt, 2), {0}, at, {xb});
  for (const std::vector<size_t>& which : {std::vector<size_t>{0}, {1}, {0, 1}}) {
    std::vector<Tensor> batches;
    for (size_t i : which) batches.push_back(i == 0 ? xb : yb);
    expect_batches_like_a_loop(in, inc_subtensor(slice(x, 0, 0, 2), y), which, at, batches);  // y broadcast over 2 rows
    expect_batches_like_a_loop(in, set_subtensor(x[2], y), which, at, batches);
  }
  expect_batches_like_a_loop(in, inc_subtensor(slice(x, 1, 1, 3), s), {2}, at, {sb});
  Function f = expect_batches_like_a_loop(in, inc_subtensor(slice(x, 1, 1, 3), s), {0, 2}, at, {xb, sb});
  EXPECT_EQ(f.graph_text().find("scan{"), std::string::npos);
}

TEST(Vectorize, SumToShapeKeepsTheBatch) {
  Var g = matrix("g", f64), like = tensor(f64, {true, false}, "like");
  const Var out = sum_to_shape_of(g, like, Loc::current());
  expect_batches_like_a_loop({g, like}, out, {0}, {rnd({3, 4}, 14), rnd({1, 4}, 15)}, {rnd({2, 3, 4}, 16)});
}

TEST(Vectorize, MatrixProductsOfEveryRankAndSide) {
  Var m = matrix("m", f64), n = matrix("n", f64), u = vector("u", f64), v = vector("v", f64);
  const std::vector<Var> in{m, n, u, v};
  const std::vector<Tensor> at{rnd({2, 3}, 17), rnd({3, 4}, 18), rnd({3}, 19), rnd({3}, 20)};
  const Tensor mb = rnd({5, 2, 3}, 21), nb = rnd({5, 3, 4}, 22), ub = rnd({5, 3}, 23), vb = rnd({5, 3}, 24);
  for (const std::vector<size_t>& which : {std::vector<size_t>{0}, {1}, {0, 1}}) {
    std::vector<Tensor> batches;
    for (size_t i : which) batches.push_back(i == 0 ? mb : nb);
    expect_batches_like_a_loop(in, dot(m, n), which, at, batches);
  }
  for (const std::vector<size_t>& which : {std::vector<size_t>{0}, {2}, {0, 2}}) {
    std::vector<Tensor> batches;
    for (size_t i : which) batches.push_back(i == 0 ? mb : ub);
    expect_batches_like_a_loop(in, dot(m, u), which, at, batches);
  }
  for (const std::vector<size_t>& which : {std::vector<size_t>{1}, {2}, {1, 2}}) {
    std::vector<Tensor> batches;
    for (size_t i : which) batches.push_back(i == 1 ? nb : ub);
    expect_batches_like_a_loop(in, dot(u, n), which, at, batches);
  }
  for (const std::vector<size_t>& which : {std::vector<size_t>{2}, {3}, {2, 3}}) {
    std::vector<Tensor> batches;
    for (size_t i : which) batches.push_back(i == 2 ? ub : vb);
    expect_batches_like_a_loop(in, dot(u, v), which, at, batches);
  }
  // A column times a row (the gradient of a matrix-vector product), as Dot::L_op builds it.
  const Var outer = dot(dimshuffle(u, {0, -1}), dimshuffle(v, {-1, 0}));
  for (const std::vector<size_t>& which : {std::vector<size_t>{2}, {3}, {2, 3}}) {
    std::vector<Tensor> batches;
    for (size_t i : which) batches.push_back(i == 2 ? ub : vb);
    expect_batches_like_a_loop(in, outer, which, at, batches);
  }
  Var a = tensor3("a", f64), b = tensor3("b", f64);
  expect_batches_like_a_loop({a, b}, matmul(a, b), {0}, {rnd({2, 2, 3}, 25), rnd({2, 3, 2}, 26)}, {rnd({4, 2, 2, 3}, 27)});
}

TEST(Vectorize, SoftmaxAndItsGradient) {
  Var x = matrix("x", f64), gy = matrix("gy", f64);
  const std::vector<Tensor> at{rnd({2, 3}, 28), rnd({2, 3}, 29)};
  const std::vector<Tensor> xb{rnd({4, 2, 3}, 30)};
  expect_batches_like_a_loop({x, gy}, softmax(x), {0}, at, xb);
  expect_batches_like_a_loop({x, gy}, log_softmax(x, 0), {0}, at, xb);
  const Var y = softmax(x);
  const Var g = apply1(std::make_shared<SoftmaxGrad>(1), {gy, y}, Loc::current());
  expect_batches_like_a_loop({x, gy}, g, {1}, at, {rnd({4, 2, 3}, 31)});
  expect_batches_like_a_loop({x, gy}, g, {0}, at, xb);
  expect_batches_like_a_loop({x, gy}, g, {0, 1}, at, {rnd({4, 2, 3}, 32), rnd({4, 2, 3}, 33)});
}

TEST(Vectorize, AnOpWithoutARuleLoopsOverTheBatch) {
  Var x = matrix("x", f64), y = matrix("y", f64);
  const std::vector<Tensor> at{rnd({2, 3}, 34), rnd({2, 3}, 35)};
  Function f = expect_batches_like_a_loop({x, y}, cumsum(x, 1) * y, {0}, at, {rnd({4, 2, 3}, 36)});
  EXPECT_NE(f.graph_text().find("scan{"), std::string::npos) << f.graph_text();
  expect_batches_like_a_loop({x, y}, concatenate({x, y}, 1), {1}, at, {rnd({4, 2, 3}, 37)});
  expect_batches_like_a_loop({x, y}, sort(x, 0) + slice(y, 0, 1, 2)[0], {0, 1}, at, {rnd({3, 2, 3}, 38), rnd({3, 2, 3}, 39)});
}

TEST(Vectorize, F32StaysF32) {
  Var x = matrix("x", f32), w = matrix("w", f32);
  const Var out = mean(softmax(tanh(dot(x, w)) + 1.0), {0});
  expect_batches_like_a_loop({x, w}, out, {1}, {rnd({2, 3}, 40, f32), rnd({3, 4}, 41, f32)}, {rnd({3, 3, 4}, 42, f32)}, 1e-5);
}

TEST(Vectorize, KeepsWhatReadsNoBatchAndRefusesABatchOfTheWrongType) {
  Var x = vector("x", f64), y = vector("y", f64);
  const Var untouched = exp(y);
  const std::vector<Var> out = vectorize_graph({x * 2.0, untouched}, {{x, batch_of(x)}});
  EXPECT_EQ(out[0].ndim(), 2);
  EXPECT_TRUE(out[1].same(untouched));
  expect_error<TypeError>([&] { vectorize_graph({x * 2.0}, {{x, vector("b", f64)}}); },
                          {"vectorize_graph: the batch of 'x' f64[?]", "2 dimensions (a leading batch axis)", "got f64[?]"});
  expect_error<TypeError>([&] { vectorize_graph({x * 2.0}, {{x, matrix("b", f32)}}); }, {"must have dtype f64", "got f32[?,?]"});
}
