#include "ops/blas.hpp"

#include <dnnl.h>
#include <omp.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "kiln/ops.hpp"
#include "ops/elemwise.hpp"
#include "ops/gemm_choice.hpp"
#include "ops/openblas.hpp"
#include "ops/reduce.hpp"
#include "ops/shape.hpp"
#include "tensor/copy.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/isa.hpp"
#include "tensor/parallel.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

namespace {

// A matrix as BLAS reads it: stored row-major (transposed = false) or column-major, with a leading
// dimension. Only views with a unit stride along one axis have one.
struct BlasLayout {
  bool transposed;
  int64_t ld;
};

std::optional<BlasLayout> blas_layout(const MatrixView& v) {
  const int64_t rows = v.rows, cols = v.cols;
  if ((v.col_stride == 1 || cols == 1) && v.row_stride >= std::max<int64_t>(cols, 1) && (rows == 1 || v.row_stride > 0))
    return BlasLayout{false, std::max<int64_t>(v.row_stride, std::max<int64_t>(cols, 1))};
  if ((v.row_stride == 1 || rows == 1) && v.col_stride >= std::max<int64_t>(rows, 1) && (cols == 1 || v.col_stride > 0))
    return BlasLayout{true, std::max<int64_t>(v.col_stride, std::max<int64_t>(rows, 1))};
  return std::nullopt;
}

// C = alpha * op(A) op(B) + beta * C for the products oneDNN's kernels do not pay for (a few
// rows) and for f64 (oneDNN has none). Blocks of C accumulate in registers over the whole depth:
// along the rows of B when B is stored as is, as dot products along them when B is stored
// transposed. Every accumulator index is a compile-time constant, so the blocks stay in
// registers; everything is compiled for each instruction set (tensor/isa.hpp).
template <class T> constexpr int64_t kVector = 64 / sizeof(T);  // one AVX-512 register of T

// beta = 0 overwrites C, NaN included.
template <class T> void store_scaled(T& out, T value, T alpha, T beta) { out = alpha * value + (beta == T(0) ? T(0) : beta * out); }

// MR rows of C over NC columns from B stored row-major (b points at their first column); only the
// first nc columns are stored.
template <class T, int64_t MR, int64_t NC, class ARow>
void row_block(int64_t k, const ARow& a_row, const T* b, int64_t ldb, T* c, int64_t ldc, int64_t nc, T alpha, T beta) {
  T acc[MR][NC] = {};
  for (int64_t p = 0; p < k; ++p) {
    const T* bp = b + p * ldb;
    for (int64_t r = 0; r < MR; ++r) {
      const T ar = a_row(r, p);
      // simd: a loop of one vector would otherwise be unrolled first and then not vectorized.
#pragma omp simd
      for (int64_t l = 0; l < NC; ++l) acc[r][l] += ar * bp[l];
    }
  }
  if (nc == NC) {
    for (int64_t r = 0; r < MR; ++r)
#pragma omp simd
      for (int64_t l = 0; l < NC; ++l) store_scaled(c[r * ldc + l], acc[r][l], alpha, beta);
    return;
  }
  for (int64_t r = 0; r < MR; ++r)
    for (int64_t l = 0; l < nc; ++l) store_scaled(c[r * ldc + l], acc[r][l], alpha, beta);
}

// One row of C from B stored row-major: whole rows of B stream through, four at a time, into the
// row of C held in cache (a row vector times a matrix reads the matrix once, contiguously).
template <class T>
void gemv_rows(int64_t n, int64_t k, T alpha, const T* a, int64_t a_step, const T* b, int64_t ldb, T beta, T* c) {
  for (int64_t j = 0; j < n; ++j) c[j] = beta == T(0) ? T(0) : beta * c[j];  // beta = 0 ignores NaN in C
  int64_t p = 0;
  for (; p + 4 <= k; p += 4) {  // alpha scales the products, not a (which may overflow alone)
    const T a0 = a[p * a_step], a1 = a[(p + 1) * a_step], a2 = a[(p + 2) * a_step], a3 = a[(p + 3) * a_step];
    const T *b0 = b + p * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
    for (int64_t j = 0; j < n; ++j) c[j] += alpha * ((a0 * b0[j] + a1 * b1[j]) + (a2 * b2[j] + a3 * b3[j]));
  }
  for (; p < k; ++p) {
    const T ap = a[p * a_step];
    const T* bp = b + p * ldb;
    for (int64_t j = 0; j < n; ++j) c[j] += alpha * (ap * bp[j]);
  }
}

// panel: room for k x NC elements; panel_ready says whether an earlier row block filled it.
template <class T, int64_t MR, int64_t NC>
void gemm_rows(bool ta, int64_t i0, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb,
               T beta, T* c, int64_t ldc, T* panel, bool& panel_ready) {
  // op(A)(i, p) through strides, not a branch: a branch in the depth loop keeps it from vectorizing.
  const int64_t row_step = ta ? 1 : lda, depth_step = ta ? lda : 1;
  const T* a_rows = a + i0 * row_step;
  auto a_row = [&](int64_t r, int64_t p) { return a_rows[r * row_step + p * depth_step]; };
  T* c_rows = c + i0 * ldc;
  int64_t j0 = 0;
  for (; j0 + NC <= n; j0 += NC) row_block<T, MR, NC>(k, a_row, b + j0, ldb, c_rows + j0, ldc, NC, alpha, beta);
  if (j0 == n) return;
  // The last columns, fewer than NC: B's panel copied with zeros beyond n (once for all row
  // blocks), so the same kernel runs on it.
  const int64_t nc = n - j0;
  if (!panel_ready) {
    std::fill_n(panel, k * NC, T(0));
    for (int64_t p = 0; p < k; ++p) std::copy_n(b + p * ldb + j0, nc, panel + p * NC);
    panel_ready = true;
  }
  row_block<T, MR, NC>(k, a_row, panel, NC, c_rows + j0, ldc, nc, alpha, beta);
}

// MR rows of C, four columns at a time, from B stored transposed (n x k): dot products of rows of
// op(A) (contiguous, ld k) with rows of B, in vector-wide partial sums. The four rows of B are
// named, not indexed: loads through an array of pointers do not vectorize.
template <class T, int64_t MR>
void gemm_dots(const T* a_rows, int64_t i0, int64_t n, int64_t k, T alpha, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  constexpr int64_t V = kVector<T>;
  for (int64_t j0 = 0; j0 < n; j0 += 4) {
    auto row = [&](int64_t q) { return b + std::min(j0 + q, n - 1) * ldb; };  // past n: computed, not stored
    const T *b0 = row(0), *b1 = row(1), *b2 = row(2), *b3 = row(3);
    T lanes[MR][4][V] = {};
    int64_t p = 0;
    for (; p + V <= k; p += V)
      for (int64_t r = 0; r < MR; ++r) {
        const T* ar = a_rows + r * k + p;
#pragma omp simd
        for (int64_t l = 0; l < V; ++l) {
          const T x = ar[l];
          lanes[r][0][l] += x * b0[p + l];
          lanes[r][1][l] += x * b1[p + l];
          lanes[r][2][l] += x * b2[p + l];
          lanes[r][3][l] += x * b3[p + l];
        }
      }
    for (int64_t r = 0; r < MR; ++r) {
      T sums[4] = {};
      for (int64_t q = 0; q < 4; ++q)
        for (int64_t l = 0; l < V; ++l) sums[q] += lanes[r][q][l];
      for (int64_t t = p; t < k; ++t) {
        const T x = a_rows[r * k + t];
        sums[0] += x * b0[t], sums[1] += x * b1[t], sums[2] += x * b2[t], sums[3] += x * b3[t];
      }
      for (int64_t q = 0; q < 4; ++q)
        if (j0 + q < n) store_scaled(c[(i0 + r) * ldc + j0 + q], sums[q], alpha, beta);
    }
  }
}

// C = alpha op(A) B + beta C for B stored transposed (n x k) with n <= NC: B^T packed into panel
// (k x NC, zeros past n), then row blocks of four and single rows as for B stored as is.
template <class T, int64_t NC>
void packed_transposed_rows(bool ta, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                            int64_t ldb, T beta, T* c, int64_t ldc, T* panel) {
  if (n < NC) std::fill_n(panel, k * NC, T(0));
  for (int64_t j = 0; j < n; ++j) {
    const T* row = b + j * ldb;
    for (int64_t p = 0; p < k; ++p) panel[p * NC + j] = row[p];
  }
  const int64_t row_step = ta ? 1 : lda, depth_step = ta ? lda : 1;
  int64_t i0 = 0;
  for (; i0 + 4 <= m; i0 += 4) {
    const T* a_rows = a + i0 * row_step;
    auto a_row = [&](int64_t r, int64_t p) { return a_rows[r * row_step + p * depth_step]; };
    row_block<T, 4, NC>(k, a_row, panel, NC, c + i0 * ldc, ldc, n, alpha, beta);
  }
  for (; i0 < m; ++i0) gemv_rows(n, k, alpha, a + i0 * row_step, depth_step, panel, NC, beta, c + i0 * ldc);
}

// The elements of scratch small_gemm needs for a depth of k: B's last column panel (k x 2 vectors),
// B^T packed (as many), or two rows of op(A) packed.
template <class T> int64_t small_gemm_scratch(int64_t k) { return k * 2 * kVector<T>; }

template <class T>
void small_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                int64_t ldb, T beta, T* c, int64_t ldc, T* scratch) {
  for_this_cpu([&] {
    if (!ta && !tb && n == 1 && ldb == 1 && ldc == 1) {
      // A matrix times a vector: dot products of A's rows with the vector, read once each (as
      // the row vector times the matrix transposed: B's rows are A's).
      gemm_dots<T, 1>(b, 0, m, k, alpha, a, lda, beta, c, ldc);
      return;
    }
    if (!tb) {
      bool panel_ready = false;
      int64_t i0 = 0;
      // Blocks one vector wide for narrow outputs, two otherwise.
      if (n <= kVector<T>)
        for (; i0 + 4 <= m; i0 += 4)
          gemm_rows<T, 4, kVector<T>>(ta, i0, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch, panel_ready);
      else
        for (; i0 + 4 <= m; i0 += 4)
          gemm_rows<T, 4, 2 * kVector<T>>(ta, i0, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch, panel_ready);
      for (; i0 < m; ++i0) gemv_rows(n, k, alpha, ta ? a + i0 : a + i0 * lda, ta ? lda : 1, b, ldb, beta, c + i0 * ldc);
      return;
    }
    if (m >= 4 && n <= 2 * kVector<T>) {
      // Few columns from B stored transposed: B packed as rows (zeros past n), so that blocks of
      // C accumulate in registers as above; dot products of short rows would spend their time
      // summing lanes.
      if (n <= kVector<T>) return packed_transposed_rows<T, kVector<T>>(ta, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch);
      return packed_transposed_rows<T, 2 * kVector<T>>(ta, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch);
    }
    for (int64_t i0 = 0; i0 < m; i0 += 2) {
      const int64_t mr = std::min<int64_t>(2, m - i0);
      const T* rows = a + i0 * lda;
      if (ta || (mr > 1 && lda != k)) {
        for (int64_t r = 0; r < mr; ++r)
          for (int64_t p = 0; p < k; ++p) scratch[r * k + p] = ta ? a[p * lda + i0 + r] : a[(i0 + r) * lda + p];
        rows = scratch;
      }
      if (mr == 2) gemm_dots<T, 2>(rows, i0, n, k, alpha, b, ldb, beta, c, ldc);
      else gemm_dots<T, 1>(rows, i0, n, k, alpha, b, ldb, beta, c, ldc);
    }
  });
}

// C = alpha * a b^T + beta * C for a column a (m, stride sa) and a row b (n, stride sb): the weight
// gradient of a single example. A plain vectorized loop; general GEMM kernels pack and zero C first.
template <class T>
void rank1_update(int64_t m, int64_t n, T alpha, const T* a, int64_t sa, const T* b, int64_t sb, T beta, T* c, int64_t ldc) {
  // By value: through references, every store into C might change alpha or beta.
  // alpha scales each product, as alpha * (a b) does: scaling a first overflowed where the product
  // did not (1e308 * 2 * 1e-300).
  for_this_cpu([m, n, alpha, a, sa, b, sb, beta, c, ldc] {
    for (int64_t i = 0; i < m; ++i) {
      const T ai = a[i * sa];
      T* ci = c + i * ldc;
      if (sb != 1)
        for (int64_t j = 0; j < n; ++j) ci[j] = (beta == T(0) ? T(0) : beta * ci[j]) + alpha * (ai * b[j * sb]);
      else if (beta == T(0))
        for (int64_t j = 0; j < n; ++j) ci[j] = alpha * (ai * b[j]);
      else
        for (int64_t j = 0; j < n; ++j) ci[j] = beta * ci[j] + alpha * (ai * b[j]);
    }
  });
}

// Products below this many multiply-adds run on one thread: waking a second costs more.
constexpr int64_t kThreadedProduct = int64_t{1} << 18;

// The threads a product of this size uses: one inside a parallel region (a kernel that shares
// images among the threads), where a library with its own pool (OpenBLAS) would otherwise start
// as many threads again on cores that are busy.
int product_threads(int64_t m, int64_t n, int64_t k) {
  return m * n * k < kThreadedProduct || omp_in_parallel() ? 1 : omp_get_max_threads();
}

// oneDNN's JIT gemm wins from two rows and columns up; for a single row kiln's gemv streams the
// matrix once, for a single column its dot products read each row once, and both match the best
// on one thread (bench/gemm.cpp, docs/performance.md). kiln's kernels get
// their scratch (gemm_scratch_bytes) exactly where oneDNN is not a candidate.
bool use_onednn(DType dtype, int64_t m, int64_t n, int64_t k) {
  return dtype == DType::f32 && m >= 2 && n >= 2 && !(n <= kVector<float> && k <= kVector<float>);
}

// The libraries that may run a product, the first being the one used when none is timed: oneDNN
// where it pays, else kiln's own kernels; OpenBLAS beside either where it is installed.
template <class T> SmallVector<GemmLibrary, 3> gemm_candidates(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  SmallVector<GemmLibrary, 3> candidates;
  candidates.push_back(use_onednn(dtype_of<T>(), m, n, k) ? GemmLibrary::onednn : GemmLibrary::own);
  constexpr int64_t kIntMax = 0x7fffffff;
  if (openblas() && std::max({m, n, k, lda, ldb, ldc}) <= kIntMax) candidates.push_back(GemmLibrary::openblas);
  return candidates;
}

// Runs fn with OpenMP held to the product's threads (oneDNN and OpenBLAS size their teams from
// omp_get_max_threads() of the calling thread).
template <class Fn> void with_product_threads(int64_t m, int64_t n, int64_t k, Fn fn) {
  const int threads = omp_get_max_threads();
  const bool single = threads > 1 && product_threads(m, n, k) == 1;
  if (single) omp_set_num_threads(1);
  try {
    fn();
  } catch (...) {
    if (single) omp_set_num_threads(threads);
    throw;
  }
  if (single) omp_set_num_threads(threads);
}

// C = alpha op(A) op(B) + beta C on one library, operands in BLAS layouts, k >= 1.
template <class T>
void run_gemm_kernel(GemmLibrary kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
                     const T* b, int64_t ldb, T beta, T* c, int64_t ldc, T* scratch) {
  if (kernel == GemmLibrary::own) return small_gemm<T>(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch);
  with_product_threads(m, n, k, [&] {
    if (kernel == GemmLibrary::openblas) {
      const OpenBlas& blas = *openblas();
      const int to = ta ? kCblasTrans : kCblasNoTrans, bo = tb ? kCblasTrans : kCblasNoTrans;
      auto i = [](int64_t v) { return static_cast<int>(v); };
      if constexpr (std::is_same_v<T, float>) blas.sgemm(kCblasRowMajor, to, bo, i(m), i(n), i(k), alpha, a, i(lda), b, i(ldb), beta, c, i(ldc));
      else blas.dgemm(kCblasRowMajor, to, bo, i(m), i(n), i(k), alpha, a, i(lda), b, i(ldb), beta, c, i(ldc));
      return;
    }
    if constexpr (std::is_same_v<T, float>) {
      const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
      if (st != dnnl_success) throw Error("gemm: oneDNN sgemm failed with status " + std::to_string(st));
    }
  });
}

// C = alpha op(A) op(B) + beta C, operands in BLAS layouts, k >= 1: on the library measured
// fastest for this product on this CPU (ops/gemm_choice.hpp), timed on a private C the first time.
template <class T>
void blas_product(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
                  int64_t ldb, T beta, T* c, int64_t ldc, T* scratch) {
  const GemmShape shape{dtype_of<T>(), ta, tb, m, n, k, product_threads(m, n, k)};
  // A shape's candidates are the same on every call but for OpenBLAS's 32-bit sizes, which leading
  // dimensions may pass: a known choice is checked for those alone.
  const auto known = known_gemm(shape);
  if (known && (*known != GemmLibrary::openblas || std::max({lda, ldb, ldc}) <= 0x7fffffff))
    return run_gemm_kernel<T>(*known, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch);
  const SmallVector<GemmLibrary, 3> candidates = gemm_candidates<T>(m, n, k, lda, ldb, ldc);
  GemmLibrary kernel = candidates[0];
  if (candidates.size() > 1) {
    if (known) {
      if (std::ranges::find(candidates, *known) != candidates.end()) kernel = *known;
    } else {
      // Made only when a trial runs: a shape that is not timed (a library pinned by KILN_GEMM, the
      // table of choices full) comes here on every call.
      std::vector<T> trial_c;
      kernel = measure_gemm(shape, std::span<const GemmLibrary>(candidates.begin(), candidates.end()), [&](GemmLibrary candidate) {
        trial_c.resize(static_cast<size_t>(m * n));
        run_gemm_kernel<T>(candidate, ta, tb, m, n, k, alpha, a, lda, b, ldb, T(0), trial_c.data(), n, scratch);
      });
    }
  }
  run_gemm_kernel<T>(kernel, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, scratch);
}

// The same for operands with no BLAS layout (a broadcast, a stepped slice): blocks of A and B are
// copied to the stack and multiplied there, so any view costs a copy of 1/64 of the work and no
// allocation.
template <class T>
void packed_product(int64_t m, int64_t n, int64_t k, T alpha, const MatrixView& a, const MatrixView& b, T beta, T* c,
                    int64_t ldc) {
  constexpr int64_t kB = 64;
  alignas(64) T pa[kB * kB], pb[kB * kB], scratch[kB * 2 * kVector<T>];
  const T* ad = reinterpret_cast<const T*>(a.data);
  const T* bd = reinterpret_cast<const T*>(b.data);
  for (int64_t i0 = 0; i0 < m; i0 += kB)
    for (int64_t j0 = 0; j0 < n; j0 += kB) {
      const int64_t mb = std::min(kB, m - i0), nb = std::min(kB, n - j0);
      for (int64_t p0 = 0; p0 < k; p0 += kB) {
        const int64_t kb = std::min(kB, k - p0);
        for (int64_t r = 0; r < mb; ++r)
          for (int64_t p = 0; p < kb; ++p) pa[r * kb + p] = ad[(i0 + r) * a.row_stride + (p0 + p) * a.col_stride];
        for (int64_t p = 0; p < kb; ++p)
          for (int64_t j = 0; j < nb; ++j) pb[p * nb + j] = bd[(p0 + p) * b.row_stride + (j0 + j) * b.col_stride];
        blas_product<T>(false, false, mb, nb, kb, alpha, pa, kb, pb, nb, p0 == 0 ? beta : T(1), c + i0 * ldc + j0, ldc, scratch);
      }
    }
}

template <class T>
void gemm_typed(int64_t m, int64_t n, int64_t k, T alpha, const MatrixView& a, const MatrixView& b, T beta, T* c,
                int64_t ldc, std::span<std::byte> scratch) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    const T product = alpha * T(0);  // alpha times an empty sum: NaN where alpha is not finite
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = (beta == T(0) ? T(0) : beta * c[i * ldc + j]) + product;
    return;
  }
  const T* ad = reinterpret_cast<const T*>(a.data);
  const T* bd = reinterpret_cast<const T*>(b.data);
  if (k == 1) return rank1_update<T>(m, n, alpha, ad, a.row_stride, bd, b.col_stride, beta, c, ldc);
  const std::optional<BlasLayout> la = blas_layout(a), lb = blas_layout(b);
  if (!la || !lb) return packed_product<T>(m, n, k, alpha, a, b, beta, c, ldc);
  blas_product<T>(la->transposed, lb->transposed, m, n, k, alpha, ad, la->ld, bd, lb->ld, beta, c, ldc,
                  reinterpret_cast<T*>(scratch.data()));
}

MatrixView matrix_of(const Tensor& t) {
  return {t.raw_data(), t.shape()[0], t.shape()[1], t.strides()[0], t.strides()[1]};
}

}  // namespace

int64_t gemm_scratch_bytes(DType dtype, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0 || k <= 1 || use_onednn(dtype, m, n, k)) return 0;
  return dtype == DType::f32 ? small_gemm_scratch<float>(k) * 4 : small_gemm_scratch<double>(k) * 8;
}

void gemm(DType dtype, int64_t m, int64_t n, int64_t k, double alpha, const MatrixView& a, const MatrixView& b, double beta,
          std::byte* c, int64_t ldc, std::span<std::byte> scratch) {
  if (dtype == DType::f32)
    return gemm_typed<float>(m, n, k, static_cast<float>(alpha), a, b, static_cast<float>(beta), reinterpret_cast<float*>(c),
                             ldc, scratch);
  if (dtype == DType::f64)
    return gemm_typed<double>(m, n, k, alpha, a, b, beta, reinterpret_cast<double*>(c), ldc, scratch);
  throw TypeError(std::string("gemm: needs f32 or f64, got ") + dtype_name(dtype));
}

void gemm(double alpha, const Tensor& a, const Tensor& b, double beta, const Tensor& c) {
  const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
  if (c.shape() != Shape{m, n} || b.shape()[0] != k || c.strides()[1] != 1)
    throw ShapeError("gemm: cannot compute " + c.str() + " from " + a.str() + " x " + b.str());
  std::vector<std::byte> scratch(static_cast<size_t>(gemm_scratch_bytes(c.dtype(), m, n, k)));
  gemm(c.dtype(), m, n, k, alpha, matrix_of(a), matrix_of(b), beta, c.raw_data(), std::max<int64_t>(c.strides()[0], 1),
       scratch);
}

std::vector<Type> Dot::infer_types(const std::vector<Type>& in) const {
  const Type &a = in[0], &b = in[1];
  if (a.dtype != b.dtype || !is_float(a.dtype))
    throw TypeError("dot: needs two float inputs of one dtype, got " + a.str() + " and " + b.str());
  if (a.ndim() < 1 || a.ndim() > 2 || b.ndim() < 1 || b.ndim() > 2)
    throw TypeError("dot: takes 1-D or 2-D inputs, got " + a.str() + " and " + b.str() + "; use matmul for batches");
  std::vector<bool> bc;
  if (a.ndim() == 2) bc.push_back(a.broadcastable[0]);
  if (b.ndim() == 2) bc.push_back(b.broadcastable[1]);
  return {Type{a.dtype, bc}};
}

std::vector<Shape> Dot::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  const Shape &a = in[0], &b = in[1];
  const int64_t ka = a.back(), kb = b.size() == 2 ? b[0] : b[0];
  if (ka != kb)
    throw ShapeError("dot: shapes " + shape_str(a) + " and " + shape_str(b) + " are not aligned: " + std::to_string(ka) +
                     " (dim " + std::to_string(a.size() - 1) + ") != " + std::to_string(kb) + " (dim 0)");
  Shape out;
  if (a.size() == 2) out.push_back(a[0]);
  if (b.size() == 2) out.push_back(b[1]);
  return {out};
}

std::vector<Var> Dot::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var &a = node.inputs[0], &b = node.inputs[1];
  const Var& g = gouts[0];
  auto col = [&](const Var& v) { return dimshuffle(v, {0, -1}, loc); };
  auto row = [&](const Var& v) { return dimshuffle(v, {-1, 0}, loc); };
  if (a.ndim() == 2 && b.ndim() == 2) return {dot(g, transpose(b, loc), loc), dot(transpose(a, loc), g, loc)};
  if (a.ndim() == 2) return {dot(col(g), row(b), loc), dot(transpose(a, loc), g, loc)};   // matrix . vector
  if (b.ndim() == 2) return {dot(b, g, loc), dot(col(a), row(g), loc)};                   // vector . matrix
  return {g * b, g * a};                                                                  // vector . vector
}

std::vector<Type> Gemm::infer_types(const std::vector<Type>& in) const {
  const Type &c = in[0], &a = in[1], &b = in[2], &alpha = in[3], &beta = in[4];
  for (const Type& t : in)
    if (t.dtype != c.dtype || !is_float(t.dtype)) throw TypeError("gemm: needs float inputs of one dtype, got " + t.str());
  if (a.ndim() != 2 || b.ndim() != 2 || c.ndim() != 2 || alpha.ndim() != 0 || beta.ndim() != 0)
    throw TypeError("gemm: needs 2-D c, a, b and 0-d alpha, beta");
  return {Type{c.dtype, {a.broadcastable[0], b.broadcastable[1]}}};
}

std::vector<Shape> Gemm::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& v) const {
  // The shape of c + product as NumPy broadcasts them: either may stretch a size-1 dimension.
  const Shape product = Dot().infer_shapes({in[1], in[2]}, v)[0];
  Shape out = product;
  for (size_t d = 0; d < 2; ++d) {
    if (in[0][d] == product[d] || in[0][d] == 1) continue;
    if (product[d] != 1)
      throw ShapeError("gemm: c of shape " + shape_str(in[0]) + " and the product's shape " + shape_str(product) +
                       " cannot be broadcast together");
    out[d] = in[0][d];
  }
  return {out};
}

std::vector<Var> Gemm::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var &c = node.inputs[0], &a = node.inputs[1], &b = node.inputs[2], &alpha = node.inputs[3], &beta = node.inputs[4];
  const Var& g = gouts[0];
  Var gc = sum_to_shape_of(g * beta, c, loc);
  const Var product = dot(a, b, loc);
  const Var gp = sum_to_shape_of(g, product, loc);  // the product may have been stretched to c's shape
  return {gc, dot(gp, transpose(b, loc), loc) * alpha, dot(transpose(a, loc), gp, loc) * alpha, sum(gp * product, {}, false, loc),
          sum(sum_to_shape_of(g, c, loc) * c, {}, false, loc)};
}

std::vector<Type> BatchedMatmul::infer_types(const std::vector<Type>& in) const {
  const Type &a = in[0], &b = in[1];
  if (a.dtype != b.dtype || !is_float(a.dtype) || a.ndim() != b.ndim() || a.ndim() < 3)
    throw TypeError("matmul: needs float inputs of one dtype and equal ndim >= 3 here, got " + a.str() + " and " + b.str());
  std::vector<bool> bc;
  for (int64_t d = 0; d + 2 < a.ndim(); ++d) bc.push_back(a.broadcastable[d] && b.broadcastable[d]);
  bc.push_back(a.broadcastable[a.ndim() - 2]);
  bc.push_back(b.broadcastable[b.ndim() - 1]);
  return {Type{a.dtype, bc}};
}

std::vector<Shape> BatchedMatmul::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  const Shape &a = in[0], &b = in[1];
  const size_t nd = a.size();
  if (a[nd - 1] != b[nd - 2])
    throw ShapeError("matmul: shapes " + shape_str(a) + " and " + shape_str(b) + " are not aligned: " +
                     std::to_string(a[nd - 1]) + " != " + std::to_string(b[nd - 2]));
  Shape out;
  for (size_t d = 0; d + 2 < nd; ++d) {
    if (a[d] != b[d] && a[d] != 1 && b[d] != 1)
      throw ShapeError("matmul: batch dimensions of " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast");
    out.push_back(a[d] == 1 ? b[d] : a[d]);  // NumPy: 1 against 0 is 0
  }
  out.push_back(a[nd - 2]);
  out.push_back(b[nd - 1]);
  return {out};
}

namespace {
Var swap_last(const Var& v, const Loc& loc) {
  std::vector<int64_t> p;
  for (int64_t d = 0; d < v.ndim(); ++d) p.push_back(d);
  std::swap(p[p.size() - 1], p[p.size() - 2]);
  return dimshuffle(v, p, loc);
}
}  // namespace

std::vector<Var> BatchedMatmul::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const Var &a = node.inputs[0], &b = node.inputs[1];
  const Var& g = gouts[0];
  return {sum_to_shape_of(matmul(g, swap_last(b, loc), loc), a, loc),
          sum_to_shape_of(matmul(swap_last(a, loc), g, loc), b, loc)};
}

namespace {

// A 1-D or 2-D operand of dot as a matrix: a vector is a row (a) or a column (b).
MatrixView dot_operand(const Tensor& t, bool is_left) {
  if (t.ndim() == 2) return matrix_of(t);
  return is_left ? MatrixView{t.raw_data(), 1, t.shape()[0], 0, t.strides()[0]}
                 : MatrixView{t.raw_data(), t.shape()[0], 1, t.strides()[0], 0};
}

class DotKernel final : public KernelOf<Dot> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    const int64_t m = in[0].size() == 2 ? in[0][0] : 1, k = in[0].back(), n = in[1].size() == 2 ? in[1][1] : 1;
    return gemm_scratch_bytes(output_dtype(0), m, n, k);
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const MatrixView a = dot_operand(in[0], true), b = dot_operand(in[1], false);
    gemm(out[0].dtype(), a.rows, b.cols, a.cols, 1.0, a, b, 0.0, out[0].raw_data(), b.cols, scratch);
  }
};

// o = beta * c + alpha * a b. c and the product broadcast against each other; where the product
// is the smaller (rare: types cannot tell), it goes to scratch and is added stretched.
class GemmKernel final : public KernelOf<Gemm> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>& out) const override {
    const int64_t m = in[1][0], k = in[1][1], n = in[2][1];
    const int64_t product = Shape{m, n} == out[0] ? 0 : m * n * static_cast<int64_t>(dtype_size(output_dtype(0)));
    return (product + 63) / 64 * 64 + gemm_scratch_bytes(output_dtype(0), m, n, k);
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor &c = in[0], &a = in[1], &b = in[2], &o = out[0];
    const double alpha = in[3].item<double>(), beta = in[4].item<double>();
    const int64_t m = a.shape()[0], k = a.shape()[1], n = b.shape()[1];
    if (o.shape()[0] == m && o.shape()[1] == n) {
      if (beta != 0.0) copy_broadcast(o, c);
      return gemm(o.dtype(), m, n, k, alpha, matrix_of(a), matrix_of(b), beta, o.raw_data(), n, scratch);
    }
    const size_t product_bytes = (static_cast<size_t>(m * n) * dtype_size(o.dtype()) + 63) / 64 * 64;
    std::byte* product = scratch.data();
    gemm(o.dtype(), m, n, k, alpha, matrix_of(a), matrix_of(b), 0.0, product, n, scratch.subspan(product_bytes));
    dispatch_float(o.dtype(), "gemm", [&](auto tag) {
      using T = decltype(tag);
      const T* pc = reinterpret_cast<const T*>(c.raw_data());
      const T* pp = reinterpret_cast<const T*>(product);
      T* po = reinterpret_cast<T*>(o.raw_data());
      const int64_t rows = o.shape()[0], cols = o.shape()[1];
      const int64_t c0 = c.shape()[0] == 1 ? 0 : c.strides()[0], c1 = c.shape()[1] == 1 ? 0 : c.strides()[1];
      const int64_t p0 = m == 1 ? 0 : n, p1 = n == 1 ? 0 : 1;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j)
          po[i * cols + j] = static_cast<T>(beta) * pc[i * c0 + j * c1] + pp[i * p0 + j * p1];
    });
  }
};

// One product per batch position, the batch axes broadcast.
class BatchedMatmulKernel final : public KernelOf<BatchedMatmul> {
 public:
  using KernelOf::KernelOf;
  int64_t scratch_bytes(const std::vector<Shape>& in, const std::vector<Shape>&) const override {
    const size_t nd = in[0].size();
    return gemm_scratch_bytes(output_dtype(0), in[0][nd - 2], in[1][nd - 1], in[0][nd - 1]);
  }
  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override {
    const Tensor &a = in[0], &b = in[1], &c = out[0];
    const int64_t nd = c.ndim();
    const int64_t m = c.shape()[nd - 2], n = c.shape()[nd - 1], k = a.shape()[nd - 1];
    const int64_t batches = c.numel() / std::max<int64_t>(m * n, 1);
    const size_t es = dtype_size(c.dtype());
    for (int64_t i = 0; i < batches; ++i) {
      int64_t rest = i, oa = 0, ob = 0, oc = 0;
      for (int64_t d = nd - 3; d >= 0; --d) {
        int64_t idx = rest % c.shape()[d];
        rest /= c.shape()[d];
        oa += (a.shape()[d] == 1 ? 0 : idx) * a.strides()[d];
        ob += (b.shape()[d] == 1 ? 0 : idx) * b.strides()[d];
        oc += idx * c.strides()[d];
      }
      const MatrixView a2{a.raw_data() + oa * static_cast<int64_t>(es), m, k, a.strides()[nd - 2], a.strides()[nd - 1]};
      const MatrixView b2{b.raw_data() + ob * static_cast<int64_t>(es), k, n, b.strides()[nd - 2], b.strides()[nd - 1]};
      gemm(c.dtype(), m, n, k, 1.0, a2, b2, 0.0, c.raw_data() + oc * static_cast<int64_t>(es), n, scratch);
    }
  }
};

}  // namespace

void add_blas_kernels(KernelTable& table) {
  table.add<Dot, DotKernel>();
  table.add<Gemm, GemmKernel>();
  table.add<BatchedMatmul, BatchedMatmulKernel>();
}

Var dot(const Var& a, const Var& b, Loc loc) {
  if (a.ndim() == 0 || b.ndim() == 0) return elemwise(ScalarOp::mul, {a, b}, loc);
  // Integer and boolean products run on the f64 kernels and stay f64 (NumPy keeps the integer
  // dtype; cast back when the sums are known to fit: an f64 result beyond 2^53 is visibly inexact,
  // a wrapped integer would not be).
  DType dtype = result_dtype({a, b});
  if (!is_float(dtype)) dtype = DType::f64;
  return apply1(std::make_shared<Dot>(), {cast(a, dtype, loc), cast(b, dtype, loc)}, loc);
}

Var matmul(const Var& a, const Var& b, Loc loc) {
  if (a.ndim() == 0 || b.ndim() == 0)
    throw TypeError("matmul: inputs must have at least one dimension, got " + a.type().str() + " and " + b.type().str() +
                    "; use * for scalars (at " + loc_str(loc) + ")");
  if (a.ndim() <= 2 && b.ndim() <= 2) return dot(a, b, loc);
  DType dtype = result_dtype({a, b});
  if (!is_float(dtype)) dtype = DType::f64;  // as dot
  Var a2 = a.ndim() == 1 ? dimshuffle(a, {-1, 0}, loc) : a;
  Var b2 = b.ndim() == 1 ? dimshuffle(b, {0, -1}, loc) : b;
  const int64_t nd = std::max(a2.ndim(), b2.ndim());
  Var c = apply1(std::make_shared<BatchedMatmul>(),
                 {pad_left(cast(a2, dtype, loc), nd, loc), pad_left(cast(b2, dtype, loc), nd, loc)}, loc);
  std::vector<int64_t> keep;
  for (int64_t d = 0; d < nd; ++d)
    if (!((a.ndim() == 1 && d == nd - 2) || (b.ndim() == 1 && d == nd - 1))) keep.push_back(d);
  return static_cast<int64_t>(keep.size()) == nd ? c : dimshuffle(c, keep, loc);
}

}  // namespace kiln
