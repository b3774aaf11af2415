#pragma once
#include <omp.h>

#include <atomic>
#include <exception>

namespace kiln {

// Gives the calling thread the count set_num_threads chose, when one was chosen: OpenMP keeps a
// count per thread, and a thread the user started (a worker, a server's pool) would run kiln's
// kernels on every core. Called where a call or an eager operation starts.
void follow_num_threads();

// Runs body(thread, n_threads) on up to `threads` OpenMP threads. An exception on any thread is
// caught there and rethrown on the calling thread once the region has ended (the first one
// wins): an exception that leaves an OpenMP region terminates the process.
template <class Body> void parallel_region(int threads, Body&& body) {
  std::exception_ptr error;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
  {
    try {
      body(omp_get_thread_num(), omp_get_num_threads());
    } catch (...) {
      if (!failed.exchange(true)) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace kiln
