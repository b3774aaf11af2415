#include "exec/backend.hpp"

#include "ops/blas.hpp"
#include "ops/composite.hpp"
#include "ops/conv.hpp"
#include "ops/cumulative.hpp"
#include "ops/elemwise.hpp"
#include "ops/ifelse.hpp"
#include "ops/join.hpp"
#include "ops/nnet.hpp"
#include "ops/pool.hpp"
#include "ops/random.hpp"
#include "ops/reduce.hpp"
#include "ops/scan.hpp"
#include "ops/shape.hpp"
#include "ops/sparse.hpp"
#include "ops/sort.hpp"
#include "ops/subtensor.hpp"

namespace kiln {

// Listed here, not registered by static constructors: the table is complete before the first
// function compiles, whatever order the library's files were initialized in.
CpuBackend::CpuBackend() {
  add_elemwise_kernels(kernels_);
  add_composite_kernels(kernels_);
  add_reduce_kernels(kernels_);
  add_blas_kernels(kernels_);
  add_shape_kernels(kernels_);
  add_subtensor_kernels(kernels_);
  add_join_kernels(kernels_);
  add_sparse_kernels(kernels_);
  add_nnet_kernels(kernels_);
  add_pool_kernels(kernels_);
  add_ifelse_kernels(kernels_);
  add_scan_kernels(kernels_);
  add_cumulative_kernels(kernels_);
  add_sort_kernels(kernels_);
  add_random_kernels(kernels_);
  add_conv_kernels(kernels_);
}

std::shared_ptr<Storage> CpuBackend::allocate(size_t bytes) const { return Storage::allocate(bytes); }

CpuBackend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace kiln
