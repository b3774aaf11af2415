// LibTorch's side of bench/sparse.sh (bench/sparse_common.hpp): the same products with LibTorch's
// sparse CSR and COO tensors (each row reports the faster of the two, named), and the sparse
// logistic regression training step with autograd (COO: torch::_sparse_mm, what torch.sparse.mm calls, differentiates both
// operands). Usage: bench_sparse_torch THREADS
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "sparse_common.hpp"

namespace {

torch::Tensor i64_tensor(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kLong); }
torch::Tensor f32_tensor(const std::vector<float>& v) { return torch::tensor(v, torch::kFloat); }

torch::Tensor to_csr(const bench::Csr& m) {
  return torch::sparse_csr_tensor(i64_tensor(m.indptr), i64_tensor(m.indices), f32_tensor(m.data), {m.rows, m.cols},
                                  torch::kFloat);
}

torch::Tensor to_coo(const bench::Csr& m) {
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t k = m.indptr[r]; k < m.indptr[r + 1]; ++k) rows.push_back(r);
  const torch::Tensor indices = torch::stack({i64_tensor(rows), i64_tensor(m.indices)});
  return torch::sparse_coo_tensor(indices, f32_tensor(m.data), {m.rows, m.cols}).coalesce();
}

void print(const std::string& row, const std::string& library, double microseconds, double checksum) {
  std::printf("%s %s %.3f %.6e\n", row.c_str(), library.c_str(), microseconds, checksum);
  std::fflush(stdout);
}

void products(int density) {
  torch::NoGradGuard no_grad;
  const bench::Csr m = bench::random_csr(bench::kRows, bench::kCols, bench::kPerRow[density], 1);
  const torch::Tensor csr = to_csr(m), coo = to_coo(m);
  for (int64_t columns : {bench::kDenseColumns, int64_t{1}}) {
    const std::string row = columns == 1 ? bench::spmv_row(density) : bench::spmm_row(density);
    const torch::Tensor d = f32_tensor(bench::operand(bench::kCols * columns, 2)).reshape({bench::kCols, columns});
    torch::Tensor result;
    const double csr_us = bench::median_microseconds([&] { result = torch::mm(csr, d); });
    const double csr_checksum = bench::checksum(result.contiguous().data_ptr<float>(), result.numel());
    const double coo_us = bench::median_microseconds([&] { result = torch::mm(coo, d); });
    const double coo_checksum = bench::checksum(result.contiguous().data_ptr<float>(), result.numel());
    if (csr_us <= coo_us) print(row, "torch-csr", csr_us, csr_checksum);
    else print(row, "torch-coo", coo_us, coo_checksum);
  }
}

void logistic_regression() {
  const bench::Csr m = bench::random_csr(bench::kExamples, bench::kFeatures, bench::kFeaturesPerExample, 4);
  const torch::Tensor x = to_coo(m);
  const torch::Tensor y = f32_tensor(bench::labels()).reshape({bench::kExamples, 1});
  torch::Tensor w = torch::zeros({bench::kFeatures, 1}, torch::requires_grad()), b = torch::zeros({}, torch::requires_grad());
  double loss_value = 0;
  auto step = [&] {
    const torch::Tensor p = torch::sigmoid(torch::_sparse_mm(x, w) + b);
    const torch::Tensor loss = torch::binary_cross_entropy(p, y);
    loss.backward();
    torch::NoGradGuard no_grad;
    w -= bench::kLearningRate * w.grad();
    b -= bench::kLearningRate * b.grad();
    w.mutable_grad().zero_();
    b.mutable_grad().zero_();
    loss_value = loss.item<float>();
  };
  for (int i = 0; i < 4; ++i) step();
  const double loss_after_3 = loss_value;
  const double us = bench::median_microseconds(step);
  print("logreg_step", "torch-coo", us, loss_after_3);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  torch::set_num_threads(threads);
  for (int density = 0; density < 3; ++density) products(density);
  logistic_regression();
}
