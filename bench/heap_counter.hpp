#pragma once
// The bytes this process holds on the heap, counted by heap_counter.cpp, which stands in for
// malloc and its relatives: every library's allocations pass through it (kiln's and LibTorch's
// alike), so both peers' peak memory is measured the same way.
#include <cstdint>

namespace bench {

int64_t heap_bytes_in_use();
int64_t heap_peak_bytes();
void reset_heap_peak();

// The most heap bytes held during steps 3 to 5 above the level before step 1: what a steady
// training loop holds beyond its weights and data (the set-up of the first steps, such as plans,
// gradients kept between steps and compiled kernels, included; its transient peak not).
template <class Step> int64_t steady_heap_peak(Step step) {
  const int64_t start = heap_bytes_in_use();
  for (int i = 0; i < 2; ++i) step(i);
  reset_heap_peak();
  for (int i = 2; i < 5; ++i) step(i);
  return heap_peak_bytes() - start;
}

}  // namespace bench
