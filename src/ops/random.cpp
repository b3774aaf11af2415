#include "ops/random.hpp"

#include <omp.h>

#include <cmath>
#include <limits>
#include <numbers>

#include "kiln/ops.hpp"
#include "ops/join.hpp"
#include "ops/shape.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/isa.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

namespace {

const char* distribution_name(Distribution d) {
  switch (d) {
    case Distribution::uniform: return "uniform";
    case Distribution::normal: return "normal";
    case Distribution::integers: return "integers";
    case Distribution::binomial: return "binomial";
    case Distribution::choice: return "choice";
  }
  return "?";
}

// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, SC 2011): ten rounds of a multiply-xor bijection of
// the 128-bit counter under a 64-bit key bumped by Weyl constants between rounds.
struct Words {
  uint32_t w[4];
};

inline Words philox(uint64_t key, uint64_t counter) {
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c0, p1 = uint64_t{0xCD9E8D57} * c2;
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c0 = hi1 ^ c1 ^ k0;
    c1 = lo1;
    c2 = hi0 ^ c3 ^ k1;
    c3 = lo0;
    k0 += 0x9E3779B9;
    k1 += 0xBB67AE85;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from 24 bits, in (0, 1] (for a logarithm), and in [0, 1) from 53 bits.
inline float unit24(uint32_t w) { return static_cast<float>(w >> 8) * 0x1.0p-24f; }
inline double open_unit24(uint32_t w) { return (static_cast<double>(w >> 8) + 1.0) * 0x1.0p-24; }
inline double unit53(uint32_t hi, uint32_t lo) { return static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) * 0x1.0p-53; }
inline double open_unit53(uint32_t hi, uint32_t lo) { return (static_cast<double>(((uint64_t{hi} << 32) | lo) >> 11) + 1.0) * 0x1.0p-53; }

// Values one generator block gives.
int64_t per_block(Distribution d, DType dtype) {
  switch (d) {
    case Distribution::uniform:
    case Distribution::normal: return dtype == DType::f32 ? 4 : 2;
    case Distribution::integers:
    case Distribution::choice: return 2;
    case Distribution::binomial: return 4;  // trials, not values
  }
  return 1;
}

}  // namespace

std::string RandomDraw::name() const { return std::string("random_") + distribution_name(distribution_) + "{" + dtype_name(dtype_) + "}"; }

std::vector<Type> RandomDraw::infer_types(const std::vector<Type>& in) const {
  if (in.size() != 4) throw TypeError(name() + ": takes the state, the shape and two parameters");
  if (in[0].ndim() != 1 || in[0].dtype != DType::i64) throw TypeError(name() + ": the state must be an i64 vector, got " + in[0].str());
  if (in[1].ndim() != 1 || in[1].dtype != DType::i64) throw TypeError(name() + ": the shape must be an i64 vector, got " + in[1].str());
  for (size_t i : {2, 3})
    if (in[i].ndim() != 0) throw TypeError(name() + ": the parameters must be 0-d, got " + in[i].str());
  return {Type{dtype_, std::vector<bool>(static_cast<size_t>(ndim_), false)}, in[0]};
}

std::vector<Shape> RandomDraw::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>& values) const {
  if (!values[1]) throw ShapeError(name() + ": the shape of the draw is known only from its value");
  Shape shape = values[1]->to_vector<int64_t>();
  if (static_cast<int64_t>(shape.size()) != ndim_)
    throw ShapeError(name() + ": the shape " + shape_str(shape) + " has " + std::to_string(shape.size()) + " dimensions, the draw " +
                     std::to_string(ndim_));
  for (int64_t d : shape)
    if (d < 0) throw ShapeError(name() + ": a draw's shape must not be negative, got " + shape_str(shape));
  return {shape, in[0]};
}

std::vector<Var> RandomDraw::L_op(const Node&, const std::vector<Var>&) const { return {Var(), Var(), Var(), Var()}; }

namespace {

template <class T> struct DrawLoops {
  Distribution distribution;
  uint64_t key, counter;
  int64_t numel, per;
  double a, b;  // the parameters (binomial: n, p)
  int64_t low, high;  // integers and choice: the bounds, exact (a double does not hold every i64)
  T* out;

  void blocks(int64_t b0, int64_t b1) const {
    for (int64_t blk = b0; blk < b1; ++blk) {
      const Words r = philox(key, counter + static_cast<uint64_t>(blk));
      const int64_t first = blk * per;
      auto put = [&](int64_t j, double v) {
        if (first + j < numel) out[first + j] = static_cast<T>(v);
      };
      switch (distribution) {
        case Distribution::uniform: {
          // a + (b - a) u with u < 1 may still round to b (in T, or already in double where |b| is
          // the larger): the largest T below b then, so that b stays out as documented.
          auto put_below_b = [&](int64_t j, double v) {
            if (first + j >= numel) return;
            const T high = static_cast<T>(b);
            const T t = static_cast<T>(v);
            out[first + j] = t < high || high <= static_cast<T>(a) ? t : std::nextafter(high, static_cast<T>(a));
          };
          if (per == 4)
            for (int j = 0; j < 4; ++j) put_below_b(j, a + (b - a) * static_cast<double>(unit24(r.w[j])));
          else
            for (int j = 0; j < 2; ++j) put_below_b(j, a + (b - a) * unit53(r.w[2 * j], r.w[2 * j + 1]));
          break;
        }
        case Distribution::normal:
          if (per == 4) {
            for (int j = 0; j < 2; ++j) {
              const double radius = std::sqrt(-2.0 * std::log(open_unit24(r.w[2 * j]))), angle = 2 * std::numbers::pi * unit24(r.w[2 * j + 1]);
              put(2 * j, a + b * radius * std::cos(angle));
              put(2 * j + 1, a + b * radius * std::sin(angle));
            }
          } else {
            const double radius = std::sqrt(-2.0 * std::log(open_unit53(r.w[0], r.w[1]))), angle = 2 * std::numbers::pi * unit53(r.w[2], r.w[3]);
            put(0, a + b * radius * std::cos(angle));
            put(1, a + b * radius * std::sin(angle));
          }
          break;
        case Distribution::integers:
        case Distribution::choice: {
          // In unsigned arithmetic, exact for every range up to [INT64_MIN, INT64_MAX).
          const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
          for (int j = 0; j < 2; ++j) {
            const uint64_t x = (uint64_t{r.w[2 * j]} << 32) | r.w[2 * j + 1];
            const uint64_t offset = static_cast<uint64_t>((static_cast<unsigned __int128>(x) * range) >> 64);
            if (first + j < numel) out[first + j] = static_cast<T>(static_cast<int64_t>(static_cast<uint64_t>(low) + offset));
          }
          break;
        }
        case Distribution::binomial: break;  // counted per value, below
      }
    }
  }

  // Binomial: trial t of value i is word i * n + t of the stream.
  void binomial_values(int64_t i0, int64_t i1) const {
    const int64_t n = static_cast<int64_t>(a);
    const double threshold = b * 4294967296.0;
    for (int64_t i = i0; i < i1; ++i) {
      int64_t successes = 0;
      for (int64_t t = 0; t < n; ++t) {
        const uint64_t word = static_cast<uint64_t>(i * n + t);
        const Words r = philox(key, counter + word / 4);
        successes += static_cast<double>(r.w[word % 4]) < threshold;
      }
      out[i] = static_cast<T>(successes);
    }
  }
};

class RandomDrawKernel final : public KernelOf<RandomDraw> {
 public:
  using KernelOf::KernelOf;
  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const Tensor& state = in[0];
    if (state.numel() != 2) throw ShapeError(op().name() + ": the state must hold 2 values {key, counter}, got " + shape_str(state.shape()));
    const int64_t* key_counter = state.data<int64_t>();
    const int64_t kc[2] = {key_counter[0], key_counter[state.strides()[0]]};
    const double a = in[2].item<double>(), b = in[3].item<double>();
    const Distribution d = op().distribution();
    const bool draws_integers = d == Distribution::integers || d == Distribution::choice;
    const int64_t low = draws_integers ? in[2].item<int64_t>() : 0, high = draws_integers ? in[3].item<int64_t>() : 0;
    const int64_t numel = out[0].numel();
    if (d == Distribution::choice && high == 0 && numel > 0)
      throw ShapeError("choice: a has no elements, so it has none to draw (" + std::to_string(numel) +
                       " draws asked); an empty vector allows only a draw of size 0, as in NumPy");
    if (d == Distribution::integers && low >= high && numel > 0)
      throw ShapeError(op().name() + ": low (" + std::to_string(low) + ") must be below high (" + std::to_string(high) + ")");
    if (d == Distribution::integers && op().dtype() == DType::i32 &&
        (low < std::numeric_limits<int32_t>::min() || high > int64_t{std::numeric_limits<int32_t>::max()} + 1))
      throw ShapeError(op().name() + ": the range [" + std::to_string(low) + ", " + std::to_string(high) +
                       ") does not fit in i32; draw i64 or narrow the range");
    if (d == Distribution::binomial && (a < 0 || !(b >= 0 && b <= 1)))
      throw ShapeError(op().name() + ": n must be at least 0 and p in [0, 1], got n = " + std::to_string(static_cast<int64_t>(a)) +
                       ", p = " + std::to_string(b));
    if (d == Distribution::normal && !(b >= 0))
      throw ShapeError(op().name() + ": std must be 0 or more, got " + std::to_string(b) + " (NumPy's scale)");
    Tensor& values = out[0];
    if (!values.is_contiguous()) throw ShapeError(op().name() + ": the draw's output must be contiguous");
    const int64_t per = per_block(d, op().dtype());
    const int64_t blocks = d == Distribution::binomial ? (numel * static_cast<int64_t>(a) + per - 1) / per : (numel + per - 1) / per;
    dispatch_dtype(values.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const DrawLoops<T> loops{d, static_cast<uint64_t>(kc[0]), static_cast<uint64_t>(kc[1]), numel, per, a, b, low, high, values.data<T>()};
      const int64_t items = d == Distribution::binomial ? numel : blocks;
      const int threads = items * (d == Distribution::binomial ? std::max<int64_t>(1, static_cast<int64_t>(a)) : 1) >= (1 << 14) && !omp_in_parallel()
                              ? static_cast<int>(std::min<int64_t>(num_threads(), items))
                              : 1;
      auto range = [&](int64_t i0, int64_t i1) {
        if (d == Distribution::binomial) for_this_cpu([loops, i0, i1] { loops.binomial_values(i0, i1); });
        else for_this_cpu([loops, i0, i1] { loops.blocks(i0, i1); });
      };
      if (threads <= 1) return range(0, items);
      parallel_region(threads, [&](int t, int nt) { range(items * t / nt, items * (t + 1) / nt); });
    });
    int64_t* next = out[1].data<int64_t>();
    next[0] = kc[0];
    next[out[1].strides()[0]] = kc[1] + blocks;
  }
};

}  // namespace

void add_random_kernels(KernelTable& table) { table.add<RandomDraw, RandomDrawKernel>(); }

// ---- RandomStreams

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Stream i of a seed: its key, counter 0.
Tensor stream_start(uint64_t seed, size_t i) {
  return Tensor::from(std::vector<int64_t>{static_cast<int64_t>(splitmix64(seed ^ splitmix64(i))), 0});
}

}  // namespace

DrawSize::DrawSize(Shape dims) : shape(constant(Tensor::from(dims))), ndim(static_cast<int64_t>(dims.size())) {}

DrawSize::DrawSize(std::initializer_list<int64_t> dims) : DrawSize(Shape(dims)) {}

DrawSize::DrawSize(const Var& dims, Loc loc) : shape(dims) {
  if (!dims.defined() || dims.ndim() != 1 || (dims.dtype() != DType::i64 && dims.dtype() != DType::i32))
    throw TypeError("random draw: the size must be a shape or a 1-D integer Var, got " + (dims.defined() ? dims.type().str() : "an empty Var") +
                    " (at " + loc_str(loc) + ")");
  shape = cast(dims, DType::i64, loc);
  const Variable* v = dims.get();
  if (v->constant) ndim = v->constant->numel();
  else if (v->owner && dynamic_cast<const ShapeOf*>(v->owner->op.get())) ndim = v->owner->inputs[0].ndim();
  else if (auto n = stacked_length(dims)) ndim = *n;
  else
    throw TypeError("random draw: cannot tell how many dimensions the size " + dims.type().str() +
                    " has; build it with shape_of(x) or stack({...}) (at " + loc_str(loc) + ")");
}

Var RandomStreams::draw(Distribution distribution, const DrawSize& size, const Var& a, const Var& b, DType dtype, const Loc& loc) {
  const Shared state = shared(stream_start(seed_, states_.size()), "random_state_" + std::to_string(states_.size()));
  states_.push_back(state);
  return apply(std::make_shared<RandomDraw>(distribution, dtype, size.ndim), {state, size.shape, a, b}, loc)[0];
}

Var RandomStreams::uniform(const DrawSize& size, const Var& low, const Var& high, DType dtype, Loc loc) {
  if (!is_float(dtype)) throw TypeError(std::string("uniform: draws f32 or f64, not ") + dtype_name(dtype) + " (at " + loc_str(loc) + ")");
  return draw(Distribution::uniform, size, cast(low, dtype, loc), cast(high, dtype, loc), dtype, loc);
}

Var RandomStreams::normal(const DrawSize& size, const Var& mean, const Var& std, DType dtype, Loc loc) {
  if (!is_float(dtype)) throw TypeError(std::string("normal: draws f32 or f64, not ") + dtype_name(dtype) + " (at " + loc_str(loc) + ")");
  return draw(Distribution::normal, size, cast(mean, dtype, loc), cast(std, dtype, loc), dtype, loc);
}

Var RandomStreams::integers(const DrawSize& size, const Var& low, const Var& high, DType dtype, Loc loc) {
  if (dtype != DType::i64 && dtype != DType::i32)
    throw TypeError(std::string("integers: draws i64 or i32, not ") + dtype_name(dtype) + " (at " + loc_str(loc) + ")");
  for (const Var& bound : {low, high})
    if (bound.ndim() != 0 || is_float(bound.dtype()))
      throw TypeError("integers: low and high must be 0-d integers, got " + bound.type().str() + " (at " + loc_str(loc) + ")");
  return draw(Distribution::integers, size, cast(low, DType::i64, loc), cast(high, DType::i64, loc), dtype, loc);
}

Var RandomStreams::binomial(const DrawSize& size, const Var& n, const Var& p, DType dtype, Loc loc) {
  if (n.ndim() != 0 || is_float(n.dtype())) throw TypeError("binomial: n must be a 0-d integer, got " + n.type().str() + " (at " + loc_str(loc) + ")");
  return draw(Distribution::binomial, size, cast(n, DType::i64, loc), cast(p, DType::f64, loc), dtype, loc);
}

Var RandomStreams::choice(const DrawSize& size, const Var& a, Loc loc) {
  if (a.ndim() != 1) throw TypeError("choice: a must be a vector, got " + a.type().str() + " (at " + loc_str(loc) + ")");
  return take(a, draw(Distribution::choice, size, constant(Tensor::scalar(int64_t{0})), shape_of(a, loc)[0], DType::i64, loc), 0, loc);
}

void RandomStreams::seed(uint64_t seed) {
  seed_ = seed;
  for (size_t i = 0; i < states_.size(); ++i) states_[i].set_value(stream_start(seed, i));
}

}  // namespace kiln
