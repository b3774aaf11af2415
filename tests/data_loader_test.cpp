// DataLoader: batching, seeded shuffle, drop_last, prefetch, and dispose_batch as the TorchSharp
// seed (seeds/torchsharp-memory-management.md) describes it, the MyDataset trap included.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

TensorDataset numbers(int64_t n) {
  std::vector<float> values(static_cast<size_t>(n * 2));
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    values[static_cast<size_t>(2 * i)] = static_cast<float>(i);
    values[static_cast<size_t>(2 * i + 1)] = static_cast<float>(-i);
    labels[static_cast<size_t>(i)] = i;
  }
  return TensorDataset({{"x", Tensor::from(values, {n, 2})}, {"label", Tensor::from(labels)}});
}

std::vector<std::vector<int64_t>> epoch_labels(DataLoader& loader) {
  std::vector<std::vector<int64_t>> batches;
  for (const NamedTensors& batch : loader) batches.push_back(batch["label"].to_vector<int64_t>());
  return batches;
}

}  // namespace

TEST(DataLoader, BatchesStackTheExamplesInOrder) {
  TensorDataset dataset = numbers(5);
  DataLoader loader(dataset, {.batch_size = 2});
  EXPECT_EQ(loader.size(), 3);
  int batches = 0;
  for (const NamedTensors& batch : loader) {
    const int64_t first = 2 * batches++;
    const int64_t rows = first == 4 ? 1 : 2;
    EXPECT_EQ(batch["x"].shape(), (Shape{rows, 2}));
    std::vector<double> expected;
    for (int64_t i = first; i < first + rows; ++i) expected.insert(expected.end(), {double(i), -double(i)});
    expect_values(batch["x"], expected, 0);
  }
  EXPECT_EQ(batches, 3);
}

TEST(DataLoader, DropLastDropsTheShortBatch) {
  TensorDataset dataset = numbers(5);
  DataLoader loader(dataset, {.batch_size = 2, .drop_last = true});
  EXPECT_EQ(loader.size(), 2);
  EXPECT_EQ(epoch_labels(loader), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}}));
}

TEST(DataLoader, TheShuffledOrderFollowsFromTheSeedAndChangesEachEpoch) {
  TensorDataset dataset = numbers(50);
  DataLoader a(dataset, {.batch_size = 7, .shuffle = true, .seed = 42});
  DataLoader b(dataset, {.batch_size = 7, .shuffle = true, .seed = 42});
  DataLoader c(dataset, {.batch_size = 7, .shuffle = true, .seed = 43});
  const auto a1 = epoch_labels(a), a2 = epoch_labels(a);
  EXPECT_EQ(a1, epoch_labels(b));
  EXPECT_EQ(a2, epoch_labels(b));
  EXPECT_NE(a1, a2);
  EXPECT_NE(a1, epoch_labels(c));
  std::set<int64_t> seen;
  for (const auto& batch : a1) seen.insert(batch.begin(), batch.end());
  EXPECT_EQ(seen.size(), 50u) << "each example once per epoch";
  EXPECT_NE(a1.front(), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6}));
}

TEST(DataLoader, DisposeBatchDisposesEachBatchWhenTheNextIsFetchedAndTheLastWhenTheEpochEnds) {
  TensorDataset dataset = numbers(4);
  DataLoader loader(dataset, {.batch_size = 2});
  std::vector<Tensor> seen;
  const int loop_line = __LINE__ + 1;
  for (const NamedTensors& batch : loader) {
    for (const Tensor& earlier : seen) EXPECT_TRUE(earlier.is_disposed());
    EXPECT_FALSE(batch["x"].is_disposed());
    seen.push_back(batch["x"]);
  }
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen.back().is_disposed());
  expect_error<DisposedError>([&] { (void)seen.back().to_vector<float>(); },
                              {"f32(2,2)", "made at data_loader_test.cpp:" + std::to_string(loop_line),
                               "disposed at data_loader_test.cpp:" + std::to_string(loop_line)});
}

TEST(DataLoader, TheFirstBatchIsDisposedWithItsIteratorUnlessDisposeBatchIsOff) {
  // The seed: dataLoader1.First()[0].IsInvalid is true, with disposeBatch: false it is false.
  TensorDataset dataset({{"t", Tensor::zeros({3})}});
  DataLoader disposing(dataset, {.batch_size = 1});
  DataLoader keeping(dataset, {.batch_size = 1, .dispose_batch = false});
  Tensor from_disposing, from_keeping;
  {
    from_disposing = (*disposing.begin())["t"];
    from_keeping = (*keeping.begin())["t"];
  }
  EXPECT_TRUE(from_disposing.is_disposed());
  EXPECT_FALSE(from_keeping.is_disposed());
  EXPECT_EQ(from_keeping.shape(), Shape{1});
  from_keeping.dispose();
}

TEST(DataLoader, BatchesAreDetachedFromEveryScope) {
  TensorDataset dataset = numbers(4);
  DataLoader keeping(dataset, {.batch_size = 2, .dispose_batch = false});
  std::vector<Tensor> kept;
  {
    DisposeScope outer;
    for (const NamedTensors& batch : keeping) {
      DisposeScope per_batch;
      kept.push_back(batch["x"]);
      Tensor doubled = batch["x"] * 2.0;
    }
  }
  for (const Tensor& t : kept) EXPECT_FALSE(t.is_disposed()) << "no scope disposes a batch";
  expect_values(kept[1], {2, -2, 3, -3}, 0);
  for (const Tensor& t : kept) t.dispose();
}

TEST(DataLoader, ALoopOverTheLoaderInScopesEndsWithNothingLive) {
  TensorDataset dataset = numbers(10);
  DataLoader loader(dataset, {.batch_size = 3, .shuffle = true});
  double total = 0;
  auto epoch = [&] {
    for (const NamedTensors& batch : loader) {
      DisposeScope scope;
      total += sum(batch["x"] * 2.0).item<double>();
    }
  };
  epoch();  // kiln keeps what its eager operations need for these shapes (not the user's tensors)
  const ScopeStatistics start = scope_statistics();
  const int64_t storages = allocator_stats().live_storages;
  for (int i = 0; i < 3; ++i) epoch();
  EXPECT_EQ(total, 0.0);
  EXPECT_EQ(scope_statistics().live, start.live);
  EXPECT_EQ(allocator_stats().live_storages, storages);
}

namespace {

// The seed's MyDataset: it keeps the tensor it made in get for its next call.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(bool detach) : detach_(detach) {}
  ~CountingDataset() override { tensor_.dispose(); }
  int64_t size() const override { return 3; }
  NamedTensors get(int64_t) override {
    if (!detach_) {
      tensor_ = tensor_ + 1.0;  // made in the loader's scope: disposed after collation
    } else {
      Tensor previous = tensor_;
      tensor_ = (previous + 1.0).detach_from_scope();  // the fix docs/data.md gives
      previous.dispose();
      return {{"tensor", tensor_.alias()}};
    }
    return {{"tensor", tensor_}};
  }

 private:
  bool detach_;
  Tensor tensor_ = Tensor::zeros({}).detach_from_scope();
};

}  // namespace

TEST(DataLoader, TheMyDatasetTrapFailsWithAnErrorThatNamesTheFixAndTheFixWorks) {
  CountingDataset trap(false);
  DataLoader loader(trap, {.batch_size = 1});
  expect_error<DisposedError>([&] {
    for (const NamedTensors& batch : loader) (void)batch;
  }, {"disposed", "detach_from_scope", "docs/data.md"});

  for (int64_t batch_size : {1, 2, 3}) {
    CountingDataset fixed(true);
    DataLoader fixed_loader(fixed, {.batch_size = batch_size});
    std::vector<double> values;
    for (const NamedTensors& batch : fixed_loader)
      for (double v : batch["tensor"].to_vector<double>()) values.push_back(v);
    EXPECT_EQ(values, (std::vector<double>{1, 2, 3})) << "batch_size " << batch_size;
  }
}

namespace {

class RaggedDataset : public Dataset {
 public:
  int64_t size() const override { return 4; }
  NamedTensors get(int64_t index) override {
    if (index == 2) return {{"image", Tensor::zeros({3})}, {"label", Tensor::scalar(int64_t{0})}};
    if (index == 3) return {{"picture", Tensor::zeros({2})}, {"label", Tensor::scalar(int64_t{0})}};
    return {{"image", Tensor::zeros({2})}, {"label", Tensor::scalar(int64_t{0})}};
  }
};

}  // namespace

TEST(DataLoader, ExamplesThatCannotBeStackedNameTheFieldAndBothShapes) {
  RaggedDataset ragged;
  const ScopeStatistics start = scope_statistics();
  DataLoader loader(ragged, {.batch_size = 3});
  expect_error<ShapeError>([&] { loader.begin(); }, {"'image'", "example 2", "f32(3,)", "example 0", "f32(2,)"});
  DataLoader from_second(ragged, {.batch_size = 2, .drop_last = true});
  expect_error<Error>([&] {
    for (const NamedTensors& batch : from_second) (void)batch;
  }, {"example 3", "picture, label", "image, label"});
  EXPECT_EQ(scope_statistics().live, start.live) << "a failed collation leaves nothing live";
  expect_error<Error>([&] { DataLoader(ragged, {.batch_size = 0}); }, {"batch_size", "0"});
}

TEST(DataLoader, PrefetchGivesTheSameBatchesFromABackgroundThread) {
  TensorDataset dataset = numbers(23);
  DataLoader plain(dataset, {.batch_size = 4, .shuffle = true, .seed = 5});
  DataLoader prefetching(dataset, {.batch_size = 4, .shuffle = true, .seed = 5, .prefetch = true});
  const ScopeStatistics start = scope_statistics(Threads::all);
  for (int epoch = 0; epoch < 3; ++epoch) EXPECT_EQ(epoch_labels(plain), epoch_labels(prefetching));
  for (const NamedTensors& batch : prefetching) {  // a break stops the background thread
    (void)batch;
    break;
  }
  EXPECT_EQ(scope_statistics(Threads::all).live, start.live);
}

TEST(DataLoader, PrefetchPassesTheDatasetsErrorOn) {
  RaggedDataset ragged;
  DataLoader loader(ragged, {.batch_size = 2, .prefetch = true});
  expect_error<Error>([&] {
    for (const NamedTensors& batch : loader) (void)batch;
  }, {"example 3", "picture"});
}

TEST(DataLoader, AMovedFromIteratorIsAnErrorNotACrash) {
  TensorDataset dataset = numbers(4);
  DataLoader loader(dataset, {.batch_size = 2});
  DataLoader::Iterator it = loader.begin();
  DataLoader::Iterator moved = std::move(it);
  expect_error<Error>([&] { ++it; }, {"moved from"});
  expect_error<Error>([&] { (void)*it; }, {"moved from"});
  EXPECT_EQ((*moved)["label"].to_vector<int64_t>(), (std::vector<int64_t>{0, 1}));
}
