// A chain of 10 elementwise ops over 10M floats, compiled fused (fast_run) and unfused (no
// rewrites), against one memcpy of the same bytes in the same run, on 1 and 2 threads. Median of 7
// runs each. The fused chain runs as machine code generated for it (ops/composite_jit).
#include <kiln/kiln.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>

using namespace kiln;

namespace {

double median_seconds(const std::function<void()>& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < 7; ++i) {
    auto start = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  const int64_t n = 10'000'000;
  Var x = vector("x");
  Var y = x;
  for (int i = 0; i < 5; ++i) y = (y * 0.999 + 0.001);  // 10 ops: alternating mul and add
  Function fused = function({x}, {y});
  Function unfused = function({x}, {y}, {.mode = Mode("unfused", {})});
  Tensor in = Tensor::full({n}, 1.0);
  std::vector<float> src(n, 1.f), dst(n);
  const double bytes = 2.0 * n * sizeof(float);  // read once, write once

  std::printf("10 elementwise ops over %lld floats, median of 7 (memcpy: std::memcpy on one thread)\n",
              static_cast<long long>(n));
  std::printf("%-8s %10s %10s %10s %12s %12s %14s %16s\n", "threads", "memcpy ms", "fused ms", "unfused ms",
              "fused GB/s", "memcpy GB/s", "fused/memcpy", "fused vs unfused");
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const double t_memcpy = median_seconds([&] { std::memcpy(dst.data(), src.data(), n * sizeof(float)); });
    const double t_fused = median_seconds([&] { fused(in); });
    const double t_unfused = median_seconds([&] { unfused(in); });
    std::printf("%-8d %10.2f %10.2f %10.2f %12.1f %12.1f %13.0f%% %15.1fx\n", threads, t_memcpy * 1e3, t_fused * 1e3,
                t_unfused * 1e3, bytes / t_fused / 1e9, bytes / t_memcpy / 1e9, 100.0 * t_memcpy / t_fused,
                t_unfused / t_fused);
  }
}
