#pragma once
// Milliseconds per call, shared by the benchmarks that time one call at a time (second_order.sh,
// lenet.sh).
#include <algorithm>
#include <chrono>
#include <vector>

namespace bench {

// Milliseconds per call of `call`: the median of 7 timings of enough calls for 0.2 s each (after
// one warm-up call).
template <class F>
double milliseconds_per_call(F call) {
  call();
  int calls = 1;
  for (;;) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > 0.2) break;
    calls *= 2;
  }
  std::vector<double> times;
  for (int r = 0; r < 7; ++r) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() * 1e3 / calls);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace bench
