#pragma once
// The sparse benchmark (bench/sparse.sh), shared by kiln (with Eigen) and LibTorch: the same CSR
// matrices and dense operands from the same seeds, the same timing (bench/eager_common.hpp) and
// the same checksums, so sparse.sh can check that every side computed the same numbers. Each
// program prints one line per row and library:
//   ROW LIBRARY MICROSECONDS CHECKSUM
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "eager_common.hpp"

namespace bench {

constexpr int64_t kRows = 10000, kCols = 10000, kDenseColumns = 64;
// Stored entries per row at 0.1%, 1% and 10% of the columns.
constexpr int64_t kPerRow[] = {10, 100, 1000};
constexpr const char* kDensityNames[] = {"0.1%", "1%", "10%"};
// The logistic regression: 10,000 examples of 10,000 features, 1% stored.
constexpr int64_t kExamples = 10000, kFeatures = 10000, kFeaturesPerExample = 100;
constexpr float kLearningRate = 0.5f;

struct Csr {
  int64_t rows = 0, cols = 0;
  std::vector<float> data;
  std::vector<int64_t> indices, indptr;
};

// per_row distinct columns per row, sorted, values in [-1, 1]: the same for every seed on every side.
inline Csr random_csr(int64_t rows, int64_t cols, int64_t per_row, uint64_t seed) {
  Csr m{rows, cols, {}, {}, {0}};
  uint64_t s = seed * 0x9E3779B97F4A7C15ULL + 1;
  auto next = [&] {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    return s;
  };
  std::vector<char> taken(static_cast<size_t>(cols), 0);
  std::vector<int64_t> row;
  for (int64_t r = 0; r < rows; ++r) {
    row.clear();
    while (static_cast<int64_t>(row.size()) < per_row) {
      const int64_t c = static_cast<int64_t>(next() % static_cast<uint64_t>(cols));
      if (!taken[c]) taken[c] = 1, row.push_back(c);
    }
    std::sort(row.begin(), row.end());
    for (int64_t c : row) {
      taken[c] = 0;
      m.indices.push_back(c);
      m.data.push_back(static_cast<float>(static_cast<double>(next() >> 11) / static_cast<double>(1ULL << 53) * 2 - 1));
    }
    m.indptr.push_back(static_cast<int64_t>(m.indices.size()));
  }
  return m;
}

inline std::string spmm_row(int d) { return std::string("spmm_") + kDensityNames[d]; }
inline std::string spmv_row(int d) { return std::string("spmv_") + kDensityNames[d]; }
// Labels in {0, 1} from seed 3; dense operands in [-1, 1] from seed 2.
inline std::vector<float> labels() {
  std::vector<float> y = operand(kExamples, 3);
  for (float& v : y) v = v > 0 ? 1.0f : 0.0f;
  return y;
}

}  // namespace bench
