#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "kiln/tensor.hpp"

namespace kiln {

// The libraries a matrix product can run on: kiln's own kernels, oneDNN's sgemm, OpenBLAS (when
// installed, ops/openblas.hpp).
enum class GemmLibrary : uint8_t { own, onednn, openblas };
const char* gemm_library_name(GemmLibrary kernel);

// What the choice depends on: the product, its layouts and the threads it may use.
struct GemmShape {
  DType dtype;
  bool ta, tb;
  int64_t m, n, k;
  int threads;
  bool operator==(const GemmShape&) const = default;
};

// No library wins every shape on every CPU (docs/performance.md), so the product of a shape is
// timed on each candidate the first time it is seen, and the fastest is remembered for the
// process. known_gemm is the lookup of every call; measure_gemm times the candidates with
// trial(kernel), which must run the product once without touching the caller's output, and
// remembers the winner (up to a bound on shapes; beyond it the first candidate is used untimed).
// KILN_GEMM=own|onednn|openblas pins a library wherever it is a candidate (same results run after
// run: the libraries round differently). KILN_DEBUG=1 prints each choice with its timings.
std::optional<GemmLibrary> known_gemm(const GemmShape& shape);
template <class Trial> GemmLibrary measure_gemm(const GemmShape& shape, std::span<const GemmLibrary> candidates, Trial trial);

// The pinned library, when KILN_GEMM names one.
std::optional<GemmLibrary> pinned_gemm();
// Remembers (or, with a timing, reports) a choice; used by measure_gemm.
GemmLibrary remember_gemm(const GemmShape& shape, std::span<const GemmLibrary> candidates, std::span<const double> seconds);
bool gemm_choices_full();
double gemm_seconds_now();

template <class Trial> GemmLibrary measure_gemm(const GemmShape& shape, std::span<const GemmLibrary> candidates, Trial trial) {
  if (const auto pinned = pinned_gemm())
    for (GemmLibrary c : candidates)
      if (c == *pinned) return c;
  if (candidates.size() == 1 || gemm_choices_full()) return candidates[0];
  // Each candidate once to warm it (code, packing buffers), then the best of three rounds, the
  // candidates taking turns so that a change of the machine's speed touches all alike. A small
  // product runs again until 5 us have passed: one run of a 4 x 16 x 16 product is shorter than
  // the clock's own noise.
  constexpr size_t kMost = 4;
  constexpr double kLeast = 5e-6;
  double best[kMost];
  for (size_t i = 0; i < candidates.size() && i < kMost; ++i) {
    trial(candidates[i]);
    best[i] = 1e300;
  }
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < candidates.size() && i < kMost; ++i) {
      const double start = gemm_seconds_now();
      double elapsed = 0;
      int runs = 0;
      do {
        trial(candidates[i]);
        elapsed = gemm_seconds_now() - start;
      } while (++runs < 1000 && elapsed < kLeast);
      best[i] = std::min(best[i], elapsed / runs);
    }
  return remember_gemm(shape, candidates.first(std::min(candidates.size(), kMost)),
                       std::span<const double>(best, std::min(candidates.size(), kMost)));
}

}  // namespace kiln
