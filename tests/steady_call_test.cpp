// A steady loop of calls allocates nothing: with keep_buffers and borrowed outputs, a training step
// runs without one operator new (this binary counts every one, on every thread).
#include <gtest/gtest.h>

#include "count_operator_new.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// The benchmark's model (tanh hidden layers, softmax cross-entropy averaged over the batch, SGD)
// at a smaller size.
struct TrainingStep {
  Var x = matrix("x"), y = vector("y", i64), loss;
  Updates updates;
  std::vector<Shared> params;
  explicit TrainingStep(const std::vector<int64_t>& layers) {
    Var h = x;
    for (size_t l = 0; l + 1 < layers.size(); ++l) {
      params.push_back(shared(random_tensor({layers[l], layers[l + 1]}, f32, -0.1, 0.1, static_cast<uint32_t>(l)), "W"));
      params.push_back(shared(Tensor::zeros({layers[l + 1]}), "b"));
      Var a = dot(h, params[params.size() - 2]) + params.back();
      h = l + 2 < layers.size() ? tanh(a) : a;
    }
    loss = mean(categorical_crossentropy(softmax(h), y));
    std::vector<Var> grads = grad(loss, std::vector<Var>(params.begin(), params.end()));
    for (size_t i = 0; i < params.size(); ++i) updates.push_back({params[i], params[i] - 0.1 * grads[i]});
  }
};

int64_t allocations_per_steady_call(const Function& f, const std::vector<Tensor>& args) {
  std::vector<Tensor> outputs;
  for (int i = 0; i < 3; ++i) f.call(args, outputs);
  const int64_t before = allocations_so_far();
  for (int i = 0; i < 10; ++i) f.call(args, outputs);
  return (allocations_so_far() - before) / 10;
}

}  // namespace

TEST(SteadyCall, ATrainingStepAllocatesNothing) {
  const std::vector<Tensor> args{random_tensor({16, 64}, f32, -1, 1, 5),
                                 Tensor::from(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5})};
  for (const auto& layers : std::vector<std::vector<int64_t>>{{64, 10}, {64, 32, 10}, {64, 32, 32, 32, 10}})
    for (int threads : {1, 2}) {
      ThreadsForScope scope(threads);
      SCOPED_TRACE(std::to_string(layers.size() - 1) + " layers, " + std::to_string(threads) + " threads");
      TrainingStep step(layers);
      Function without_outputs = function({step.x, step.y}, {}, {.updates = step.updates, .keep_buffers = true});
      EXPECT_EQ(allocations_per_steady_call(without_outputs, args), 0);
      Function with_loss = function({step.x, step.y}, {Out(step.loss, {.borrow = true})},
                                    {.updates = step.updates, .keep_buffers = true});
      EXPECT_EQ(allocations_per_steady_call(with_loss, args), 0);
      // The updates stay atomic: a call that fails (a label out of range) leaves every variable as it was.
      const Tensor before = step.params[0].get_value();
      const std::vector<Tensor> bad{args[0], Tensor::from(std::vector<int64_t>(16, 10))};
      std::vector<Tensor> outputs;
      EXPECT_THROW(with_loss.call(bad, outputs), ShapeError);
      expect_values(step.params[0].get_value(), before.to_vector<double>(), 0);
    }
}

TEST(SteadyCall, AnAdamStepAllocatesNothing) {
  // Each parameter's step is one fused node with three outputs (both moments and the parameter),
  // written over the shared variables' own buffers; on a parameter large enough for threads and
  // streaming stores too. A call that fails changes no shared value.
  const std::vector<Tensor> args{random_tensor({16, 64}, f32, -1, 1, 5),
                                 Tensor::from(std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5})};
  for (int threads : {1, 2}) {
    ThreadsForScope scope(threads);
    SCOPED_TRACE(std::to_string(threads) + " threads");
    TrainingStep step({64, 32, 10});
    Function f = function({step.x, step.y}, {Out(step.loss, {.borrow = true})},
                          {.updates = adam(step.loss, step.params), .keep_buffers = true});
    EXPECT_EQ(allocations_per_steady_call(f, args), 0);
    const Tensor before = step.params[0].get_value();
    const std::vector<Tensor> bad{args[0], Tensor::from(std::vector<int64_t>(16, 10))};
    std::vector<Tensor> outputs;
    EXPECT_THROW(f.call(bad, outputs), ShapeError);
    expect_values(step.params[0].get_value(), before.to_vector<double>(), 0);

    Shared big = shared(Tensor::full({1 << 21}, 0.5f), "big");
    Var g = vector("g");
    Function large = function({g}, {}, {.updates = adam(Gradients(std::vector<Var>{g}), {big}), .keep_buffers = true});
    EXPECT_EQ(allocations_per_steady_call(large, {Tensor::full({1 << 21}, 1e-3f)}), 0);
  }
}

TEST(SteadyCall, AFunctionWithoutKeptBuffersStillAllocatesItsArenaPerCall) {
  TrainingStep step({64, 10});
  Function f = function({step.x, step.y}, {}, {.updates = step.updates});
  const std::vector<Tensor> args{random_tensor({16, 64}, f32, -1, 1, 5), Tensor::from(std::vector<int64_t>(16, 3))};
  EXPECT_GT(allocations_per_steady_call(f, args), 0);
}

TEST(SteadyCall, AReshapeThatCopiesRunsAgainOnEveryKeptCall) {
  // A reshape views a contiguous value but copies a reversed one into a buffer of its own: a warm
  // call must not take that copy for a view of the arena that still stands.
  Var x = vector("x", f64);
  Var y = reshape(slice(cumsum(x, 0), 0, std::nullopt, std::nullopt, -1), {-1}) * 2.0;
  Function f = function({x}, {y}, {.keep_buffers = true});
  expect_values(f(Tensor::from(std::vector<double>{1, 2, 3}))[0], {12, 6, 2});
  expect_values(f(Tensor::from(std::vector<double>{4, 5, 6}))[0], {30, 18, 8});
}

TEST(SteadyCall, AKeptCallRemakesTheViewsOfABranchAndOfARunLengthLoop) {
  // Found by a new-user trial: a warm call took every view in the kept arena to stand. A branch
  // the last call did not take kept the views of an older plan (another input shape: a 5-element
  // result came back as [-2, -4, -6, 0, 0]), and the rows a loop with until ran were those of the
  // first call on every later call.
  Var b = vector("b", f64);
  Function branch = function({b}, {Out(ifelse(sum(b) > 0.0, b, b * 2.0), {.borrow = true})}, {.keep_buffers = true});
  expect_values(branch(Tensor::from(std::vector<double>{1, 2, 3}))[0], {1, 2, 3});
  expect_values(branch(Tensor::from(std::vector<double>{-1, -2, -3}))[0], {-2, -4, -6});
  expect_values(branch(Tensor::from(std::vector<double>{1, 2, 3, 4, 5}))[0], {1, 2, 3, 4, 5});
  expect_values(branch(Tensor::from(std::vector<double>{-1, -2, -3, -4, -5}))[0], {-2, -4, -6, -8, -10});
  Var t = scalar("t", f64);
  ScanResult counts = scan(
      [](const std::vector<Var>& a) {
        const Var n = a[0] + 1.0;
        return std::vector<Var>{n, until(n >= a[1])};
      },
      {.outputs_info = {Taps(Var(0.0))}, .non_sequences = {t}, .n_steps = Var(int64_t{100})});
  Function loop = function({t}, {Out(counts.outputs[0], {.borrow = true}), sum(counts.outputs[0])}, {.keep_buffers = true});
  for (double until_count : {3.0, 5.0, 2.0}) {
    const std::vector<Tensor> r = loop(Tensor::scalar(until_count));
    std::vector<double> want;
    for (double v = 1; v <= until_count; ++v) want.push_back(v);
    expect_values(r[0], want);
    expect_values(r[1], {until_count * (until_count + 1) / 2});
  }
}

TEST(SteadyCall, AScopedEagerLoopAllocatesNothingAfterItsFirstPass) {
  const Tensor x = random_tensor({60, 784}, f32, 0, 1, 1), big = random_tensor({1'000'000}, f32, -1, 1, 4);
  const Tensor w1 = random_tensor({784, 50}, f32, -0.1, 0.1, 2), b1 = Tensor::zeros({50});
  const Tensor w2 = random_tensor({50, 10}, f32, -0.1, 0.1, 3), b2 = Tensor::zeros({10});
  std::vector<int64_t> label_values(60);
  for (int64_t i = 0; i < 60; ++i) label_values[static_cast<size_t>(i)] = i % 10;
  const Tensor labels = Tensor::from(label_values);
  for (int threads : {1, 2}) {
    ThreadsForScope threads_scope(threads);
    // oneDNN's multi-threaded sgemm takes a small block of its own from the heap on every call
    // (measured: one of 192 bytes), so the products run on one thread only.
    const bool with_products = threads == 1;
    int64_t checked = 0;
    auto step = [&] {
      DisposeScope scope;
      if (with_products) {
        Tensor h = tanh(dot(x, w1) + b1);
        Tensor p = softmax(dot(h, w2) + b2, 1);
        checked += (argmax(p, 1) == labels).sum().item<int64_t>() >= 0;
      }
      Tensor shifted = (x * 2.0 - 1.0).reshape({60, 28, 28});
      Tensor corner = slice(transpose(shifted.reshape({60, 784})), 0, 0, 10);
      Tensor wide = exp(-sqr(big)) * 0.5 + big;  // large enough to run on every thread
      checked += corner.numel() == 600 && max(wide).item<float>() > 0;
    };
    for (int i = 0; i < 3; ++i) step();
    const AllocatorStats before = allocator_stats();
    const ScopeStatistics counted_before = scope_statistics();
    const int64_t news_before = allocations_so_far();
    for (int i = 0; i < 20; ++i) step();
    EXPECT_EQ(allocations_so_far() - news_before, 0) << threads << " threads";
    const AllocatorStats after = allocator_stats();
    EXPECT_EQ(after.n_system_allocations, before.n_system_allocations) << "every storage came from the pool";
    EXPECT_GT(after.n_allocations, before.n_allocations);
    EXPECT_EQ(after.live_storages, before.live_storages);
    EXPECT_EQ(scope_statistics().live, counted_before.live);
    EXPECT_EQ(checked, with_products ? 46 : 23);
  }
}

TEST(SteadyCall, ADropoutTrainingStepAllocatesNothing) {
  // The mask's shape follows its input's, found while planning: the draw is planned like any value.
  RandomStreams rng(4);
  Shared w = shared(Tensor::full({20, 10}, 0.1), "w");
  Var x = matrix("x");
  Var h = tanh(dot(x, w));
  Var cost = mean(sqr(h * rng.binomial(shape_of(h), int64_t{1}, 0.5, f32)));
  Function step = function({x}, {Out(cost, {.borrow = true})}, {.updates = sgd(cost, {w}, 0.1), .keep_buffers = true});
  const int threads_before = num_threads();
  set_num_threads(1);
  const std::vector<Tensor> args{Tensor::ones({8, 20})};
  std::vector<Tensor> out;
  for (int i = 0; i < 3; ++i) step.call(args, out);
  const int64_t before = allocations_so_far();
  for (int i = 0; i < 20; ++i) step.call(args, out);
  EXPECT_EQ(allocations_so_far() - before, 0);
  set_num_threads(threads_before);
}

TEST(SteadyCall, ASparseProductAllocatesNothing) {
  // A CSR product's size follows from its parts' shapes: planned, with no per-call allocation.
  const SparseTensor x_value = sparse_from_dense(Tensor::from(std::vector<float>{1, 0, 2, 0, 0, 3, 4, 5, 0}, {3, 3}), SparseFormat::csr);
  SparseVar x = csr_matrix("x");
  Var w = matrix("w");
  Function f = function({x, w}, {Out(sum(dot(x, w) * 2.0, 1), {.borrow = true})}, {.keep_buffers = true});
  std::vector<Tensor> args = sparse_parts(x_value), out;
  args.push_back(Tensor::ones({3, 4}));
  for (int i = 0; i < 3; ++i) f.call(args, out);
  const int64_t before = allocations_so_far();
  for (int i = 0; i < 20; ++i) f.call(args, out);
  EXPECT_EQ(allocations_so_far() - before, 0);
}

TEST(SteadyCall, AVectorOutputAllocatesNothing) {
  // A borrowed output of one or more dimensions is handed over in a recycled handle: its shape and
  // strides were copied into fresh vectors on every call before.
  Var w = matrix("w");
  Function f = function({w}, {Out(sum(w * 2.0, 1), {.borrow = true})}, {.keep_buffers = true});
  const std::vector<Tensor> args{Tensor::ones({3, 4})};
  EXPECT_EQ(allocations_per_steady_call(f, args), 0);
}

TEST(SteadyCall, PoolingAndItsGradientsAllocateNothing) {
  // Max and average pooling and their gradients (LeNet's 2x2 windows and a padded 3x3), large
  // enough to split over planes on two threads, in an update step of a 4-D shared variable.
  Var x = tensor4("x");
  const std::vector<Tensor> args{random_tensor({4, 20, 24, 24}, f32, -1, 1, 2)};
  const Shared w = shared(random_tensor({4, 20, 24, 24}, f32, 0.5, 1.5, 1), "w");
  const Var h = x * w;
  const Pool2dOptions padded{.window = {3, 3}, .stride = std::array<int64_t, 2>{1, 1}, .padding = {1, 1}};
  for (int threads : {1, 2}) {
    ThreadsForScope scope(threads);
    const std::vector<std::pair<std::string, Var>> losses{{"max 2x2", sum(max_pool2d(h))}, {"avg 2x2", sum(avg_pool2d(h))},
                                                          {"max 3x3 padded", sum(max_pool2d(h, padded))},
                                                          {"avg 3x3 padded", sum(avg_pool2d(h, padded))}};
    for (const auto& [name, loss] : losses) {
      SCOPED_TRACE(name + ", " + std::to_string(threads) + " threads");
      Function f = function({x}, {Out(loss, {.borrow = true})}, {.updates = {{w, w - 0.01 * grad(loss, w)}}, .keep_buffers = true});
      EXPECT_EQ(allocations_per_steady_call(f, args), 0);
    }
  }
}

TEST(SteadyCall, AnEmbeddingStepWithASparseGradientAllocatesNothing) {
  // Row lookups with sparse_grad: the gradient's parts are sized by the lookups' shapes (planned)
  // and the update is written over the embedding's own buffer.
  Shared E = shared(random_tensor({50, 8}, f32, -1, 1, 3), "E");
  Var ids = matrix("ids", i64);
  const Var cost = sum(square(mean(take(E, ids), {1})));
  Function f = function({ids}, {Out(cost, {.borrow = true})}, {.updates = {{E, E - 0.1 * sparse_grad(cost, E)}}, .keep_buffers = true});
  const std::vector<Tensor> args{Tensor::from(std::vector<int64_t>{3, 7, 3, 49, 0, 12}, {2, 3})};
  EXPECT_EQ(allocations_per_steady_call(f, args), 0);
}
