#include <thread>
// Parallel regions: an exception on any thread reaches the caller as itself, never std::terminate.
#include "tensor/nd_loop.hpp"
#include "tensor/parallel.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

// Issue 9, item 8: an error raised inside an OpenMP region escaped it and aborted the process.
TEST(Parallel, AnExceptionOnAWorkerThreadIsRethrownOnTheCaller) {
  expect_error<ShapeError>([] {
    parallel_region(2, [](int thread, int) {
      if (thread == 1 || omp_get_num_threads() == 1) throw ShapeError("raised on a worker");
    });
  }, {"raised on a worker"});
}

TEST(Parallel, AnExceptionInsideAParallelLoopKeepsItsType) {
  ThreadsForScope two_threads(2);
  Shape shape{4, 1 << 16};
  auto loop = collapse_loop<1>(shape, {contiguous_strides(shape)});
  expect_error<TypeError>([&] {
    run_loop(loop, [](int64_t, std::array<int64_t, 1> off, std::array<int64_t, 1>) {
      if (off[0] >= (int64_t{1} << 16)) throw TypeError("row two refused");
    }, 1);
  }, {"row two refused"});
}

TEST(Parallel, OneElementRunsOnceWhateverTheThreadCount) {
  ThreadsForScope two_threads(2);
  std::atomic<int> runs{0};
  auto loop = collapse_loop<1>(Shape{1, 1}, {Shape{1, 1}});
  run_loop(loop, [&](int64_t n, std::array<int64_t, 1>, std::array<int64_t, 1>) { runs += static_cast<int>(n); }, 1);
  EXPECT_EQ(runs.load(), 1);
}

// Found by the concurrency trial: set_num_threads(1) held only on the thread that called it (OpenMP
// keeps a count per thread); a worker's call ran its kernels on every core.
TEST(Parallel, SetNumThreadsHoldsOnEveryThread) {
  ThreadsForScope one(1);
  Var x = vector("x");
  Function f = function({x}, {exp(x) * 2.0 + 1.0});
  int seen = 0, during = 0;
  std::thread([&] {
    seen = num_threads();
    f(Tensor::ones({1 << 16}));
    during = omp_get_max_threads();
  }).join();
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(during, 1);
}
