#pragma once
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kiln/tensor.hpp"
#include "graph/executable.hpp"
#include "ops/scalar_ops.hpp"
#include "tensor/isa.hpp"

namespace kiln {

struct ScalarInstruction;

// A fused elementwise program compiled to machine code for one instruction set: every value
// stays in a vector register from the load of the inputs to the store of the result, where the
// block interpreter writes each intermediate to memory (on the CPUs measured, ten such passes cost
// three to four times a memcpy of the data). It computes exactly what the interpreter computes:
// the same operations in the same order, rounding for rounding, NaN for NaN.
class CompiledProgram {
 public:
  // The machine code of `program` over inputs of `input_dtypes`, where scalar_input[i] says that
  // input i is one value standing for all (a pointer to it is passed), writing the last
  // instruction's register and then each of extra_outputs; null when the program uses a dtype, an
  // op or an instruction set this compiler does not handle, or needs more registers than the set
  // has (the interpreter then runs it). Each distinct program is generated once per process and
  // shared (a deep network repeats its fused programs layer after layer).
  static std::shared_ptr<const CompiledProgram> compile(const std::vector<ScalarInstruction>& program,
                                                        std::span<const DType> input_dtypes,
                                                        std::span<const bool> scalar_input, Isa isa,
                                                        std::span<const int> extra_outputs = {});
  virtual ~CompiledProgram() = default;

  // outs[o][j] = output o of the program at element j, for j < n. inputs[i] points at element 0
  // of input i (or at its one value). Every output of a run of vectors is stored after all inputs
  // of those vectors were loaded, so an output may be an input's own buffer. With nontemporal,
  // every output must be aligned to 64 bytes: whole vectors are then written with streaming
  // stores (the caller fences).
  virtual void run(int64_t n, void* const* outs, const void* const* inputs, bool nontemporal) const = 0;
  virtual Isa isa() const = 0;
};

// Elementwise work of at least this many elements is split over threads.
inline constexpr int64_t kParallelElements = int64_t{1} << 15;
// Outputs whose share per thread is at least this many bytes (well past a core's caches) are
// written with streaming stores, like a large memcpy: ordinary stores read each line before
// writing it, 50% more traffic. Per thread, because what one thread must stream the caches of two
// still hold (Zen 4, a + b on 10^6 floats: 1 thread 161 -> 150 us streaming, 2 threads 67 -> 150).
inline constexpr int64_t kStreamingBytesPerThread = int64_t{3} << 20;
inline bool streams(int64_t out_bytes, int64_t elements) {
  const int threads = elements >= kParallelElements ? std::max(omp_get_max_threads(), 1) : 1;
  return out_bytes >= kStreamingBytesPerThread * threads;
}

// Runs code over every element of the outputs (all of one shape), each input read in place:
// contiguous in that shape, or, where single[i], one value. Threads take ranges aligned for the
// streaming stores of outputs larger than the caches.
void run_in_place(const CompiledProgram& code, InputValues inputs, std::span<const bool> single, OutputValues outs);

}  // namespace kiln
