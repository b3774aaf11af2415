// kiln's and Eigen's side of bench/sparse.sh (bench/sparse_common.hpp): CSR x dense products at
// three densities, sparse matrix x vector, and kiln's sparse logistic regression training step.
// Eigen runs its row-major sparse matrix (32-bit indices, its default) times a row-major dense
// matrix, compiled for this CPU. Usage: bench_sparse_kiln THREADS
#include <Eigen/Sparse>
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstdlib>

#include "sparse_common.hpp"

using namespace kiln;

namespace {

SparseTensor to_kiln(const bench::Csr& m) {
  return SparseTensor::csr(Tensor::from(m.data), Tensor::from(m.indices), Tensor::from(m.indptr), {m.rows, m.cols});
}

Eigen::SparseMatrix<float, Eigen::RowMajor> to_eigen(const bench::Csr& m) {
  std::vector<Eigen::Triplet<float>> entries;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k)
      entries.emplace_back(static_cast<int>(r), static_cast<int>(m.indices[k]), m.data[k]);
  Eigen::SparseMatrix<float, Eigen::RowMajor> s(m.rows, m.cols);
  s.setFromTriplets(entries.begin(), entries.end());
  return s;
}

void print(const std::string& row, const char* library, double microseconds, double checksum) {
  std::printf("%s %s %.3f %.6e\n", row.c_str(), library, microseconds, checksum);
  std::fflush(stdout);
}

void products(int density) {
  using RowMajorDense = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const bench::Csr m = bench::random_csr(bench::kRows, bench::kCols, bench::kPerRow[density], 1);
  const SparseTensor x_value = to_kiln(m);
  const auto x_eigen = to_eigen(m);
  for (int64_t columns : {bench::kDenseColumns, int64_t{1}}) {
    const std::string row = columns == 1 ? bench::spmv_row(density) : bench::spmm_row(density);
    const std::vector<float> d = bench::operand(bench::kCols * columns, 2);
    SparseVar x = csr_matrix("x");
    Var w = matrix("w");
    Function f = function({x, w}, {Out(dot(x, w), {.borrow = true})}, {.keep_buffers = true});
    std::vector<Tensor> args = sparse_parts(x_value), out;
    args.push_back(Tensor::from(d, {bench::kCols, columns}));
    const double us = bench::median_microseconds([&] { f.call(args, out); });
    print(row, "kiln", us, bench::checksum(out[0].data<float>(), out[0].numel()));

    const RowMajorDense d_eigen = Eigen::Map<const RowMajorDense>(d.data(), bench::kCols, columns);
    RowMajorDense r_eigen(bench::kRows, columns);
    const double eigen_us = bench::median_microseconds([&] { r_eigen.noalias() = x_eigen * d_eigen; });
    print(row, "eigen", eigen_us, bench::checksum(r_eigen.data(), r_eigen.size()));
  }
}

void logistic_regression() {
  const bench::Csr m = bench::random_csr(bench::kExamples, bench::kFeatures, bench::kFeaturesPerExample, 4);
  std::vector<Tensor> args = sparse_parts(to_kiln(m)), out;
  args.push_back(Tensor::from(bench::labels(), {bench::kExamples, 1}));
  Shared w = shared(Tensor::zeros({bench::kFeatures, 1}, f32), "w"), b = shared(Tensor::zeros({}, f32), "b");
  SparseVar x = csr_matrix("x");
  Var y = matrix("y");
  Var p = sigmoid(dot(x, w) + b);
  Var loss = mean(binary_crossentropy(p, y));
  const std::vector<Var> g = grad(loss, {w, b});
  Function step = function({x, y}, {Out(loss, {.borrow = true})},
                           {.updates = {{w, w - bench::kLearningRate * g[0]}, {b, b - bench::kLearningRate * g[1]}},
                            .keep_buffers = true});
  for (int i = 0; i < 4; ++i) step.call(args, out);  // the checksum: the loss of the 4th step from zero weights
  const double loss_after_3 = out[0].item<float>();
  const double us = bench::median_microseconds([&] { step.call(args, out); });
  print("logreg_step", "kiln", us, loss_after_3);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  set_num_threads(threads);
  Eigen::setNbThreads(threads);
  for (int density = 0; density < 3; ++density) products(density);
  logistic_regression();
}
