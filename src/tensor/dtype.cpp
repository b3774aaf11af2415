#include <omp.h>

#include <atomic>
#include <sstream>

#include "kiln/tensor.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::b8: return "b8";
  }
  return "?";
}

bool is_float(DType d) { return d == DType::f32 || d == DType::f64; }
bool is_integer(DType d) { return d == DType::i32 || d == DType::i64; }

std::string shape_str(const Shape& shape) {
  std::ostringstream s;
  s << '(';
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? "," : "") << shape[i];
  if (shape.size() == 1) s << ',';
  s << ')';
  return s.str();
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw ShapeError("shape " + shape_str(shape) + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n))
      throw ShapeError("shape " + shape_str(shape) + " has more elements than a 64-bit count can hold");
  }
  return n;
}

int64_t shape_nbytes(const Shape& shape, DType dtype) {
  int64_t bytes = 0;
  if (__builtin_mul_overflow(shape_numel(shape), static_cast<int64_t>(dtype_size(dtype)), &bytes))
    throw ShapeError("shape " + shape_str(shape) + " of " + dtype_name(dtype) + " needs more bytes than a 64-bit count can hold");
  return bytes;
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    // Unsigned: a shape too large to allocate may overflow the product past the outermost axis,
    // whose stride is never used.
    s = static_cast<int64_t>(static_cast<uint64_t>(s) * static_cast<uint64_t>(shape[i]));
  }
  return strides;
}

namespace {

// set_num_threads' choice for every thread (0: none made, OpenMP's default). OpenMP keeps a count
// per thread: each thread that runs kiln's kernels takes this one (follow_num_threads).
std::atomic<int> chosen_threads{0};
// More threads than any machine kiln runs on has cores: each OpenMP thread takes a stack, and a
// million of them exhaust the address space.
constexpr int kMaxThreads = 4096;

}  // namespace

void set_num_threads(int n) {
  if (n < 1 || n > kMaxThreads)
    throw Error("set_num_threads: the number of threads must be from 1 to " + std::to_string(kMaxThreads) + ", got " +
                std::to_string(n) + " (this machine has " + std::to_string(omp_get_num_procs()) + " processors)");
  chosen_threads.store(n, std::memory_order_relaxed);
  omp_set_num_threads(n);
}

int num_threads() {
  const int chosen = chosen_threads.load(std::memory_order_relaxed);
  return chosen ? chosen : omp_get_max_threads();
}

void follow_num_threads() {
  const int chosen = chosen_threads.load(std::memory_order_relaxed);
  if (chosen && !omp_in_parallel() && omp_get_max_threads() != chosen) omp_set_num_threads(chosen);
}

}  // namespace kiln
