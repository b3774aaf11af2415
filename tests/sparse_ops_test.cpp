// Sparse matrices in graphs (src/ops/sparse.cpp): CSR and CSC inputs and constants, products with
// dense matrices on either side, sampling_dot, dense(), transpose, structured functions and sums,
// checked against the dense computation; structured gradients against finite differences; bad
// patterns and shapes as clear errors.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// A rows x cols matrix with about a third of its entries stored (some explicit zeros among them
// would change nothing: the pattern comes from this mask).
Tensor sparse_dense(int64_t rows, int64_t cols, uint64_t seed) {
  const Tensor values = random_tensor({rows, cols}, f64, -1, 1, seed);
  const Tensor mask = random_tensor({rows, cols}, f64, 0, 1, seed + 100);
  std::vector<double> v = values.to_vector<double>(), m = mask.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i)
    if (m[i] > 0.35) v[i] = 0;
  return Tensor::from(v, {rows, cols});
}

Tensor dense_dot(const Tensor& a, const Tensor& b) {
  Var x = matrix("a", f64), y = matrix("b", f64);
  return eval1({x, y}, dot(x, y), {a, b});
}

const SparseFormat kFormats[] = {SparseFormat::csr, SparseFormat::csc};

SparseVar sparse_input(SparseFormat format, const std::string& name) {
  return format == SparseFormat::csr ? csr_matrix(name, f64) : csc_matrix(name, f64);
}

// A SparseVar whose data is `data` and whose pattern is value's, fixed: for verify_grad.
SparseVar with_pattern(const Var& data, const SparseTensor& value) {
  return SparseVar(value.format(), data, constant(value.indices()), constant(value.indptr()),
                   constant(Tensor::from(std::vector<int64_t>{value.shape()[0], value.shape()[1]})));
}

}  // namespace

TEST(SparseOps, ProductsWithDenseMatricesMatchTheDenseProduct) {
  const Tensor a = sparse_dense(7, 5, 1), d = random_tensor({5, 4}, f64, -1, 1, 2), e = random_tensor({3, 7}, f64, -1, 1, 3);
  const std::vector<double> ad = dense_dot(a, d).to_vector<double>(), ea = dense_dot(e, a).to_vector<double>();
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x");
    Var w = matrix("w", f64), v = matrix("v", f64);
    Function f = function({x, w, v}, {dot(x, w), dot(v, x)});
    const std::vector<Tensor> out = f(sparse_from_dense(a, format), d, e);
    expect_values(out[0], ad, 1e-12);
    expect_values(out[1], ea, 1e-12);
    EXPECT_EQ(out[0].shape(), (Shape{7, 4}));
    EXPECT_EQ(out[1].shape(), (Shape{3, 5}));
  }
}

TEST(SparseOps, LargeProductsRunInParallelAndAgree) {
  // 64 columns: CSR splits the rows, CSC the product's columns; 1 column: CSC gives each thread
  // a share of the sparse columns and a partial product in its scratch.
  const Tensor a = sparse_dense(600, 400, 4);
  const int threads_before = num_threads();
  for (int64_t columns : {64, 1}) {
    const Tensor d = random_tensor({400, columns}, f64, -1, 1, 5);
    const std::vector<double> expected = dense_dot(a, d).to_vector<double>();
    for (int threads : {1, 2})
      for (SparseFormat format : kFormats) {
        SCOPED_TRACE(std::string(sparse_format_name(format)) + ", " + std::to_string(threads) + " threads, " + std::to_string(columns) + " columns");
        set_num_threads(threads);
        SparseVar x = sparse_input(format, "x");
        Var w = matrix("w", f64);
        Function f = function({x, w}, {dot(x, w)});
        expect_values(f(sparse_from_dense(a, format), d)[0], expected, 1e-10);
        expect_values(f(sparse_from_dense(a, format), d)[0], expected, 1e-10);  // a second call, its memory planned
      }
  }
  set_num_threads(threads_before);
}

TEST(SparseOps, SinglePrecisionProductsInRegisterBlocksAndARemainder) {
  // 70 columns: one block of 64 floats kept in registers, then 6 more; 1 column: the row sums.
  const Tensor a = sparse_dense(9, 30, 24);
  for (int64_t columns : {70, 1}) {
    const Tensor d = random_tensor({30, columns}, f64, -1, 1, 25);
    const std::vector<double> expected = dense_dot(a, d).to_vector<double>();
    SparseVar x = csr_matrix("x", f32);
    Var w = matrix("w", f32);
    const SparseTensor value = sparse_from_dense(a.to(f32), SparseFormat::csr);
    expect_values(function({x, w}, {dot(x, w)})(value, d.to(f32))[0], expected, 1e-5);
  }
}

TEST(SparseOps, ProductsWhoseRowsOnlyTheShapeTellsAreSizedAtRunTime) {
  SparseVar r = csr_matrix("r", f64), c = csc_matrix("c", f64);
  Var w = matrix("w", f64);
  const std::vector<Shape> shapes{{5}, {5}, {4}, {2}, {3, 2}};
  const MemoryReport by_rows = function({r, w}, {dot(r, w) * 2.0}).memory_report(shapes);
  const MemoryReport by_columns = function({c, w}, {dot(c, w) * 2.0}).memory_report(shapes);
  EXPECT_TRUE(by_rows.unplanned.empty()) << "a CSR product has as many rows as indptr has entries, less one";
  ASSERT_FALSE(by_columns.unplanned.empty());
  EXPECT_NE(by_columns.unplanned[0].find("sparse_dot{csc}"), std::string::npos) << by_columns.unplanned[0];
}

TEST(SparseOps, DenseTransposeSumsAndStructuredFunctions) {
  const Tensor a = sparse_dense(4, 6, 6);
  const std::vector<double> dense_values = a.to_vector<double>();
  std::vector<double> transposed(24), column_sums(6, 0.0), row_sums(4, 0.0), sigmoid_stored(24, 0.0);
  double total = 0;
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 6; ++c) {
      const double x = dense_values[r * 6 + c];
      transposed[c * 4 + r] = x;
      column_sums[c] += x;
      row_sums[r] += x;
      total += x;
      if (x != 0) sigmoid_stored[r * 6 + c] = 1 / (1 + std::exp(-x));
    }
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x");
    EXPECT_EQ(transpose(x).format(), format == SparseFormat::csr ? SparseFormat::csc : SparseFormat::csr);
    Function f = function({x}, {dense(x), dense(transpose(x)), sum(x, 0), sum(x, 1), sum(x), dense(structured(x, sigmoid)),
                                dense(-x), dense(x * 2.0)});
    const std::vector<Tensor> out = f(sparse_from_dense(a, format));
    expect_values(out[0], dense_values, 1e-12);
    expect_values(out[1], transposed, 1e-12);
    expect_values(out[2], column_sums, 1e-12);
    expect_values(out[3], row_sums, 1e-12);
    expect_values(out[4], {total}, 1e-12);
    expect_values(out[5], sigmoid_stored, 1e-12);  // sigmoid(0) = 0.5 is not added where nothing is stored
    std::vector<double> negated = dense_values, doubled = dense_values;
    for (double& n : negated) n = -n;
    for (double& n : doubled) n *= 2;
    expect_values(out[6], negated, 1e-12);
    expect_values(out[7], doubled, 1e-12);
  }
}

TEST(SparseOps, ElementwiseWithDenseValuesBroadcastAndKeepThePattern) {
  const Tensor a = sparse_dense(3, 4, 19), m = random_tensor({3, 4}, f64, -1, 1, 20);
  const Tensor rows = random_tensor({3}, f64, -1, 1, 21), cols = random_tensor({4}, f64, -1, 1, 22);
  const std::vector<double> av = a.to_vector<double>(), mv = m.to_vector<double>(), rv = rows.to_vector<double>(),
                            cv = cols.to_vector<double>();
  std::vector<double> times_m(12), times_rows(12), times_cols(12), plus_m(12);
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) {
      const int i = r * 4 + c;
      times_m[i] = av[i] * mv[i];
      times_rows[i] = av[i] * rv[r];
      times_cols[i] = av[i] * cv[c];
      plus_m[i] = av[i] + mv[i];
    }
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x");
    Var d = matrix("d", f64), s = vector("s", f64), t = vector("t", f64);
    const SparseVar product = x * d;
    EXPECT_EQ(product.format(), format);
    EXPECT_TRUE(product.indices().same(x.indices())) << "the product keeps x's pattern";
    const std::vector<Tensor> out = function({x, d, s, t}, {dense(product), dense(row_scale(x, s)), dense(col_scale(x, t)),
                                                            dense(x * t), x + d, d + x})(sparse_from_dense(a, format), m, rows, cols);
    expect_values(out[0], times_m, 1e-12);
    expect_values(out[1], times_rows, 1e-12);
    expect_values(out[2], times_cols, 1e-12);
    expect_values(out[3], times_cols, 1e-12);  // a vector broadcasts along the last axis, as in NumPy
    expect_values(out[4], plus_m, 1e-12);
    expect_values(out[5], plus_m, 1e-12);
    const SparseTensor value = sparse_from_dense(a, format);
    verify_grad([&](std::vector<Var> v) { return dense(with_pattern(v[0], value) * v[1]); }, {value.data(), m});
    verify_grad([&](std::vector<Var> v) { return dense(row_scale(with_pattern(v[0], value), v[1])); }, {value.data(), rows});
    verify_grad([&](std::vector<Var> v) { return dense(col_scale(with_pattern(v[0], value), v[1])); }, {value.data(), cols});
    expect_error<TypeError>([&] { row_scale(x, d); }, {"row_scale", "one value per row"});
  }
  SparseVar x = csr_matrix("x", f64);
  Var d = matrix("d", f64);
  expect_error<ShapeError>([&] { function({x, d}, {dense(x * d)})(sparse_from_dense(a, SparseFormat::csr), random_tensor({2, 4})); },
                           {"sparse_gather{csr}", "(2,4)", "does not broadcast", "(3,4)"});
}

TEST(SparseOps, RowAndColumnSlicesWithSymbolicBoundsClampAsNumPy) {
  const Tensor a = sparse_dense(6, 5, 23);
  const std::vector<double> av = a.to_vector<double>();
  auto dense_rows = [&](int64_t first, int64_t last) { return std::vector<double>(av.begin() + first * 5, av.begin() + last * 5); };
  auto dense_columns = [&](int64_t first, int64_t last) {
    std::vector<double> out;
    for (int64_t r = 0; r < 6; ++r)
      for (int64_t c = first; c < last; ++c) out.push_back(av[r * 5 + c]);
    return out;
  };
  SparseVar x = csr_matrix("x", f64), y = csc_matrix("y", f64);
  Var start = scalar("start", i64), stop = scalar("stop", i64);
  Function f = function({x, y, start, stop}, {dense(rows(x, start, stop)), dense(columns(y, start, stop)), dense(row(x, start))});
  auto bound = [](int64_t v) { return Tensor::scalar(v); };
  const struct {  // row(x, start) too: every start is a row that exists
    int64_t start, stop, first, last;
  } cases[] = {{1, 4, 1, 4}, {-3, -1, 3, 5}, {2, 100, 2, 6}, {4, 2, 4, 4}, {-6, 2, 0, 2}};
  for (const auto& c : cases) {
    SCOPED_TRACE("[" + std::to_string(c.start) + ":" + std::to_string(c.stop) + "]");
    const std::vector<Tensor> out =
        f(sparse_from_dense(a, SparseFormat::csr), sparse_from_dense(a, SparseFormat::csc), bound(c.start), bound(c.stop));
    EXPECT_EQ(out[0].shape(), (Shape{c.last - c.first, 5}));
    expect_values(out[0], dense_rows(c.first, c.last), 0);
    const int64_t col_last = std::min<int64_t>(c.last, 5), col_first = std::min(c.first, col_last);
    if (c.start == -3) {
      expect_values(out[1], dense_columns(2, 4), 0);  // of 5 columns, [-3:-1] is [2:4]
    } else {
      expect_values(out[1], dense_columns(col_first, col_last), 0);
    }
    expect_values(out[2], dense_rows((c.start + 6) % 6, (c.start + 6) % 6 + 1), 0);
  }
  const SparseTensor value = sparse_from_dense(a, SparseFormat::csr);
  verify_grad([&](std::vector<Var> v) { return dense(rows(with_pattern(v[0], value), 1, 4)) * 3.0; }, {value.data()});
  verify_grad([&](std::vector<Var> v) { return sum(row(with_pattern(v[0], value), -2), 1); }, {value.data()});
  expect_error<ShapeError>([&] { f(sparse_from_dense(a, SparseFormat::csr), sparse_from_dense(a, SparseFormat::csc), bound(6), bound(7)); },
                           {"sparse_major_index", "index 6 is out of range for a matrix of 6 rows if it is CSR"});
  expect_error<ShapeError>([&] { f(sparse_from_dense(a, SparseFormat::csr), sparse_from_dense(a, SparseFormat::csc), bound(-7), bound(7)); },
                           {"index -7 is out of range"});
  expect_error<TypeError>([&] { rows(y, 0, 1); }, {"rows(csc f64 matrix y)", "columns(x, ...)"});
  expect_error<TypeError>([&] { columns(x, 0, 1); }, {"columns(csr f64 matrix x)", "rows(x, ...)"});
}

TEST(SparseOps, RepeatedEntriesCountAsTheirSum) {
  // Row 0 stores column 1 twice (2 + 3): SciPy's rule, in dense() and in products.
  const SparseTensor x = SparseTensor::csr(Tensor::from(std::vector<double>{2, 3, 4}), Tensor::from(std::vector<int64_t>{1, 1, 0}),
                                           Tensor::from(std::vector<int64_t>{0, 2, 3}), {2, 2});
  SparseVar s = csr_matrix("s", f64);
  Var w = matrix("w", f64);
  const std::vector<Tensor> out = function({s, w}, {dense(s), dot(s, w)})(x, Tensor::from(std::vector<double>{1, 10, 100, 1000}, {2, 2}));
  expect_values(out[0], {0, 5, 4, 0});
  expect_values(out[1], {500, 5000, 4, 40});
}

// structured() squared each stored entry: 2^2 + 3^2 = 13 where the matrix holds 5 and x * x 25.
TEST(SparseOps, StructuredFunctionsSeeTheSumOfRepeatedEntries) {
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    const Tensor data = Tensor::from(std::vector<double>{2, 3, 4}), indices = Tensor::from(std::vector<int64_t>{1, 1, 0});
    const Tensor indptr = Tensor::from(std::vector<int64_t>{0, 2, 3});
    const SparseTensor x = format == SparseFormat::csr ? SparseTensor::csr(data, indices, indptr, {2, 2})
                                                       : SparseTensor::csc(data, indices, indptr, {2, 2});
    SparseVar s = sparse_input(format, "s");
    const std::vector<Tensor> out =
        function({s}, {dense(structured(s, sqr)), dense(s * s), dense(structured(s, exp)), dense(-s), dense(s * 2.0)})(x);
    const std::vector<double> squared = format == SparseFormat::csr ? std::vector<double>{0, 25, 16, 0} : std::vector<double>{0, 16, 25, 0};
    expect_values(out[0], squared, 1e-12);
    expect_values(out[1], squared, 1e-12);
    const double e5 = std::exp(5.0), e4 = std::exp(4.0);
    expect_values(out[2], format == SparseFormat::csr ? std::vector<double>{0, e5, e4, 0} : std::vector<double>{0, e4, e5, 0}, 1e-9);
    expect_values(out[3], format == SparseFormat::csr ? std::vector<double>{0, -5, -4, 0} : std::vector<double>{0, -4, -5, 0});
    expect_values(out[4], format == SparseFormat::csr ? std::vector<double>{0, 10, 8, 0} : std::vector<double>{0, 8, 10, 0});
    // d sum(structured(x, sqr)) / d data: 2 * 5 for both entries of the repeated place, 2 * 4.
    verify_grad([&](std::vector<Var> v) { return sum(structured(with_pattern(v[0], x), sqr)); }, {data});
    expect_values(function({s}, {regular_grad(sum(structured(s, sqr)), s)})(x)[0],
                  format == SparseFormat::csr ? std::vector<double>{0, 10, 8, 0} : std::vector<double>{0, 8, 10, 0}, 1e-12);
  }
}

TEST(SparseOps, SamplingDotComputesOnlyAtThePattern) {
  const Tensor p = sparse_dense(5, 4, 7), a = random_tensor({5, 3}, f64, -1, 1, 8), b = random_tensor({4, 3}, f64, -1, 1, 9);
  const std::vector<double> full = dense_dot(a, transpose(b)).to_vector<double>(), pv = p.to_vector<double>();
  std::vector<double> expected(20);
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = pv[i] * full[i];
  for (SparseFormat format : kFormats) {
    SparseVar pattern = sparse_input(format, "p");
    Var x = matrix("a", f64), y = matrix("b", f64);
    expect_values(function({pattern, x, y}, {dense(sampling_dot(x, y, pattern))})(sparse_from_dense(p, format), a, b)[0], expected,
                  1e-12);
  }
}

TEST(SparseOps, GradientsMatchFiniteDifferences) {
  const Tensor a = sparse_dense(5, 4, 10), d = random_tensor({4, 3}, f64, -1, 1, 11), e = random_tensor({2, 5}, f64, -1, 1, 12);
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    const SparseTensor value = sparse_from_dense(a, format);
    // d/d data (structured) and d/d dense operand, of products on both sides.
    verify_grad([&](std::vector<Var> v) { return tanh(dot(with_pattern(v[0], value), v[1])); }, {value.data(), d});
    verify_grad([&](std::vector<Var> v) { return dot(v[1], with_pattern(v[0], value)); }, {value.data(), e});
    verify_grad([&](std::vector<Var> v) { return sqr(dense(with_pattern(v[0], value))); }, {value.data()});
    verify_grad([&](std::vector<Var> v) { return sum(with_pattern(v[0], value), 0) * sum(with_pattern(v[0], value), 1)[0]; },
                {value.data()});
    const Tensor sa = random_tensor({5, 3}, f64, -1, 1, 13), sb = random_tensor({4, 3}, f64, -1, 1, 14);
    verify_grad([&](std::vector<Var> v) { return dense(sampling_dot(v[1], v[2], with_pattern(v[0], value))); },
                {value.data(), sa, sb});
    verify_rop([&](std::vector<Var> v) { return dot(with_pattern(v[0], value), v[1]); }, {value.data(), d});
  }
}

TEST(SparseOps, StructuredGradientKeepsThePattern) {
  // cost = sum(x . w): d cost / d x[r, c] = sum_j w[c, j], taken only where x stores an entry.
  const Tensor a = sparse_dense(4, 3, 15), wv = random_tensor({3, 2}, f64, -1, 1, 16);
  const std::vector<double> w = wv.to_vector<double>(), av = a.to_vector<double>();
  std::vector<double> expected(12, 0.0);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c)
      if (av[r * 3 + c] != 0) expected[r * 3 + c] = w[c * 2] + w[c * 2 + 1];
  for (SparseFormat format : kFormats) {
    SparseVar x = sparse_input(format, "x");
    Var wvar = matrix("w", f64);
    const SparseVar g = structured_grad(sum(dot(x, wvar)), x);
    EXPECT_EQ(g.format(), format);
    expect_values(function({x, wvar}, {dense(g)})(sparse_from_dense(a, format), wv)[0], expected, 1e-12);
  }
}

TEST(SparseOps, ConstantsFoldAndEqualProductsMerge) {
  const Tensor a = sparse_dense(3, 3, 17);
  SparseVar c = sparse_constant(sparse_from_dense(a, SparseFormat::csr), "c");
  Var w = matrix("w", f64);
  Function folded = function({}, {dense(c)});
  EXPECT_EQ(count_op(folded, "sparse_to_dense"), 0) << "a constant sparse matrix's dense form is computed when compiling";
  expect_values(folded({})[0], a.to_vector<double>());
  SparseVar x = csr_matrix("x", f64);
  Function merged = function({x, w}, {dot(x, w) + dot(x, w)});
  EXPECT_EQ(count_op(merged, "sparse_dot"), 1);
}

TEST(SparseOps, BadPatternsAndShapesAreClearErrors) {
  SparseVar x = csr_matrix("x", f64);
  Var w = matrix("w", f64);
  Function f = function({x, w}, {dot(x, w)});
  const Tensor d = random_tensor({3, 2}, f64);
  const Tensor data = Tensor::from(std::vector<double>{1, 2}), shape = Tensor::from(std::vector<int64_t>{2, 3});
  auto call = [&](std::vector<int64_t> indices, std::vector<int64_t> indptr, const Tensor& dense_operand, const Tensor& s) {
    return f({data, Tensor::from(indices), Tensor::from(indptr), s, dense_operand});
  };
  expect_error<ShapeError>([&] { call({0, 3}, {0, 1, 2}, d, shape); }, {"sparse_dot{csr}", "indices[1] = 3", "out of range [0, 3)"});
  expect_error<ShapeError>([&] { call({0, 1}, {0, 2, 1}, d, shape); }, {"sparse_dot{csr}", "indptr must not decrease"});
  expect_error<ShapeError>([&] { call({0, 1}, {0, 1, 3}, d, shape); }, {"indptr ends at 3", "2 indices"});
  expect_error<ShapeError>([&] { call({0, 1}, {0, 1, 2}, random_tensor({4, 2}, f64), shape); },
                           {"sparse_dot{csr}", "(2,3)", "(4,2)", "rows must equal the sparse columns"});
  expect_error<ShapeError>([&] { call({0, 1}, {0, 1, 2}, d, Tensor::from(std::vector<int64_t>{5, 3})); },
                           {"needs 6 indptr entries, got 3"});
  // A good call after the failures still works.
  expect_values(call({0, 2}, {0, 1, 2}, Tensor::from(std::vector<double>{1, 2, 3, 4, 5, 6}, {3, 2}), shape)[0], {1, 2, 10, 12});
  expect_error<TypeError>([&] { dot(x, vector("v", f64)); }, {"dense operand must be a numeric matrix", "reshape"});
  expect_error<TypeError>([&] { csr_matrix("i", i32); }, {"csr_matrix", "f32 or f64", "i32"});
  expect_error<TypeError>([&] { SparseVar(SparseFormat::csr, vector("d"), vector("i", f32), vector("p", i64), vector("s", i64)); },
                          {"indices must be a 1-D i64 vector", "f32[?]"});
  expect_error<TypeError>([&] { sum(x, 2); }, {"axes 0 and 1"});
  expect_error<TypeError>([&] { structured(x, [](const Var& v) { return sum(v); }); }, {"structured", "elementwise"});
}

TEST(SparseOps, SparseInputsTakeTheirPartsInAListOfTensors) {
  const Tensor a = sparse_dense(3, 4, 18);
  const SparseTensor value = sparse_from_dense(a, SparseFormat::csr);
  SparseVar x = csr_matrix("x", f64);
  Function f = function({x}, {sum(x)});  // reads only the data: the other parts may go unused
  std::vector<Tensor> arguments = sparse_parts(value), out;
  ASSERT_EQ(arguments.size(), 4u);
  expect_values(arguments[3], {3, 4}, 0);
  f.call(arguments, out);
  double total = 0;
  for (double v : a.to_vector<double>()) total += v;
  expect_values(out[0], {total}, 1e-12);
  EXPECT_EQ(x.str(), "csr f64 matrix x");
}

TEST(SparseOps, SharedSparseMatricesTakeStructuredStepsAndKeepBorrowRules) {
  const Tensor a = sparse_dense(4, 3, 26), wv = random_tensor({3, 2}, f64, -1, 1, 27);
  SparseShared x = sparse_shared(sparse_from_dense(a, SparseFormat::csr), "x");
  EXPECT_EQ(x.data().name(), "x.data");
  Var w = matrix("w", f64);
  Var cost = sum(sqr(dot(x, w)));
  const SparseVar g = structured_grad(cost, x);
  Function step = function({w}, {cost}, {.updates = {{x.data(), x.data() - 0.1 * g.data()}}});
  const SparseTensor before = x.get_value();
  // The step's gradient at the stored entries, computed densely: d/dx[r,c] = sum_j 2 (x w)[r,j] w[c,j].
  const std::vector<double> xw = dense_dot(a, wv).to_vector<double>(), wd = wv.to_vector<double>(), av = a.to_vector<double>();
  std::vector<double> expected(12, 0.0);
  for (int r = 0; r < 4; ++r)
    for (int c = 0; c < 3; ++c)
      if (av[r * 3 + c] != 0) expected[r * 3 + c] = av[r * 3 + c] - 0.1 * (2 * xw[r * 2] * wd[c * 2] + 2 * xw[r * 2 + 1] * wd[c * 2 + 1]);
  step(wv);
  const SparseTensor after = x.get_value();
  expect_values(after.to_dense(), expected, 1e-12);
  expect_values(after.indices(), before.indices().to_vector<double>(), 0);  // the pattern is kept
  // borrow: the value's data is the variable's own buffer; without it, a copy.
  EXPECT_EQ(x.get_value({.borrow = true}).data().raw_data(), x.data().get_value({.borrow = true}).raw_data());
  EXPECT_NE(x.get_value().data().raw_data(), x.data().get_value({.borrow = true}).raw_data());
  // A new pattern, of another number of entries: the function plans again.
  const Tensor other = sparse_dense(4, 3, 28);
  x.set_value(sparse_from_dense(other, SparseFormat::csr));
  Function product = function({w}, {dot(x, w)});
  expect_values(product(wv)[0], dense_dot(other, wv).to_vector<double>(), 1e-12);
  expect_error<TypeError>([&] { x.set_value(sparse_from_dense(other, SparseFormat::csc)); }, {"csr f64 matrix", "csc", "to_csr"});
}

TEST(SparseOps, SumsDifferencesAndStacksOfSparseMatrices) {
  const Tensor a = sparse_dense(4, 3, 29), b = sparse_dense(4, 3, 30), c = sparse_dense(2, 3, 31), e = sparse_dense(4, 5, 32);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), cv = c.to_vector<double>(), ev = e.to_vector<double>();
  std::vector<double> sum_ab(12), diff_ab(12), below(av), beside;
  for (int i = 0; i < 12; ++i) sum_ab[i] = av[i] + bv[i], diff_ab[i] = av[i] - bv[i];
  below.insert(below.end(), cv.begin(), cv.end());
  for (int r = 0; r < 4; ++r) {
    beside.insert(beside.end(), av.begin() + r * 3, av.begin() + r * 3 + 3);
    beside.insert(beside.end(), ev.begin() + r * 5, ev.begin() + r * 5 + 5);
  }
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x"), y = sparse_input(format, "y"), z = sparse_input(format, "z"), u = sparse_input(format, "u");
    Var x_plus_y = dense(x + y);  const int sum_line = __LINE__;
    Function f = function({x, y, z, u}, {x_plus_y, dense(x - y), dense(vstack({x, z})), dense(hstack({x, u})), sum(vstack({x, z, x}))});
    const std::vector<Tensor> out =
        f(sparse_from_dense(a, format), sparse_from_dense(b, format), sparse_from_dense(c, format), sparse_from_dense(e, format));
    expect_values(out[0], sum_ab, 1e-12);
    expect_values(out[1], diff_ab, 1e-12);
    EXPECT_EQ(out[2].shape(), (Shape{6, 3}));
    expect_values(out[2], below, 1e-12);
    EXPECT_EQ(out[3].shape(), (Shape{4, 8}));
    expect_values(out[3], beside, 1e-12);
    double total = 0;
    for (double v : av) total += 2 * v;
    for (double v : cv) total += v;
    expect_values(out[4], {total}, 1e-12);
    // Gradients with respect to both operands' data, of every kind of join.
    const SparseTensor va = sparse_from_dense(a, format), vb = sparse_from_dense(b, format), vc = sparse_from_dense(c, format),
                       ve = sparse_from_dense(e, format);
    const Tensor w = random_tensor({3, 2}, f64, -1, 1, 33), w8 = random_tensor({8, 2}, f64, -1, 1, 34);
    verify_grad([&](std::vector<Var> v) { return tanh(dot(with_pattern(v[0], va) - with_pattern(v[1], vb) * 2.0, constant(w))); },
                {va.data(), vb.data()});
    verify_grad([&](std::vector<Var> v) { return sqr(dot(vstack({with_pattern(v[0], va), with_pattern(v[1], vc)}), constant(w))); },
                {va.data(), vc.data()});
    verify_grad([&](std::vector<Var> v) { return sqr(dot(hstack({with_pattern(v[0], va), with_pattern(v[1], ve)}), constant(w8))); },
                {va.data(), ve.data()});
    // Mismatched shapes, at run time.
    // CSR finds it running (same rows, other columns), CSC when planning (other numbers of columns);
    // either way the message names the line that wrote x + y.
    const std::vector<std::string> mismatch = format == SparseFormat::csr
                                                  ? std::vector<std::string>{"sparse_add{csr}", "(4,3) and (4,5)", "equal shapes"}
                                                  : std::vector<std::string>{"sparse_add{csc}", "3 and 5 columns"};
    expect_error<ShapeError>([&] { f(sparse_from_dense(a, format), sparse_from_dense(e, format), sparse_from_dense(c, format), sparse_from_dense(e, format)); },
                             mismatch);
    try {
      f(sparse_from_dense(a, format), sparse_from_dense(e, format), sparse_from_dense(c, format), sparse_from_dense(e, format));
    } catch (const ShapeError& error) {
      EXPECT_NE(std::string(error.what()).find("sparse_ops_test.cpp:" + std::to_string(sum_line)), std::string::npos) << error.what();
    }
    expect_error<ShapeError>([&] { f(sparse_from_dense(a, format), sparse_from_dense(b, format), sparse_from_dense(e, format), sparse_from_dense(e, format)); },
                             {"vstack", "columns"});
  }
  expect_error<TypeError>([&] { csr_matrix("p", f64) + csc_matrix("q", f64); }, {"one format", "transpose"});
}

TEST(SparseOps, ConversionBetweenTheFormsInsideAGraph) {
  // Unsorted indices and a repeat in row 0 (column 2 stored twice): the converted matrix is the
  // same, with sorted indices.
  const SparseTensor unsorted = SparseTensor::csr(Tensor::from(std::vector<double>{1, 2, 3, 4, 5}),
                                                  Tensor::from(std::vector<int64_t>{2, 0, 2, 1, 0}),
                                                  Tensor::from(std::vector<int64_t>{0, 3, 3, 5}), {3, 3});
  const std::vector<double> expected = unsorted.to_dense().to_vector<double>();
  SparseVar x = csr_matrix("x", f64);
  const SparseVar c = to_csc(x);
  EXPECT_EQ(c.format(), SparseFormat::csc);
  EXPECT_EQ(to_csr(c).format(), SparseFormat::csr);
  const std::vector<Tensor> out = function({x}, {dense(c), dense(to_csr(c)), c.indices(), c.indptr()})(unsorted);
  expect_values(out[0], expected, 0);
  expect_values(out[1], expected, 0);
  expect_values(out[2], {0, 2, 2, 0, 0}, 0);  // column 0: rows 0 and 2; column 1: row 2; column 2: row 0 twice
  expect_values(out[3], {0, 2, 3, 5}, 0);
  const SparseTensor value = sparse_from_dense(sparse_dense(5, 4, 35), SparseFormat::csr);
  const Tensor w = random_tensor({4, 3}, f64, -1, 1, 36);
  verify_grad([&](std::vector<Var> v) { return sqr(dot(to_csc(with_pattern(v[0], value)), constant(w))); }, {value.data()});
}

TEST(SparseOps, ElementwiseProductOfTwoSparseMatrices) {
  const Tensor a = sparse_dense(5, 6, 37), b = sparse_dense(5, 6, 38);
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> expected(30);
  for (int i = 0; i < 30; ++i) expected[i] = av[i] * bv[i];
  // b unsorted with a repeat: the searched path, the repeat summed.
  const SparseTensor b_unsorted = SparseTensor::csr(Tensor::from(std::vector<double>{1, 2, 3}), Tensor::from(std::vector<int64_t>{4, 1, 4}),
                                                    Tensor::from(std::vector<int64_t>{0, 3, 3, 3, 3, 3}), {5, 6});
  std::vector<double> with_unsorted(30, 0.0);
  ASSERT_NE(av[4], 0) << "row 0 of a must store column 4 for the repeat to count";
  with_unsorted[1] = av[1] * 2, with_unsorted[4] = av[4] * 4;
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x"), y = sparse_input(format, "y");
    Function f = function({x, y}, {dense(x * y)});
    expect_values(f(sparse_from_dense(a, format), sparse_from_dense(b, format))[0], expected, 1e-12);
    const SparseTensor va = sparse_from_dense(a, format), vb = sparse_from_dense(b, format);
    verify_grad([&](std::vector<Var> v) { return dense(with_pattern(v[0], va) * with_pattern(v[1], vb)); }, {va.data(), vb.data()});
    expect_error<ShapeError>([&] { f(sparse_from_dense(a, format), sparse_from_dense(sparse_dense(5, 6, 39).reshape({6, 5}), format)); },
                             {"sparse_sample", "differ"});
  }
  SparseVar x = csr_matrix("x", f64), y = csr_matrix("y", f64);
  expect_values(function({x, y}, {dense(x * y)})(sparse_from_dense(a, SparseFormat::csr), b_unsorted)[0], with_unsorted, 1e-12);
}

TEST(SparseOps, AnArgumentOfTheOtherFormatOrKindIsATypeError) {
  // A CSC value handed to a CSR input was read as CSR: a square matrix came out transposed.
  const Tensor a = Tensor::from(std::vector<double>{1, 0, 2, 0, 0, 3, 4, 5, 0}, {3, 3});
  SparseVar x = csr_matrix("x", f64);
  Var w = matrix("w", f64);
  Function f = function({x}, {dense(x)});
  expect_values(f(sparse_from_dense(a, SparseFormat::csr))[0], a.to_vector<double>(), 0);
  expect_error<TypeError>([&] { f(sparse_from_dense(a, SparseFormat::csc)); }, {"input 0 is a csr matrix", "csc f64(3,3)", "to_csr()"});
  Function g = function({x, w}, {dot(x, w)});
  expect_error<TypeError>([&] { g(a, a); }, {"input 0 ('x.data')", "dense tensor", "csr matrix", "SparseTensor"});
  expect_error<TypeError>([&] { g(sparse_from_dense(a, SparseFormat::csr), sparse_from_dense(a, SparseFormat::csr)); },
                          {"input 4 ('w'", "sparse matrix", "input is dense", "to_dense()"});
}

TEST(SparseOps, SparseAndDenseSumsBroadcastAndPassTheirGradientChecks) {
  const Tensor a = sparse_dense(3, 4, 51), m = random_tensor({3, 4}, f64, -1, 1, 52), cols = random_tensor({4}, f64, -1, 1, 53);
  const std::vector<double> av = a.to_vector<double>(), mv = m.to_vector<double>(), cv = cols.to_vector<double>();
  std::vector<double> plus_cols(12), minus_m(12), m_minus(12), plus_two(12);
  for (int i = 0; i < 12; ++i) {
    plus_cols[i] = av[i] + cv[i % 4];
    minus_m[i] = av[i] - mv[i];
    m_minus[i] = mv[i] - av[i];
    plus_two[i] = av[i] + 2;
  }
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x");
    Var d = matrix("d", f64), t = vector("t", f64);
    const std::vector<Tensor> out = function({x, d, t}, {x + t, x - d, d - x, 2.0 + x})(sparse_from_dense(a, format), m, cols);
    expect_values(out[0], plus_cols, 1e-12);
    expect_values(out[1], minus_m, 1e-12);
    expect_values(out[2], m_minus, 1e-12);
    expect_values(out[3], plus_two, 1e-12);
    const SparseTensor value = sparse_from_dense(a, format);
    verify_grad([&](std::vector<Var> v) { return tanh(with_pattern(v[0], value) + v[1]); }, {value.data(), m});
    verify_grad([&](std::vector<Var> v) { return tanh(v[1] - with_pattern(v[0], value)); }, {value.data(), cols});
    verify_rop([&](std::vector<Var> v) { return with_pattern(v[0], value) + v[1]; }, {value.data(), m});
  }
}

// Found by a new-user trial: dense - sparse reported a line of kiln's own sparse.cpp when its
// shapes disagreed while it ran; each of the four forms names the user's line.
TEST(SparseOps, AShapeErrorOfASparseAndDenseSumNamesTheUsersLine) {
  const SparseTensor a = sparse_from_dense(sparse_dense(2, 3, 54), SparseFormat::csr);
  SparseVar x = sparse_input(SparseFormat::csr, "x");
  Var v = vector("v", f64);
  const std::string line = std::to_string(__LINE__ + 1);
  const std::vector<Var> forms{x + v, v + x, x - v, v - x};
  for (const Var& form : forms) {
    Function f = function({x, v}, {form});
    expect_error<ShapeError>([&] { f(a, Tensor::from(std::vector<double>{1, 2})); }, {"sparse_ops_test.cpp:" + line});
  }
}

TEST(SparseOps, SparseGradOfRowLookupsStoresOnlyTheRowsUsedAndUpdatesInPlace) {
  const Tensor w0 = random_tensor({6, 3}, f64, -1, 1, 61);
  Shared W = shared(w0, "W");
  const Tensor rows = Tensor::from(std::vector<int64_t>{4, 1, 4, -1}, {2, 2});  // 2-D, a repeat, a negative row
  const Tensor c = random_tensor({2, 2, 3}, f64, -1, 1, 62);
  Var lookup = take(W, constant(rows)), other = take(W, constant(Tensor::from(std::vector<int32_t>{2})));
  Var cost = sum(lookup * constant(c)) + sum(square(other));
  const SparseVar g = sparse_grad(cost, W);
  EXPECT_EQ(g.format(), SparseFormat::csr);
  Function look = function({}, {dense(g), grad(cost, Var(W)), g.indptr(), g.data()});
  std::vector<Tensor> out = look();
  expect_values(out[0], out[1].to_vector<double>(), 1e-12);  // the same gradient, stored sparsely
  expect_values(out[2], {0, 0, 3, 6, 6, 12, 15}, 0);         // rows 1, 2, 4 (twice), 5 only
  EXPECT_EQ(out[3].numel(), 15);
  // The update touches the rows used, in W's own buffer.
  Function step = function({}, {}, {.updates = {{W, W - 0.5 * g}}});
  const void* before = W.get_value({.borrow = true}).raw_data();
  step();
  const Tensor after = W.get_value({.borrow = true});
  EXPECT_EQ(after.raw_data(), before) << "W - rate * g is written over W";
  std::vector<double> want = w0.to_vector<double>();
  const std::vector<double> dense_g = out[1].to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) want[i] -= 0.5 * dense_g[i];
  expect_values(after, want, 1e-12);
  // Its gradient with respect to the looked-up rows' gradient (through the data) is checked too.
  verify_grad([&](std::vector<Var> v) {
    Var e = v[0];
    return dense(sparse_grad(sum(take(e, constant(rows)) * constant(c) * take(e, constant(rows))), e));
  }, {w0});
}

TEST(SparseOps, SparseGradRefusesAMatrixReadOtherwiseThanByRows) {
  Var W = matrix("W", f64), x = matrix("x", f64);
  expect_error<GradError>([&] { sparse_grad(sum(dot(x, W)) + sum(take(W, constant(Tensor::from(std::vector<int64_t>{0})))), W); },
                          {"sparse_grad", "dot", "not only by row lookups", "grad()"});
  expect_error<GradError>([&] { sparse_grad(sum(take(W, constant(Tensor::from(std::vector<int64_t>{0})), 1)), W); },
                          {"take{axis=1}"});
  expect_error<GradError>([&] { sparse_grad(sum(x), W); }, {"does not depend on the matrix"});
  Var ids = vector("ids", i64);
  Function f = function({W, ids}, {dense(sparse_grad(sum(take(W, ids)), W))});
  expect_error<ShapeError>([&] { f(random_tensor({3, 2}), Tensor::from(std::vector<int64_t>{3})); }, {"take", "index 3", "out of bounds"});
}

TEST(SparseOps, ProductsOfTwoSparseMatricesMatchTheDenseProductAndAreSizedWhenTheyRun) {
  const Tensor a = sparse_dense(6, 5, 71), b = sparse_dense(5, 7, 72);
  // A row of a with nothing stored, and a column of b with nothing stored.
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  for (int c = 0; c < 5; ++c) av[2 * 5 + c] = 0;
  for (int r = 0; r < 5; ++r) bv[r * 7 + 3] = 0;
  const Tensor a2 = Tensor::from(av, {6, 5}), b2 = Tensor::from(bv, {5, 7});
  const std::vector<double> want = dense_dot(a2, b2).to_vector<double>();
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x"), y = sparse_input(format, "y");
    const SparseVar product = dot(x, y);
    EXPECT_EQ(product.format(), format);
    Function f = function({x, y}, {dense(product), product.indices(), product.indptr()});
    const std::vector<Tensor> out = f(sparse_from_dense(a2, format), sparse_from_dense(b2, format));
    expect_values(out[0], want, 1e-12);
    // Indices sorted within each segment; no entry stored twice.
    const auto indices = out[1].to_vector<int64_t>(), indptr = out[2].to_vector<int64_t>();
    for (size_t m = 0; m + 1 < indptr.size(); ++m)
      for (int64_t k = indptr[m] + 1; k < indptr[m + 1]; ++k) EXPECT_LT(indices[k - 1], indices[k]);
    bool listed = false;
    for (const std::string& u : f.memory_report().unplanned) listed = listed || u.find("sparse_product") != std::string::npos;
    EXPECT_TRUE(listed) << "the memory report names the product whose size depends on the values";
    // Another pattern, another size, through the same function.
    const Tensor c = sparse_dense(6, 5, 73);
    expect_values(f(sparse_from_dense(c, format), sparse_from_dense(b2, format))[0], dense_dot(c, b2).to_vector<double>(), 1e-12);
    const SparseTensor va = sparse_from_dense(a2, format), vb = sparse_from_dense(b2, format);
    verify_grad([&](std::vector<Var> v) { return tanh(dense(dot(with_pattern(v[0], va), with_pattern(v[1], vb)))); }, {va.data(), vb.data()});
    verify_rop([&](std::vector<Var> v) { return dense(dot(with_pattern(v[0], va), with_pattern(v[1], vb))); }, {va.data(), vb.data()});
  }
  SparseVar x = csr_matrix("x", f64), z = csc_matrix("z", f64);
  expect_error<TypeError>([&] { dot(x, z); }, {"one format", "to_csr"});
  SparseVar y = csr_matrix("y", f64);
  Function f = function({x, y}, {dense(dot(x, y))});
  expect_error<ShapeError>([&] { f(sparse_from_dense(a2, SparseFormat::csr), sparse_from_dense(a2, SparseFormat::csr)); },
                           {"sparse_product{csr}", "(6,5)", "columns must match b's rows"});
}

TEST(SparseOps, RegularGradientIsTheDenseMatrixsGradientEverywhere) {
  const Tensor a = sparse_dense(4, 5, 81), w = random_tensor({5, 3}, f64, -1, 1, 82), d = random_tensor({4, 5}, f64, -1, 1, 83);
  Var X = matrix("X", f64), W = matrix("W", f64), D = matrix("D", f64);
  auto dense_cost = [&](const Var& m) { return sum(square(dot(m, W))) + sum(tanh(m + D)) + sum(sum(m, {0}) * sum(m, {0})); };
  const Tensor want = eval1({X, W, D}, grad(dense_cost(X), X), {a, w, d});
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    SparseVar x = sparse_input(format, "x");
    const Var cost = sum(square(dot(x, W))) + sum(tanh(x + D)) + sum(sum(x, 0) * sum(x, 0));
    const std::vector<Tensor> out = function({x, W, D}, {regular_grad(cost, x), dense(structured_grad(cost, x))})(
        sparse_from_dense(a, format), w, d);
    EXPECT_EQ(out[0].shape(), (Shape{4, 5}));
    expect_values(out[0], want.to_vector<double>(), 1e-10);
    // At the stored entries it agrees with the structured gradient; elsewhere it is not zero.
    const auto regular = out[0].to_vector<double>(), structured = out[1].to_vector<double>(), av = a.to_vector<double>();
    int off_pattern = 0;
    for (size_t i = 0; i < av.size(); ++i) {
      if (av[i] != 0) EXPECT_NEAR(regular[i], structured[i], 1e-10);
      else off_pattern += regular[i] != 0;
    }
    EXPECT_GT(off_pattern, 0);
  }
}

TEST(SparseOps, EveryDifferentiableSparseOpPassesVerifyRop) {
  const Tensor a = sparse_dense(4, 3, 91), b = sparse_dense(4, 3, 92), c = sparse_dense(2, 3, 93), e = sparse_dense(4, 5, 94);
  const Tensor m = random_tensor({4, 3}, f64, -1, 1, 95), r = random_tensor({4}, f64, -1, 1, 96);
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    const SparseTensor va = sparse_from_dense(a, format), vb = sparse_from_dense(b, format), vc = sparse_from_dense(c, format),
                       ve = sparse_from_dense(e, format);
    auto on = [](const Var& data, const SparseTensor& value) { return with_pattern(data, value); };
    verify_rop([&](std::vector<Var> v) { return dense(on(v[0], va) * v[1]); }, {va.data(), m});
    verify_rop([&](std::vector<Var> v) { return dense(row_scale(on(v[0], va), v[1])); }, {va.data(), r});
    verify_rop([&](std::vector<Var> v) { return dense(on(v[0], va) + on(v[1], vb)) * 2.0; }, {va.data(), vb.data()});
    verify_rop([&](std::vector<Var> v) { return dense(on(v[0], va) - on(v[1], vb) * 2.0); }, {va.data(), vb.data()});
    verify_rop([&](std::vector<Var> v) { return dense(vstack({on(v[0], va), on(v[1], vc)})); }, {va.data(), vc.data()});
    verify_rop([&](std::vector<Var> v) { return dense(hstack({on(v[0], va), on(v[1], ve)})); }, {va.data(), ve.data()});
    verify_rop([&](std::vector<Var> v) { return dense(on(v[0], va) * on(v[1], vb)); }, {va.data(), vb.data()});
    verify_rop([&](std::vector<Var> v) { return dense(to_csr(on(v[0], va))) + dense(to_csc(on(v[0], va))); }, {va.data()});
    verify_rop([&](std::vector<Var> v) { return dense(structured(on(v[0], va), sigmoid)); }, {va.data()});
    verify_rop([&](std::vector<Var> v) { return dense(transpose(on(v[0], va))) * 3.0; }, {va.data()});
  }
  const SparseTensor rows_value = sparse_from_dense(a, SparseFormat::csr), columns_value = sparse_from_dense(a, SparseFormat::csc);
  verify_rop([&](std::vector<Var> v) { return dense(rows(with_pattern(v[0], rows_value), 1, 3)); }, {rows_value.data()});
  verify_rop([&](std::vector<Var> v) { return dense(columns(with_pattern(v[0], columns_value), 0, 2)); }, {columns_value.data()});
  verify_rop([&](std::vector<Var> v) { return sum(row(with_pattern(v[0], rows_value), -1), 1); }, {rows_value.data()});
  // sparse_grad's data follow the looked-up rows' gradients linearly.
  const Tensor ids = Tensor::from(std::vector<int64_t>{2, 0, 2});
  verify_rop([&](std::vector<Var> v) { return dense(sparse_grad(sum(square(take(v[0], constant(ids)))), v[0])); }, {m});
}

// Theano's names: csr_from_dense / csc_from_dense (the nonzero entries, counted when the function
// runs), dense_from_sparse, structured_dot.
TEST(SparseOps, DenseMatricesBecomeSparseInTheGraph) {
  const Tensor a = sparse_dense(6, 4, 21), w = random_tensor({4, 3}, f64, -1, 1, 22);
  Var d = matrix("d", f64), m = matrix("m", f64);
  for (SparseFormat format : kFormats) {
    SCOPED_TRACE(sparse_format_name(format));
    const SparseVar x = format == SparseFormat::csr ? csr_from_dense(d) : csc_from_dense(d);
    EXPECT_EQ(x.format(), format);
    Function f = function({d, m}, {x.data(), x.indices(), x.indptr(), x.shape(), dense_from_sparse(x), structured_dot(x, m)});
    const std::vector<Tensor> out = f(a, w);
    const SparseTensor want = sparse_from_dense(a, format);
    expect_values(out[0], want.data().to_vector<double>(), 0);
    EXPECT_EQ(out[1].to_vector<int64_t>(), want.indices().to_vector<int64_t>());
    EXPECT_EQ(out[2].to_vector<int64_t>(), want.indptr().to_vector<int64_t>());
    EXPECT_EQ(out[3].to_vector<int64_t>(), (std::vector<int64_t>{6, 4}));
    expect_values(out[4], a.to_vector<double>(), 0);
    expect_values(out[5], dense_dot(a, w).to_vector<double>(), 1e-12);
    // All zeros: nothing stored.
    const std::vector<Tensor> empty = f(Tensor::zeros({3, 2}, f64), Tensor::zeros({2, 3}, f64));
    EXPECT_EQ(empty[0].numel(), 0);
    EXPECT_EQ(empty[2].to_vector<int64_t>(), (std::vector<int64_t>(format == SparseFormat::csr ? 4 : 3, 0)));
    // The gradient is the data's at the stored entries, zero where a holds a zero.
    const Var g = grad(sum(x.data() * x.data()), d);
    const std::vector<double> gv = function({d}, {g})(a)[0].to_vector<double>(), av = a.to_vector<double>();
    for (size_t i = 0; i < av.size(); ++i) EXPECT_DOUBLE_EQ(gv[i], 2 * av[i]) << i;
    const Tensor full = random_tensor({3, 4}, f64, 0.5, 1, 23);  // no entry near zero
    verify_grad(
        [&](std::vector<Var> v) {
          const SparseVar s = format == SparseFormat::csr ? csr_from_dense(v[0]) : csc_from_dense(v[0]);
          return sum(structured_dot(s, v[1]) * 2.0);
        },
        {full, random_tensor({4, 2}, f64, -1, 1, 24)});
  }
  EXPECT_THROW(csr_from_dense(vector("v", f64)), TypeError);
}

// Found by the concurrency trial: SparseShared::set_value set its four parts one at a time, so a
// call beside it computed with one matrix's data and the other's indices (24% of calls wrong, or
// "data and indices must have one entry per stored value").
TEST(SparseOps, ACallBesideSetValueSeesOneMatrixWhole) {
  const int64_t n = 32;
  std::vector<double> diagonal(n * n, 0.0), two_per_row(n * n, 0.0), column(n);
  for (int64_t i = 0; i < n; ++i) {
    diagonal[i * n + i] = 1;
    two_per_row[i * n + (n - 1 - i)] = 3;
    two_per_row[i * n + (i + 1) % n] += 5;
    column[i] = static_cast<double>(i);
  }
  const SparseTensor a = sparse_from_dense(Tensor::from(diagonal, {n, n}), SparseFormat::csr);
  const SparseTensor b = sparse_from_dense(Tensor::from(two_per_row, {n, n}), SparseFormat::csr);
  SparseShared s = sparse_shared(a, "S");
  Var x = matrix("x", f64);
  Function f = function({x}, {dot(s.var(), x)});
  const Tensor xv = Tensor::from(column, {n, 1});
  const std::vector<double> via_a = f(xv)[0].to_vector<double>();
  s.set_value(b);
  const std::vector<double> via_b = f(xv)[0].to_vector<double>();
  std::atomic<bool> done{false};
  std::atomic<int> calls{0}, wrong{0}, failed{0}, torn_reads{0};
  std::thread reader([&] {
    while (!done) {
      try {
        const std::vector<double> r = f(xv)[0].to_vector<double>();
        wrong += r != via_a && r != via_b;
        const int64_t nnz = s.get_value().nnz();
        torn_reads += nnz != a.nnz() && nnz != b.nnz();
      } catch (const Error&) {
        ++failed;
      }
      ++calls;
    }
  });
  for (int i = 0; i < 4000 || calls < 200; ++i) s.set_value(i % 2 ? a : b);
  done = true;
  reader.join();
  EXPECT_EQ(wrong.load(), 0) << "of " << calls.load() << " calls";
  EXPECT_EQ(failed.load(), 0) << "of " << calls.load() << " calls";
  EXPECT_EQ(torn_reads.load(), 0);
}

TEST(SparseOps, RowAndColumnSumsOfF32AccumulateAsDenseSums) {
  // Found by the eager/sparse trial: a row of a million stored 0.1f summed to 100958 (in f32),
  // where sum(x) and the dense row sum give 100000.
  const Tensor d = Tensor::full({1, 1000000}, 0.1);
  SparseVar x = csr_matrix("x");
  const std::vector<Tensor> o = function({x}, {sum(x), sum(x, 1), sum(transpose(x), 0)})(sparse_from_dense(d, SparseFormat::csr));
  for (const Tensor& t : o) EXPECT_NEAR(t.to_vector<double>()[0], 100000.0, 0.05) << t.str();
}
