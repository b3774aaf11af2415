#pragma once
#include <omp.h>

#include <atomic>
#include <exception>

namespace kiln {

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
