#pragma once
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>

#include "kiln/tensor.hpp"
#include "tensor/isa.hpp"
#include "tensor/parallel.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

// The one iteration mechanism of every strided kernel: K operands walked together over a shape.
// Dimensions are collapsed first (size-1 dims dropped, adjacent dims merged where every operand's
// strides allow), so contiguous and broadcast-scalar cases become one flat run that the compiler
// vectorizes. Strides are in elements; a stride of 0 broadcasts. Nothing here allocates.
template <size_t K> struct StridedLoop {
  Dims shape;
  std::array<Dims, K> strides;
  std::array<int64_t, K> base{};
};

template <size_t K>
StridedLoop<K> collapse_loop(std::span<const int64_t> shape, const std::array<std::span<const int64_t>, K>& strides,
                             const std::array<int64_t, K>& base = {}) {
  StridedLoop<K> loop;
  loop.base = base;
  // No element: one empty run, however large the other dimensions (a walk over them took as long
  // as they are: (2^63 - 1, 0) never ended).
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    loop.shape.push_back(0);
    for (size_t k = 0; k < K; ++k) loop.strides[k].push_back(0);
    return loop;
  }
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    if (!loop.shape.empty()) {
      bool mergeable = true;
      for (size_t k = 0; k < K; ++k)
        if (loop.strides[k].back() != strides[k][d] * shape[d]) mergeable = false;
      if (mergeable) {
        loop.shape.back() *= shape[d];
        for (size_t k = 0; k < K; ++k) loop.strides[k].back() = strides[k][d];
        continue;
      }
    }
    loop.shape.push_back(shape[d]);
    for (size_t k = 0; k < K; ++k) loop.strides[k].push_back(strides[k][d]);
  }
  return loop;
}

// inner(n, offsets, steps): one innermost run of n elements starting at offsets, stepping steps.
// The runs are compiled for each instruction set and run in the copy for this CPU (tensor/isa.hpp):
// every strided kernel gets its vector code here.
template <size_t K, class Inner>
void run_loop_range(const StridedLoop<K>& loop, int64_t outer_begin, int64_t outer_end, int64_t inner_begin,
                    int64_t inner_end, Inner&& inner) {
  const int64_t nd = static_cast<int64_t>(loop.shape.size());
  std::array<int64_t, K> steps{};
  if (nd == 0) {  // one element: it belongs to the range that holds position 0 of both loops
    if (outer_begin < outer_end && inner_begin < inner_end) inner(int64_t{1}, loop.base, steps);
    return;
  }
  for (size_t k = 0; k < K; ++k) steps[k] = loop.strides[k][nd - 1];
  for_this_cpu([&] {
    for (int64_t o = outer_begin; o < outer_end; ++o) {
      std::array<int64_t, K> off = loop.base;
      int64_t rest = o;
      for (int64_t d = nd - 2; d >= 0; --d) {
        int64_t i = rest % loop.shape[d];
        rest /= loop.shape[d];
        for (size_t k = 0; k < K; ++k) off[k] += i * loop.strides[k][d];
      }
      for (size_t k = 0; k < K; ++k) off[k] += inner_begin * steps[k];
      inner(inner_end - inner_begin, off, steps);
    }
  });
}

// Runs the loop, on several threads when the work (elements x cost per element) pays for them.
// Operand 0 must be the only one written, and no two outer positions may write one element.
template <size_t K, class Inner>
void run_loop(const StridedLoop<K>& loop, Inner inner, int64_t parallel_threshold = 1 << 15) {
  const int64_t nd = static_cast<int64_t>(loop.shape.size());
  const int64_t n_inner = nd ? loop.shape[nd - 1] : 1;
  int64_t n_outer = 1;
  for (int64_t d = 0; d + 1 < nd; ++d) n_outer *= loop.shape[d];
  const int64_t total = n_outer * n_inner;
  const int threads = omp_get_max_threads();
  if (threads <= 1 || total < parallel_threshold || omp_in_parallel()) {
    run_loop_range(loop, 0, n_outer, 0, n_inner, inner);
    return;
  }
  if (n_outer >= threads) {
    parallel_region(threads, [&](int t, int nt) {
      run_loop_range(loop, n_outer * t / nt, n_outer * (t + 1) / nt, 0, n_inner, inner);
    });
  } else {
    parallel_region(threads, [&](int t, int nt) {
      run_loop_range(loop, 0, n_outer, n_inner * t / nt, n_inner * (t + 1) / nt, inner);
    });
  }
}

}  // namespace kiln
