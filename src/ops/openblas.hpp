#pragma once
#include <cstdint>
#include <string>

namespace kiln {

// OpenBLAS built for OpenMP (Debian's libopenblas0-openmp), loaded when first wanted if it is
// installed: one more matrix-product library to measure against the others on this CPU. Only the
// OpenMP build is loaded (it shares kiln's one OpenMP runtime; the pthread build's spinning pool
// would fight it on a small machine), privately (RTLD_LOCAL), so another BLAS in the process is
// left alone. It follows omp_get_max_threads() at each call.
struct OpenBlas {
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
  using Dgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*, int, double, double*, int);
  Sgemm sgemm = nullptr;  // cblas_sgemm
  Dgemm dgemm = nullptr;  // cblas_dgemm
  std::string core;       // the kernels it chose for this CPU (openblas_get_corename)
};

// Null when the OpenMP build is not installed or not usable.
const OpenBlas* openblas();

// cblas constants.
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

}  // namespace kiln
