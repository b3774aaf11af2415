#include <iostream>

#include "count_operator_new.hpp"
#include "ops/blas.hpp"
#include "ops/gemm_choice.hpp"
#include "ops/openblas.hpp"
#include "tensor/isa.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {
std::vector<double> naive_matmul(const Tensor& a, const Tensor& b) {
  auto A = a.to_vector<double>(), B = b.to_vector<double>();
  int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += A[i * k + p] * B[p * n + j];
  return c;
}
}  // namespace

TEST(Blas, DotMatrixMatrixAllBackendsAndLayouts) {
  for (DType dt : {f32, f64})
    for (int64_t m : {1, 3, 60}) {
      Var a = matrix("a", dt), b = matrix("b", dt);
      Tensor av = random_tensor({m, 50}, dt, -1, 1, 1), bv = random_tensor({50, 20}, dt, -1, 1, 2);
      expect_values(eval1({a, b}, dot(a, b), {av, bv}), naive_matmul(av, bv), dt == f32 ? 1e-4 : 1e-10);
      // Transposed operands are passed to the backend without copies.
      Tensor at = av.clone().reshape({m, 50});
      Var aT = matrix("aT", dt), bT = matrix("bT", dt);
      Tensor atv = Tensor::empty({50, m}, dt), btv = Tensor::empty({20, 50}, dt);
      atv.copy_from(av.view({50, m}, {1, 50}, 0));
      btv.copy_from(bv.view({20, 50}, {1, 20}, 0));
      expect_values(eval1({aT, bT}, dot(transpose(aT), transpose(bT)), {atv, btv}), naive_matmul(av, bv),
                    dt == f32 ? 1e-4 : 1e-10);
    }
}

TEST(Blas, DotVectorCases) {
  Var m = matrix("m", f64), v = vector("v", f64), w = vector("w", f64);
  Tensor mv = Tensor::from({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3});
  auto o = eval({m, v, w}, {dot(m, v), dot(w, m), dot(v, v), dot(m, 2.0)},
                {mv, Tensor::from({1.0, 0.0, -1.0}, {3}), Tensor::from({1.0, 1.0}, {2})});
  expect_values(o[0], {-2, -2});
  expect_values(o[1], {5, 7, 9});
  expect_values(o[2], {2});
  expect_values(o[3], {2, 4, 6, 8, 10, 12});
}

TEST(Blas, DotGradients) {
  for (DType dt : {f64, f32}) {
    Tensor a = random_tensor({3, 4}, dt, -1, 1, 1), b = random_tensor({4, 5}, dt, -1, 1, 2);
    Tensor v = random_tensor({4}, dt, -1, 1, 3), w = random_tensor({3}, dt, -1, 1, 4);
    verify_grad([](std::vector<Var> x) { return dot(x[0], x[1]); }, {a, b});
    verify_grad([](std::vector<Var> x) { return dot(x[0], x[1]); }, {a, v});
    verify_grad([](std::vector<Var> x) { return dot(x[0], x[1]); }, {w, a});
    verify_grad([](std::vector<Var> x) { return dot(x[0], x[1]); }, {v, v.clone()});
  }
}

TEST(Blas, MatmulBatchedWithBroadcast) {
  Var a = tensor3("a", f64), b = matrix("b", f64);
  Tensor av = random_tensor({2, 3, 4}, f64, -1, 1, 5), bv = random_tensor({4, 2}, f64, -1, 1, 6);
  Tensor c = eval1({a, b}, matmul(a, b), {av, bv});
  EXPECT_EQ(c.shape(), (Shape{2, 3, 2}));
  for (int64_t i = 0; i < 2; ++i) {
    Tensor ai = av.view({3, 4}, {4, 1}, i * 12).clone();
    auto expected = naive_matmul(ai, bv);
    auto got = c.view({3, 2}, {2, 1}, i * 6).clone();
    expect_values(got, expected, 1e-10);
  }
  verify_grad([](std::vector<Var> x) { return matmul(x[0], x[1]); }, {av, bv});
  verify_grad([](std::vector<Var> x) { return matmul(x[0], x[1]); }, {av, random_tensor({4}, f64, -1, 1, 7)});
}

TEST(Blas, MatmulWithAnEmptyBatchAxisIsEmpty) {
  // A batch axis of 0 against 1 broadcasts to 0, as NumPy's (it came out 1 and read past an empty
  // operand); the gradient of the other operand is then zero.
  Var a = tensor3("a", f64), b = matrix("b", f64);
  Var c = matmul(a, b);
  for (Mode mode : {Mode::fast_run(), Mode::fast_compile()}) {
    Function f = function({a, b}, {c, grad(sum(c), b)}, {.mode = mode});
    const Tensor full = Tensor::ones({5, 2, 3}, f64);
    const std::vector<Tensor> r = f(full.view({0, 2, 3}, {6, 3, 1}, 0), Tensor::ones({3, 4}, f64));
    EXPECT_EQ(r[0].shape(), (Shape{0, 2, 4}));
    expect_values(r[1], std::vector<double>(12, 0.0));
  }
  EXPECT_EQ(matmul(Tensor::zeros({0, 2, 3}, f64), Tensor::ones({3, 4}, f64)).shape(), (Shape{0, 2, 4}));
  EXPECT_EQ(matmul(Tensor::zeros({2, 1, 2, 3}, f64), Tensor::ones({0, 3, 4}, f64)).shape(), (Shape{2, 0, 2, 4}));
  EXPECT_EQ(matmul(Tensor::zeros({3}, f64), Tensor::ones({0, 3, 4}, f64)).shape(), (Shape{0, 4}));
}

TEST(Blas, ShapeAndTypeErrors) {
  Var a = matrix("a"), b = matrix("b");
  Function f = function({a, b}, {dot(a, b)});
  expect_error<ShapeError>([&] { f(Tensor::zeros({2, 3}), Tensor::zeros({4, 5})); },
                           {"dot", "(2,3)", "(4,5)", "not aligned", "blas_test.cpp"});
  expect_error<TypeError>([&] { dot(tensor3("t"), b); }, {"dot", "1-D or 2-D", "matmul"});
  expect_error<TypeError>([&] { matmul(scalar("s"), b); }, {"matmul", "at least one dimension"});
}

TEST(Blas, LargeProductMatchesReference) {
  Var a = matrix("a", f32), b = matrix("b", f32);
  Tensor av = random_tensor({200, 300}, f32, -1, 1, 8), bv = random_tensor({300, 100}, f32, -1, 1, 9);
  expect_values(eval1({a, b}, dot(a, b), {av, bv}), naive_matmul(av, bv), 1e-4);
}

TEST(Blas, RankOneProductsInEveryLayout) {
  // k = 1 takes the outer-product kernel: column x row, from plain and transposed storage.
  for (DType dt : {f32, f64}) {
    Var c = matrix("c", dt), r = matrix("r", dt), cT = matrix("cT", dt), rT = matrix("rT", dt);
    Tensor cv = random_tensor({7, 1}, dt, -1, 1, 1), rv = random_tensor({1, 9}, dt, -1, 1, 2);
    auto expected = naive_matmul(cv, rv);
    auto o = eval({c, r, cT, rT}, {dot(c, r), dot(transpose(cT), transpose(rT)), dot(transpose(cT), r)},
                  {cv, rv, cv.reshape({1, 7}), rv.reshape({9, 1})});
    for (const Tensor& t : o) expect_values(t, expected, dt == f32 ? 1e-6 : 1e-12);
  }
  verify_grad([](std::vector<Var> v) { return dot(v[0], v[1]); }, {random_tensor({5, 1}), random_tensor({1, 4}, f64, -1, 1, 3)});
}

// Issue 9, item 13: the library is built for baseline x86-64 and runs kernels compiled for AVX2 and
// AVX-512 where the CPU has them. Every matrix-product kernel (kiln's own rows, dot-product and
// rank-1 kernels, oneDNN), every transposition and every instruction set this CPU offers agrees
// with a naive product, with beta 0 (C holds NaN, which must not leak) and beta 1.
TEST(Blas, EveryProductKernelOnEveryInstructionSetMatchesANaiveProduct) {
  int checked = 0;
  for (Isa isa : {Isa::baseline, Isa::avx2, Isa::avx512}) {
    limit_isa(isa);
    for (DType dt : {f32, f64})
      for (int64_t m : {1, 2, 3, 4, 5, 9})
        for (int64_t k : {1, 3, 10, 17, 40})
          for (int64_t n : {1, 5, 10, 16, 17, 33, 70})
            for (int transposes = 0; transposes < 4; ++transposes)
              for (double beta : {0.0, 1.0}) {
                const bool ta = transposes & 1, tb = transposes & 2;
                Tensor a = random_tensor({m, k}, dt, -1, 1, static_cast<uint64_t>(m * 131 + k)),
                       b = random_tensor({k, n}, dt, -1, 1, static_cast<uint64_t>(n * 7 + k));
                Tensor a_stored = ta ? a.clone().view({k, m}, {1, k}, 0).clone() : a;  // op(A) stored transposed
                Tensor b_stored = tb ? b.clone().view({n, k}, {1, n}, 0).clone() : b;
                Tensor a_op = ta ? a_stored.view({m, k}, {1, m}, 0) : a;
                Tensor b_op = tb ? b_stored.view({k, n}, {1, k}, 0) : b;
                Tensor c = beta == 0.0 ? Tensor::full({m, n}, std::nan(""), dt) : random_tensor({m, n}, dt, -1, 1, 5);
                std::vector<double> expected = naive_matmul(a, b), before = c.to_vector<double>();
                for (size_t i = 0; i < expected.size(); ++i) expected[i] = 0.5 * expected[i] + (beta == 0.0 ? 0.0 : before[i]);
                gemm(0.5, a_op, b_op, beta, c);
                SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dt) + " m=" + std::to_string(m) + " k=" +
                             std::to_string(k) + " n=" + std::to_string(n) + (ta ? " A^T" : "") + (tb ? " B^T" : "") +
                             " beta=" + std::to_string(beta));
                expect_values(c, expected, dt == f32 ? 1e-5 : 1e-13);
                ++checked;
              }
  }
  limit_isa(Isa::avx512);
  std::cout << "matrix products checked: " << checked << " (this CPU runs up to " << isa_name(active_isa()) << ")\n";
  EXPECT_EQ(checked, 3 * 2 * 6 * 5 * 7 * 4 * 2);
}

TEST(Blas, ProductsOfIntegersAreComputedAndReturnedInF64) {
  Var a = matrix("a", i64), b = matrix("b", i64), v = vector("v", i32);
  const Tensor av = Tensor::from(std::vector<int64_t>{1, 2, 3, 4}, {2, 2});
  const Tensor bv = Tensor::from(std::vector<int64_t>{5, 6, 7, 8}, {2, 2});
  const Tensor product = eval1({a, b}, dot(a, b), {av, bv});
  EXPECT_EQ(product.dtype(), f64);
  expect_values(product, {19, 22, 43, 50}, 0);
  expect_values(eval1({a, b}, matmul(a, b), {av, bv}), {19, 22, 43, 50}, 0);
  EXPECT_EQ(dot(v, v).dtype(), f64);
}

// A product whose library KILN_GEMM pins is not timed, and its calls pay for no trial: no
// allocation in a steady loop (each call used to allocate the trial's private output). The same
// path serves every new shape once the table of timed choices is full.
TEST(Blas, AProductThatIsNotTimedAllocatesNothing) {
  if (!openblas()) GTEST_SKIP() << "OpenBLAS is not installed: one candidate library, no product is timed";
  setenv("KILN_GEMM", "openblas", 1);  // read once per process, at its first product
  const bool pinned = pinned_gemm() == GemmLibrary::openblas;
  unsetenv("KILN_GEMM");
  if (!pinned) GTEST_SKIP() << "this process ran a product before the test pinned the library (the suite run as one process)";
  set_num_threads(1);
  constexpr int64_t m = 2, n = 2, k = 40;
  std::vector<float> a(m * k, 0.5f), b(k * n, 0.25f), c(m * n);
  std::vector<std::byte> scratch(1 << 16);
  auto product = [&] {
    gemm(f32, m, n, k, 1.0, MatrixView{reinterpret_cast<const std::byte*>(a.data()), m, k, k, 1},
         MatrixView{reinterpret_cast<const std::byte*>(b.data()), k, n, n, 1}, 0.0, reinterpret_cast<std::byte*>(c.data()), n, scratch);
  };
  product();
  const int64_t before = allocations_so_far();
  for (int i = 0; i < 10; ++i) product();
  EXPECT_EQ(allocations_so_far() - before, 0);
  EXPECT_FLOAT_EQ(c[0], 0.125f * static_cast<float>(k));
}
