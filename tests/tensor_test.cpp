#include <thread>
#include <vector>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

TEST(Tensor, FromInfersDtypeAndShape) {
  Tensor a = Tensor::from({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_EQ(a.dtype(), f32);
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.numel(), 6);
  EXPECT_EQ(a.nbytes(), 24u);
  EXPECT_TRUE(a.is_contiguous());
  EXPECT_EQ(Tensor::from(std::vector<double>{1, 2}).dtype(), f64);
  EXPECT_EQ(Tensor::from(std::vector<int32_t>{1, 2}).dtype(), i32);
  EXPECT_EQ(Tensor::from(std::vector<int64_t>{1, 2}).dtype(), i64);
  EXPECT_EQ(Tensor::from(std::vector<bool>{true, false}).dtype(), b8);
  EXPECT_EQ(Tensor::from(std::vector<bool>{true, false}).to_vector<bool>(), (std::vector<bool>{true, false}));
}

TEST(Tensor, FromRejectsWrongCount) {
  expect_error<ShapeError>([] { Tensor::from({1.0, 2.0}, {3}); }, {"2 values", "(3,)"});
}

TEST(Tensor, FactoriesFillValues) {
  expect_values(Tensor::zeros({2, 2}), {0, 0, 0, 0});
  expect_values(Tensor::ones({3}, i32), {1, 1, 1});
  expect_values(Tensor::full({2}, 2.5, f64), {2.5, 2.5});
}

TEST(Tensor, DataChecksDtype) {
  Tensor a = Tensor::zeros({2}, f64);
  EXPECT_NO_THROW(a.data<double>());
  expect_error<TypeError>([&] { a.data<float>(); }, {"holds f64", "T is f32"});
}

TEST(Tensor, ItemAndToVectorConvert) {
  Tensor a = Tensor::from({7}, {1});
  EXPECT_EQ(a.item<int>(), 7);
  EXPECT_DOUBLE_EQ(a.item<double>(), 7.0);
  expect_error<ShapeError>([] { Tensor::zeros({2}).item<float>(); }, {"exactly one element"});
}

TEST(Tensor, WrapIsAViewOfCallerMemory) {
  std::vector<float> buf{1, 2, 3, 4};
  auto before = allocator_stats().n_allocations;
  Tensor t = Tensor::wrap(buf.data(), {2, 2});
  EXPECT_EQ(allocator_stats().n_allocations, before);
  buf[3] = 9;
  EXPECT_FLOAT_EQ(t.data<float>()[3], 9.f);
}

TEST(Tensor, AllocationsAreAlignedAndCounted) {
  auto s0 = allocator_stats();
  {
    Tensor t = Tensor::empty({100}, f32);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
    auto s1 = allocator_stats();
    EXPECT_EQ(s1.bytes_in_use - s0.bytes_in_use, 400);
    EXPECT_EQ(s1.live_storages - s0.live_storages, 1);
    EXPECT_GE(s1.peak_bytes, s1.bytes_in_use);
    EXPECT_EQ(s1.n_allocations - s0.n_allocations, 1);
  }
  EXPECT_EQ(allocator_stats().bytes_in_use, s0.bytes_in_use);
  reset_peak_bytes();
  EXPECT_EQ(allocator_stats().peak_bytes, allocator_stats().bytes_in_use);
}

TEST(Tensor, LargeFreedBlocksAreReusedAndCanBeReleased) {
  release_cached_memory();
  const void* first;
  {
    Tensor t = Tensor::empty({1 << 20}, f32);  // 4 MiB
    first = t.raw_data();
  }
  auto s = allocator_stats();
  EXPECT_EQ(s.bytes_cached, 4 << 20);
  {
    Tensor again = Tensor::empty({1 << 20}, f32);
    EXPECT_EQ(again.raw_data(), first);  // the same block, its pages already touched
    EXPECT_EQ(allocator_stats().bytes_cached, 0);
    EXPECT_EQ(allocator_stats().bytes_in_use - s.bytes_in_use, 4 << 20);
  }
  release_cached_memory();
  EXPECT_EQ(allocator_stats().bytes_cached, 0);
}

TEST(Tensor, SmallFreedBlocksAreReusedByTheirThreadAndCanBeReleased) {
  release_cached_memory();
  const int64_t others = allocator_stats().bytes_cached;  // what other threads (OpenMP's) keep
  const void* first;
  {
    Tensor t = Tensor::empty({1000}, f32);  // 4000 bytes: the 4096-byte class
    first = t.raw_data();
  }
  const auto s = allocator_stats();
  EXPECT_EQ(s.bytes_cached - others, 4096);
  {
    Tensor again = Tensor::empty({1020}, f32);  // 4080 bytes: the same class, the same block
    EXPECT_EQ(again.raw_data(), first);
    EXPECT_EQ(allocator_stats().bytes_cached - others, 0);
    EXPECT_EQ(allocator_stats().n_system_allocations, s.n_system_allocations);
    EXPECT_EQ(allocator_stats().n_allocations, s.n_allocations + 1);
  }
  std::thread([] { Tensor elsewhere = Tensor::empty({1020}, f32); }).join();
  EXPECT_EQ(allocator_stats().bytes_cached - others, 4096) << "a thread's kept blocks are freed when it exits";
  release_cached_memory();
  EXPECT_EQ(allocator_stats().bytes_cached - others, 0);
}

TEST(Tensor, TheSmallBlocksKeptAreBounded) {
  release_cached_memory();
  const int64_t others = allocator_stats().bytes_cached;
  {
    std::vector<Tensor> many;
    for (int i = 0; i < 200; ++i) many.push_back(Tensor::empty({200'000}, f32));  // 800 kB each
  }
  EXPECT_LE(allocator_stats().bytes_cached - others, int64_t{64} << 20);
  EXPECT_GT(allocator_stats().bytes_cached - others, int64_t{32} << 20);
  release_cached_memory();
}

TEST(Tensor, SizeClassesAtTheirEdges) {
  // Each size is served, and a block freed is handed out again for any size of its class.
  for (int64_t bytes : {1, 64, 65, 1024, 1025, 1280, 1281, 2048, 2049, (1 << 20) - 1, 1 << 20}) {
    const int64_t floats = (bytes + 3) / 4;
    const void* first;
    {
      Tensor t = Tensor::empty({floats}, f32);
      first = t.raw_data();
    }
    Tensor again = Tensor::empty({floats}, f32);
    EXPECT_EQ(again.raw_data(), first) << bytes << " bytes";
  }
}

#if defined(__SANITIZE_ADDRESS__)
TEST(TensorDeathTest, ABlockThePoolKeepsIsPoisonedUnderAddressSanitizer) {
  EXPECT_DEATH(
      {
        const float* released;
        {
          Tensor t = Tensor::zeros({100});
          released = t.data<float>();
        }
        volatile float read = released[5];
        (void)read;
      },
      "use-after-poison");
}
#endif

TEST(Tensor, ViewsShareStorageAndCloneDoesNot) {
  Tensor a = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  Tensor t = a.view({3, 2}, {1, 3}, 0);  // transpose
  EXPECT_FALSE(t.is_contiguous());
  expect_values(t, {1, 4, 2, 5, 3, 6});
  EXPECT_TRUE(t.shares_memory(a));
  Tensor c = t.clone();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_memory(a));
  expect_values(c, {1, 4, 2, 5, 3, 6});
}

TEST(Tensor, SharesMemoryIsExactForInterleavedViews) {
  Tensor a = Tensor::zeros({10}, f32);
  Tensor even = a.view({5}, {2}, 0), odd = a.view({5}, {2}, 1);
  EXPECT_FALSE(even.shares_memory(odd));
  EXPECT_TRUE(even.shares_memory(a));
  Tensor first = a.view({5}, {1}, 0), second = a.view({5}, {1}, 5);
  EXPECT_FALSE(first.shares_memory(second));
  EXPECT_TRUE(a.view({6}, {1}, 0).shares_memory(second));
}

TEST(Tensor, ReshapeViewsContiguousAndCopiesOthers) {
  Tensor a = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  EXPECT_TRUE(a.reshape({3, 2}).shares_memory(a));
  Tensor t = a.view({3, 2}, {1, 3}, 0);
  Tensor r = t.reshape({6});
  EXPECT_FALSE(r.shares_memory(a));
  expect_values(r, {1, 4, 2, 5, 3, 6});
}

TEST(Tensor, ToConvertsDtype) {
  expect_values(Tensor::from({1.5, -2.0}, {2}).to(i32), {1, -2});
  expect_values(Tensor::from({0, 3}, {2}).to(b8), {0, 1});
}

TEST(Tensor, AliasIsAFreshHandle) {
  Tensor a = Tensor::ones({3});
  Tensor b = a.alias();
  a.dispose();
  EXPECT_TRUE(a.is_disposed());
  expect_values(b, {1, 1, 1});
  expect_error<DisposedError>([&] { (void)a.shape(); }, {"disposed"});
}

TEST(Tensor, DisposeReleasesMemory) {
  auto s0 = allocator_stats();
  Tensor a = Tensor::empty({1000}, f64);
  EXPECT_EQ(allocator_stats().bytes_in_use - s0.bytes_in_use, 8000);
  a.dispose();
  EXPECT_EQ(allocator_stats().bytes_in_use, s0.bytes_in_use);
}

TEST(Tensor, EmptyHandleSaysSo) {
  Tensor t;
  EXPECT_FALSE(t.defined());
  expect_error<Error>([&] { (void)t.numel(); }, {"empty"});
}

TEST(Threads, SetNumThreads) {
  int before = num_threads();
  set_num_threads(1);
  EXPECT_EQ(num_threads(), 1);
  set_num_threads(before);
  expect_error<Error>([] { set_num_threads(0); }, {"from 1 to"});
  expect_error<Error>([] { set_num_threads(1 << 20); }, {"from 1 to 4096", "1048576"});
}

// Issue 9, item 5: a view reaching past its storage read arbitrary memory; a shape whose element
// count overflows became an empty tensor.
TEST(Tensor, ViewsAreCheckedAgainstTheirStorage) {
  Tensor four = Tensor::ones({4});
  expect_error<ShapeError>([&] { four.view({1 << 20}, {1}, 0); }, {"(1048576,)", "outside its storage of 4 elements"});
  expect_error<ShapeError>([&] { four.view({2, 2}, {1}, 0); }, {"2 dimensions but 1 strides"});
  expect_error<ShapeError>([&] { four.view({2}, {1}, 3); }, {"outside its storage"});
  expect_error<ShapeError>([&] { four.view({2}, {-1}, 0); }, {"outside its storage"});
  expect_error<ShapeError>([&] { four.view({2}, {1}, -1); }, {"offset is negative"});
  expect_error<ShapeError>([&] { four.view({-2}, {1}, 0); }, {"negative dimension"});
  expect_values(four.view({2}, {-2}, 3), {1, 1});  // a reversed strided view inside the storage is fine
  expect_values(four.view({0}, {1000}, 4), {});      // an empty view touches nothing
}

TEST(Tensor, ShapeArithmeticOverflowIsAShapeError) {
  expect_error<ShapeError>([] { Tensor::zeros({int64_t{1} << 32, int64_t{1} << 32}); }, {"(4294967296,4294967296)", "64-bit"});
  expect_error<ShapeError>([] { Tensor::zeros({int64_t{1} << 62}, f64); }, {"bytes", "64-bit"});
  expect_error<ShapeError>([] { Tensor::zeros({3, -1}); }, {"negative dimension"});
  Var x = vector("x");
  Function f = function({x}, {reshape(x, {int64_t{1} << 40, int64_t{1} << 40, -1})});
  expect_error<ShapeError>([&] { f(Tensor::zeros({4})); }, {"reshape", "overflows"});
}

// Issue 9, item 11: a huge allocation threw a bare std::bad_alloc.
TEST(Tensor, AnAllocationTheSystemRefusesIsAMemoryError) {
  expect_error<MemoryError>([] { Tensor::empty({int64_t{1} << 40}, f64); }, {"8796093022208 bytes", "f64(1099511627776,)"});
}

// Issue 9, item 14: DisposedError told the user to call functions that did not exist yet; it
// names what the user can do, all of which exist now.
TEST(Tensor, DisposedErrorNamesWhatTheUserCanDo) {
  Tensor a = Tensor::ones({3});
  a.dispose();
  expect_error<DisposedError>([&] { (void)a.numel(); }, {"disposed", "alias()", "clone()", "move_to_outer_scope()", "detach_from_scope()"});
}

TEST(Tensor, CopyFromAnOverlappingViewReadsAllOfTheSourceFirst) {
  Tensor a = Tensor::from(std::vector<float>{1, 2, 3, 4}, {2, 2});
  a.copy_from(a.view({2, 2}, {1, 2}, 0));  // a[:] = a.T
  expect_values(a, {1, 3, 2, 4}, 0);
  Tensor row = Tensor::from(std::vector<float>{1, 2, 3, 4, 5});
  row.view({4}, {1}, 1).copy_from(row.view({4}, {1}, 0));  // shifted by one
  expect_values(row, {1, 1, 2, 3, 4}, 0);
}

TEST(Tensor, ReshapeInfersOneDimensionGivenAsMinusOne) {
  const Tensor a = Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.reshape({-1}).shape(), Shape{6});
  EXPECT_EQ(a.reshape({3, -1}).shape(), (Shape{3, 2}));
  expect_error<ShapeError>([&] { a.reshape({4, -1}); }, {"(4,-1)", "f32(2,3)"});
  expect_error<ShapeError>([&] { a.reshape({-1, -1}); }, {"(-1,-1)"});
}

TEST(Tensor, NoElementsMeansNoWorkHoweverLargeTheOtherDimensions) {
  // Found by the eager trial: copies and elementwise work walked every row of a (2^63 - 1, 0)
  // view (a crafted .npy loads one): they never ended.
  const Tensor z = Tensor::zeros({0, INT64_MAX});
  EXPECT_EQ(transpose(z).contiguous().shape(), (Shape{INT64_MAX, 0}));
  EXPECT_EQ((transpose(z) + 1.0).shape(), (Shape{INT64_MAX, 0}));
  Var x = matrix("x");
  EXPECT_EQ(function({x}, {exp(transpose(x)) * 2.0})(z)[0].shape(), (Shape{INT64_MAX, 0}));
}

// Two storages kiln allocated never overlap, so shares_memory answers them without their shapes;
// a storage that borrows memory (Tensor::wrap) is compared byte for byte, even where it borrows
// from one kiln allocated.
TEST(Tensor, SharesMemoryAcrossOwnedAndBorrowedStorages) {
  const Tensor a = Tensor::zeros({4, 8}), b = Tensor::zeros({4, 8});
  EXPECT_FALSE(a.shares_memory(b));
  EXPECT_TRUE(a.shares_memory(a.view({2, 8}, {8, 1}, 16)));
  const Tensor wrapped_tail = Tensor::wrap(const_cast<float*>(a.data<float>()) + 16, {2, 8});
  EXPECT_TRUE(wrapped_tail.shares_memory(a));
  EXPECT_TRUE(a.shares_memory(wrapped_tail));
  EXPECT_FALSE(wrapped_tail.shares_memory(a.view({2, 8}, {8, 1}, 0))) << "the head of a and its tail do not overlap";
  EXPECT_FALSE(wrapped_tail.shares_memory(b));
  std::vector<float> user(16);
  EXPECT_TRUE(Tensor::wrap(user.data(), {16}).shares_memory(Tensor::wrap(user.data() + 15, {1})));
  EXPECT_FALSE(Tensor::wrap(user.data(), {8}).shares_memory(Tensor::wrap(user.data() + 8, {8})));
}
