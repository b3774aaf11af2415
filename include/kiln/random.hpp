#pragma once
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "kiln/graph.hpp"

namespace kiln {

enum class Distribution : int;  // src/ops/random.hpp

// The size of a draw: a shape ({60, 500}) or a 1-D i64 Var (shape_of(h): a dropout mask like h).
struct DrawSize {
  DrawSize(Shape shape);                           // NOLINT
  DrawSize(std::initializer_list<int64_t> shape);  // NOLINT
  DrawSize(const Var& shape, Loc loc = Loc::current());  // NOLINT
  Var shape;
  int64_t ndim = 0;
};

// Random numbers in graphs, with Theano's semantics: every variable drawn is a stream of its own
// whose state (key, counter) lives in a shared variable, and a function that computes it advances
// that state after each call by itself, so each call draws fresh numbers with no update written.
// The generator is counter-based (Philox4x32-10, as JAX and PyTorch use): the numbers depend on the
// seed, the order of the draws made from this RandomStreams and the shapes only, never on the
// number of threads. A draw allocates nothing beyond its output.
class RandomStreams {
 public:
  explicit RandomStreams(uint64_t seed = 0) : seed_(seed) {}
  // [low, high), f32 or f64.
  Var uniform(const DrawSize& size, const Var& low = 0.0, const Var& high = 1.0, DType dtype = DType::f32,
              Loc loc = Loc::current());
  Var normal(const DrawSize& size, const Var& mean = 0.0, const Var& std = 1.0, DType dtype = DType::f32,
             Loc loc = Loc::current());
  // Integers in [low, high), i64 or i32.
  Var integers(const DrawSize& size, const Var& low, const Var& high, DType dtype = DType::i64, Loc loc = Loc::current());
  // Successes of n trials of probability p (n = 1: a 0/1 mask, as dropout's); any numeric dtype.
  Var binomial(const DrawSize& size, const Var& n = int64_t{1}, const Var& p = 0.5, DType dtype = DType::i64,
               Loc loc = Loc::current());
  // Elements of the vector a, drawn uniformly with replacement.
  Var choice(const DrawSize& size, const Var& a, Loc loc = Loc::current());

  // The state variables of the streams made so far (to save, or to set).
  const std::vector<Shared>& states() const { return states_; }
  // Every stream made so far starts again from this seed, as if just made.
  void seed(uint64_t seed);

 private:
  Var draw(Distribution distribution, const DrawSize& size, const Var& a, const Var& b, DType dtype, const Loc& loc);
  uint64_t seed_;
  std::vector<Shared> states_;
};

}  // namespace kiln
