// The fused elementwise programs compiled to machine code (ops/composite_jit) compute exactly what
// the block interpreter computes: each case runs a fused function compiled for AVX2 and AVX-512
// (where the CPU has them) against the same function compiled for baseline x86-64, where only the
// interpreter runs (both run under the same set), bit for bit (any NaN for a NaN), over special values, every input layout and
// lengths that leave a tail.
#include <array>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>

#include "ops/composite.hpp"
#include "ops/composite_jit.hpp"
#include "tensor/isa.hpp"
#include "tensor/small_vector.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

// The instruction sets above baseline that this CPU runs.
std::vector<Isa> compiled_isas() {
  limit_isa(Isa::avx512);
  std::vector<Isa> isas;
  if (active_isa() >= Isa::avx2) isas.push_back(Isa::avx2);
  if (active_isa() >= Isa::avx512) isas.push_back(Isa::avx512);
  return isas;
}

// Values where the functions change branch or overflow, then random ones.
std::vector<double> probe_values(int64_t n, DType dtype, uint64_t seed) {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v = {0.0, -0.0, 1.0, -1.0, 0.5, 0.625, 0.6249, -0.625, 20.0, 20.5, -20.5, 88.72283905,
                           88.8, 89.0, -87.33654475, -87.4, -104.0, 1e-30, -1e-30, 1e-40, 1e30, -1e30, inf, -inf,
                           nan, -nan, 3.7, -2.1, 1e-8, 7.0, 100.0, -100.0};
  if (dtype == DType::f64) v.insert(v.end(), {1e300, -1e300, 710.0, -745.0, 5e-324});
  const Tensor r = random_tensor({n}, DType::f64, -30, 30, seed);
  const std::vector<double> random = r.to_vector<double>();
  v.resize(static_cast<size_t>(n), 0.0);
  for (size_t i = 32; i < v.size(); ++i) v[i] = random[i];
  // Spread the special values over the positions the compiled loop and the tail both reach.
  for (size_t i = 0; i + 1 < v.size() && i < 40; i += 2) std::swap(v[i], v[v.size() - 1 - i]);
  return v;
}

Tensor probe_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  return Tensor::from(probe_values(shape_numel(shape), dtype, seed), shape).to(dtype);
}

// Equal bit for bit, or both NaN.
void expect_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  const Tensor g = got.clone(), w = want.clone();
  const int64_t n = g.numel();
  int reported = 0;
  for (int64_t i = 0; i < n && reported < 5; ++i) {
    double a, b;
    bool same;
    if (g.dtype() == DType::f32) {
      const float x = g.data<float>()[i], y = w.data<float>()[i];
      same = std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y) || (x != x && y != y);
      a = x, b = y;
    } else {
      const double x = g.data<double>()[i], y = w.data<double>()[i];
      same = std::bit_cast<uint64_t>(x) == std::bit_cast<uint64_t>(y) || (x != x && y != y);
      a = x, b = y;
    }
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " is " << a << " compiled, " << b << " interpreted";
      ++reported;
    }
  }
}

// Compiles output under each instruction set (its fused node then holds machine code) and under
// baseline (only the interpreter), and compares them run under the same set (a reduction's
// summation order depends on the vector width), on 1 and 2 threads.
void check_against_interpreter(const std::string& what, const std::vector<Var>& inputs, const std::vector<Var>& outputs,
                               const std::vector<Tensor>& values) {
  limit_isa(Isa::baseline);
  const std::vector<In> ins(inputs.begin(), inputs.end());
  const std::vector<Out> outs(outputs.begin(), outputs.end());
  Function interpreted = function(ins, outs, {.allow_unused_inputs = true});
  for (Isa isa : compiled_isas()) {
    limit_isa(isa);
    Function compiled = function(ins, outs, {.allow_unused_inputs = true});
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const std::vector<Tensor> got = compiled(values), want = interpreted(values);
      for (size_t o = 0; o < outputs.size(); ++o)
        expect_same_bits(got[o], want[o], what + " output " + std::to_string(o) + " on " + isa_name(isa) + ", " +
                                              std::to_string(threads) + " threads");
    }
  }
  set_num_threads(2);
  limit_isa(Isa::avx512);
}
void check_against_interpreter(const std::string& what, const std::vector<Var>& inputs, const Var& output,
                               const std::vector<Tensor>& values) {
  check_against_interpreter(what, inputs, std::vector<Var>{output}, values);
}

// Whether a one-instruction program of op over n_args inputs of dtype compiles for isa.
bool compiles(ScalarOp op, int n_args, DType dtype, Isa isa) {
  std::vector<int> args(static_cast<size_t>(n_args));
  std::iota(args.begin(), args.end(), 0);
  const std::vector<ScalarInstruction> program{{op, dtype, args}};
  const std::vector<DType> dtypes(static_cast<size_t>(n_args), dtype);
  const SmallVector<bool, 8> scalar(static_cast<size_t>(n_args), false);
  return CompiledProgram::compile(program, dtypes, scalar, isa) != nullptr;
}

struct Case {
  std::string name;
  int arity;
  std::function<Var(const std::vector<Var>&)> build;
  bool f32_only = false;  // f64 transcendental functions are libm's: the interpreter runs them
};

std::vector<Case> cases() {
  return {
      {"neg", 1, [](auto v) { return -v[0] * 1.5; }},
      {"sqr", 1, [](auto v) { return v[0] * v[0] + 1.0; }},
      {"relu", 1, [](auto v) { return relu(v[0]) * 2.0; }},
      {"abs", 1, [](auto v) { return abs(v[0]) - 1.0; }},
      {"sign", 1, [](auto v) { return sign(v[0]) * 3.0; }},
      {"sqrt", 1, [](auto v) { return sqrt(v[0] * v[0] + 0.25); }},
      {"floor ceil round", 1, [](auto v) { return floor(v[0] * 1.5) + ceil(v[0] - 0.5) * round(v[0] * 0.5); }},
      {"round half way", 1, [](auto v) { return round(floor(v[0] * 4.0) * 0.5); }},
      {"clip", 1, [](auto v) { return clip(v[0] * 2.0, -3.5, 50.0); }},
      {"exp", 1, [](auto v) { return exp(v[0]) + 0.5; }, true},
      {"tanh", 1, [](auto v) { return tanh(v[0]) * 0.5; }, true},
      {"sigmoid", 1, [](auto v) { return sigmoid(v[0]) * 2.0; }, true},
      {"add sub mul div", 2, [](auto v) { return (v[0] + v[1]) * (v[0] - v[1]) / (v[1] + 3.0); }},
      {"maximum minimum", 2, [](auto v) { return maximum(v[0], v[1]) - minimum(v[1], v[0] * 0.5); }},
      {"variadic add and mul", 3, [](auto v) { return v[0] * v[1] * v[2] + (v[0] + v[1] + v[2]); }},
      {"tanh layer", 2, [](auto v) { return tanh(v[0] * 0.7 + v[1]) * (1.0 - v[1] * v[1]); }, true},
      {"chain of ten", 1, [](auto v) {
         Var y = v[0];
         for (int i = 0; i < 5; ++i) y = y * 0.999 + 0.001;
         return y;
       }},
  };
}

}  // namespace

TEST(CompositeJit, WhatIsCompiledAndWhatTheInterpreterRuns) {
  for (Isa isa : compiled_isas())
    for (DType dtype : {DType::f32, DType::f64}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " on " + isa_name(isa));
      for (ScalarOp op : {ScalarOp::neg, ScalarOp::sqr, ScalarOp::relu, ScalarOp::abs, ScalarOp::sign, ScalarOp::sqrt,
                          ScalarOp::floor, ScalarOp::ceil, ScalarOp::round})
        EXPECT_TRUE(compiles(op, 1, dtype, isa)) << scalar_op_name(op);
      for (ScalarOp op : {ScalarOp::add, ScalarOp::sub, ScalarOp::mul, ScalarOp::div, ScalarOp::maximum,
                          ScalarOp::minimum, ScalarOp::fill})
        EXPECT_TRUE(compiles(op, 2, dtype, isa)) << scalar_op_name(op);
      EXPECT_TRUE(compiles(ScalarOp::add, 3, dtype, isa));
      EXPECT_TRUE(compiles(ScalarOp::mul, 4, dtype, isa));
      // kiln's own f32 exp, tanh and sigmoid are compiled; f64 ones are libm's.
      for (ScalarOp op : {ScalarOp::exp, ScalarOp::tanh, ScalarOp::sigmoid})
        EXPECT_EQ(compiles(op, 1, dtype, isa), dtype == DType::f32) << scalar_op_name(op);
      for (ScalarOp op : {ScalarOp::log, ScalarOp::log1p, ScalarOp::softplus, ScalarOp::sin, ScalarOp::erf})
        EXPECT_FALSE(compiles(op, 1, dtype, isa)) << scalar_op_name(op);
      EXPECT_FALSE(compiles(ScalarOp::pow, 2, dtype, isa));
      EXPECT_FALSE(compiles(ScalarOp::mod, 2, dtype, isa));
    }
  // Integer programs and programs over more inputs than the loop keeps in registers are the
  // interpreter's.
  EXPECT_FALSE(compiles(ScalarOp::add, 2, DType::i64, Isa::avx2));
  EXPECT_FALSE(compiles(ScalarOp::add, 13, DType::f32, Isa::avx2));
  EXPECT_FALSE(compiles(ScalarOp::add, 2, DType::f32, Isa::baseline));
}

TEST(CompositeJit, CompiledProgramsMatchTheInterpreterBitForBit) {
  for (DType dtype : {DType::f32, DType::f64})
    for (const Case& c : cases())
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{37}, int64_t{1000}, int64_t{70001}}) {
        std::vector<Var> inputs;
        std::vector<Tensor> values;
        for (int i = 0; i < c.arity; ++i) {
          inputs.push_back(vector("x" + std::to_string(i), dtype));
          values.push_back(probe_tensor({n}, dtype, static_cast<uint64_t>(n * 10 + i)));
        }
        check_against_interpreter(c.name + " " + dtype_name(dtype) + " n=" + std::to_string(n), inputs, c.build(inputs), values);
      }
}

TEST(CompositeJit, BroadcastTransposedAndSingleValueInputsMatchTheInterpreter) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dtype);
    Var x = matrix("x", dtype), y = matrix("y", dtype), b = vector("b", dtype);
    const Tensor xv = probe_tensor({37, 29}, dtype, 1), yv = probe_tensor({29, 37}, dtype, 2);
    const Tensor bv = probe_tensor({29}, dtype, 3);
    // b is a row repeated down the rows (gathered into a block); 0.5 is one value by its type.
    check_against_interpreter("row broadcast " + d, {x, b}, tanh(x * 0.5 + b) * (x - b), {xv, bv});
    // transpose(y) is read through strides (gathered).
    check_against_interpreter("transposed " + d, {x, y}, maximum(x, transpose(y)) * 2.0 + x, {xv, yv});
    // A matrix that is one value at run time (not by its type) is splatted into a block.
    check_against_interpreter("single value " + d, {x, y}, abs(x - y) + x * y,
                              {xv, Tensor::full({1, 1}, -0.75, dtype)});
  }
}

TEST(CompositeJit, FusedReductionsMatchTheInterpreter) {
  for (DType dtype : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dtype);
    Var x = matrix("x", dtype), y = matrix("y", dtype);
    const Tensor xv = random_tensor({301, 47}, dtype, -3, 3, 4), yv = random_tensor({301, 47}, dtype, -3, 3, 5);
    check_against_interpreter("sum of all " + d, {x, y}, sum(abs(x) * y + 1.0), {xv, yv});
    check_against_interpreter("sum over rows " + d, {x, y}, sum(x * y - y, {0}), {xv, yv});
    check_against_interpreter("mean over columns " + d, {x, y}, mean(maximum(x, y) * 0.5, {1}), {xv, yv});
  }
}

TEST(CompositeJit, OutputsLargerThanTheCachesAreStreamedAndMatchTheInterpreter) {
  // 12 MB of f32: the compiled loop writes with streaming stores, on each thread's aligned range.
  Var x = vector("x"), y = vector("y");
  const int64_t n = 3'000'001;
  check_against_interpreter("streamed", {x, y}, tanh(x * 0.25 + y) * 3.0, {probe_tensor({n}, DType::f32, 6),
                                                                          probe_tensor({n}, DType::f32, 7)});
}

TEST(CompositeJit, ProgramsWithSeveralOutputsMatchTheInterpreterBitForBit) {
  // An Adam-like step: the new moments are written beside the new parameter, in one loop.
  for (Isa isa : compiled_isas()) {
    const std::vector<ScalarInstruction> program{{ScalarOp::mul, DType::f32, {0, 1}}, {ScalarOp::add, DType::f32, {2, 0}}};
    const std::vector<DType> dtypes{DType::f32, DType::f32};
    const std::array<bool, 2> scalar{false, false};
    EXPECT_NE(CompiledProgram::compile(program, dtypes, scalar, isa, std::vector<int>{2}), nullptr) << isa_name(isa);
  }
  for (DType dtype : {DType::f32, DType::f64}) {
    const std::string d = dtype_name(dtype);
    Var p = vector("p", dtype), m = vector("m", dtype), v = vector("v", dtype), g = vector("g", dtype);
    Var new_m = m * 0.9 + g * 0.1;
    Var new_v = abs(v) * 0.99 + sqr(g) * 0.01;
    Var new_p = p - new_m * 0.001 / (sqrt(new_v) + 1e-8);
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{37}, int64_t{1000}, int64_t{70001}}) {
      std::vector<Tensor> values;
      for (uint64_t i = 0; i < 4; ++i) values.push_back(probe_tensor({n}, dtype, static_cast<uint64_t>(n) * 10 + i));
      check_against_interpreter("adam-like " + d + " n=" + std::to_string(n), {p, m, v, g}, {new_m, new_v, new_p}, values);
    }
    // A row gathered into blocks: the compiled program runs block by block, writing every output.
    Var x = matrix("x", dtype), b = vector("b", dtype);
    Var scaled = x * 0.5 + b;
    check_against_interpreter("row broadcast " + d, {x, b}, {scaled, scaled * scaled - b},
                              {probe_tensor({37, 29}, dtype, 1), probe_tensor({29}, dtype, 3)});
  }
  // Larger than the caches: every output is streamed.
  Var x = vector("x"), y = vector("y");
  Var first = x * 0.25 + y;
  const int64_t n = 3'000'001;
  check_against_interpreter("streamed", {x, y}, {first, first * 3.0 - x},
                            {probe_tensor({n}, DType::f32, 6), probe_tensor({n}, DType::f32, 7)});
}
