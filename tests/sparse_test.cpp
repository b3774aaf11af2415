// Sparse matrix values: building CSR and CSC from parts (every bad part a clear error), dense
// conversions both ways, conversion between the forms, sorting, repeats and explicit zeros.
#include <gtest/gtest.h>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// [[1, 0, 2],
//  [0, 0, 3],
//  [4, 5, 0]] in both forms.
const std::vector<double> kDense{1, 0, 2, 0, 0, 3, 4, 5, 0};

SparseTensor example_csr() {
  return SparseTensor::csr(Tensor::from(std::vector<float>{1, 2, 3, 4, 5}), Tensor::from(std::vector<int64_t>{0, 2, 2, 0, 1}),
                           Tensor::from(std::vector<int64_t>{0, 2, 3, 5}), {3, 3});
}

SparseTensor example_csc() {
  return SparseTensor::csc(Tensor::from(std::vector<float>{1, 4, 5, 2, 3}), Tensor::from(std::vector<int32_t>{0, 2, 2, 0, 1}),
                           Tensor::from(std::vector<int32_t>{0, 2, 3, 5}), {3, 3});
}

}  // namespace

TEST(Sparse, BothFormsHoldTheSameMatrix) {
  const SparseTensor r = example_csr(), c = example_csc();
  EXPECT_EQ(r.format(), SparseFormat::csr);
  EXPECT_EQ(c.format(), SparseFormat::csc);
  EXPECT_EQ(r.nnz(), 5);
  EXPECT_EQ(r.str(), "csr f32(3,3) nnz=5");
  EXPECT_EQ(c.indices().dtype(), i64) << "indices are kept as i64";
  EXPECT_TRUE(r.has_sorted_indices());
  expect_values(r.to_dense(), kDense, 0);
  expect_values(c.to_dense(), kDense, 0);
  expect_values(r.to_csc().to_dense(), kDense, 0);
  expect_values(c.to_csr().to_dense(), kDense, 0);
  EXPECT_EQ(r.to_csc().indptr().to_vector<int64_t>(), c.indptr().to_vector<int64_t>());
  EXPECT_EQ(r.to_csc().indices().to_vector<int64_t>(), c.indices().to_vector<int64_t>());
  EXPECT_EQ(r.to_csc().data().to_vector<float>(), c.data().to_vector<float>());
}

TEST(Sparse, FromDenseStoresTheNonzerosInOrder) {
  const Tensor dense = Tensor::from(std::vector<double>(kDense), {3, 3});
  const SparseTensor r = sparse_from_dense(dense, SparseFormat::csr), c = sparse_from_dense(dense, SparseFormat::csc);
  EXPECT_EQ(r.dtype(), f64);
  EXPECT_EQ(r.indptr().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(r.indices().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 2, 0, 1}));
  EXPECT_EQ(c.indptr().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 3, 5}));
  EXPECT_EQ(c.data().to_vector<double>(), (std::vector<double>{1, 4, 5, 2, 3}));
  expect_values(c.to_dense(), kDense, 0);
  // A transposed view and a matrix with an empty row.
  expect_values(sparse_from_dense(transpose(dense), SparseFormat::csr).to_dense(), {1, 0, 4, 0, 0, 5, 2, 3, 0}, 0);
  const SparseTensor empty_rows = sparse_from_dense(Tensor::zeros({2, 4}), SparseFormat::csr);
  EXPECT_EQ(empty_rows.nnz(), 0);
  EXPECT_EQ(empty_rows.indptr().to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  expect_error<ShapeError>([] { sparse_from_dense(Tensor::zeros({2, 2, 2}), SparseFormat::csr); }, {"matrix", "f32(2,2,2)"});
}

TEST(Sparse, UnsortedIndicesRepeatsAndExplicitZeros) {
  // Row 0 stores column 2, then 0, then 2 again (repeats add up) and an explicit zero at column 1.
  const SparseTensor s = SparseTensor::csr(Tensor::from(std::vector<double>{2, 1, 5, 0}),
                                           Tensor::from(std::vector<int64_t>{2, 0, 2, 1}),
                                           Tensor::from(std::vector<int64_t>{0, 4, 4}), {2, 3});
  EXPECT_FALSE(s.has_sorted_indices());
  expect_values(s.to_dense(), {1, 0, 7, 0, 0, 0}, 0);
  const SparseTensor sorted = s.sorted();
  EXPECT_TRUE(sorted.has_sorted_indices());
  EXPECT_EQ(sorted.indices().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(sorted.data().to_vector<double>(), (std::vector<double>{1, 0, 7}));
  const SparseTensor no_zeros = sorted.without_zeros();
  EXPECT_EQ(no_zeros.nnz(), 2);
  EXPECT_EQ(no_zeros.indptr().to_vector<int64_t>(), (std::vector<int64_t>{0, 2, 2}));
  expect_values(no_zeros.to_dense(), {1, 0, 7, 0, 0, 0}, 0);
  expect_values(s.to_csc().to_dense(), {1, 0, 7, 0, 0, 0}, 0);
}

TEST(Sparse, ThePartsAreCopies) {
  Tensor data = Tensor::from(std::vector<float>{1, 2});
  const SparseTensor s = SparseTensor::csr(data, Tensor::from(std::vector<int64_t>{0, 1}),
                                           Tensor::from(std::vector<int64_t>{0, 1, 2}), {2, 2});
  data.data<float>()[0] = 9;
  data.dispose();
  expect_values(s.to_dense(), {1, 0, 0, 2}, 0);
}

TEST(Sparse, BadPartsAreErrorsThatNameTheArrayThePositionAndTheValue) {
  const Tensor data = Tensor::from(std::vector<float>{1, 2, 3});
  const auto i64s = [](std::vector<int64_t> v) { return Tensor::from(v); };
  const int line = __LINE__ + 1;
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 1, 2}), i64s({0, 2, 1, 3}), {3, 3}); },
                           {"indptr must not decrease", "indptr[2] = 1", "sparse_test.cpp:" + std::to_string(line)});
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 3, 2}), i64s({0, 2, 2, 3}), {3, 3}); },
                           {"indices[1] = 3", "out of range for 3 columns"});
  expect_error<ShapeError>([&] { SparseTensor::csc(data, i64s({0, -1, 2}), i64s({0, 2, 2, 3}), {3, 3}); },
                           {"indices[1] = -1", "3 rows"});
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 1, 2}), i64s({0, 2, 3}), {3, 3}); },
                           {"indptr needs one entry per row and one more (4", "got 3"});
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 1, 2}), i64s({1, 2, 2, 3}), {3, 3}); }, {"indptr[0] must be 0"});
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 1, 2}), i64s({0, 1, 1, 2}), {3, 3}); },
                           {"must end at the number of stored values, 3", "got 2"});
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 1}), i64s({0, 1, 1, 2}), {3, 3}); },
                           {"one entry per stored value", "f32(3,)", "i64(2,)"});
  expect_error<TypeError>([&] { SparseTensor::csr(data, Tensor::from(std::vector<float>{0, 1, 2}), i64s({0, 1, 2, 3}), {3, 3}); },
                          {"indices must be i32 or i64", "f32(3,)"});
  expect_error<ShapeError>([&] { SparseTensor::csr(data, i64s({0, 1, 2}), i64s({0, 1, 2, 3}), {3, 3, 1}); },
                           {"two dimensions", "(3,3,1)"});
  expect_error<ShapeError>([&] { SparseTensor::csr(Tensor::zeros({3, 1}), i64s({0, 1, 2}), i64s({0, 1, 2, 3}), {3, 3}); },
                           {"data must be 1-D", "f32(3,1)"});
}

TEST(Sparse, BorrowKeepsThePartsGivenWhenTheyAreWhatTheMatrixHolds) {
  const Tensor data = Tensor::from(std::vector<float>{1, 2, 3, 4, 5}), indices = Tensor::from(std::vector<int64_t>{0, 2, 2, 0, 1}),
               indptr = Tensor::from(std::vector<int64_t>{0, 2, 3, 5});
  const SparseTensor kept = SparseTensor::csr(data, indices, indptr, {3, 3}, {.borrow = true});
  EXPECT_EQ(kept.data().raw_data(), data.raw_data());
  EXPECT_EQ(kept.indices().raw_data(), indices.raw_data());
  const SparseTensor copied = SparseTensor::csr(data, indices, indptr, {3, 3});
  EXPECT_NE(copied.data().raw_data(), data.raw_data());
  // i32 indices are converted to i64 even when borrowed; the checks run either way.
  const SparseTensor converted = SparseTensor::csr(data, indices.to(DType::i32), indptr, {3, 3}, {.borrow = true});
  EXPECT_EQ(converted.indices().dtype(), DType::i64);
  expect_error<ShapeError>([&] { SparseTensor::csr(data, indices, indptr, {3, 2}, {.borrow = true}); }, {"out of range"});
}
