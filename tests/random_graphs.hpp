#pragma once
// Random expression graphs over the public ops, for the differential and aliasing fuzzers. Every
// value's shape is known when it is built, so each op gets operands it accepts; the ops are well
// conditioned (bounded functions, divisions by 1 + x^2) so that modes may differ only by rounding.
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace kiln::test {

struct Value {
  Var var;
  Shape shape;
};

// A random graph over the given leaves (each a value with its shape); `steps` ops are appended to
// the pool, each reading values already in it.
class RandomGraph {
 public:
  RandomGraph(uint32_t seed, std::vector<Value> leaves) : rng_(seed), pool_(std::move(leaves)) {}

  std::mt19937& rng() { return rng_; }
  const std::vector<Value>& pool() const { return pool_; }
  int64_t below(int64_t n) { return static_cast<int64_t>(rng_() % static_cast<uint64_t>(n)); }
  bool coin() { return rng_() % 2 == 0; }

  // A value of the pool, preferring recent ones (deeper graphs), optionally of a given rank.
  Value pick(int64_t ndim = -1) {
    std::vector<size_t> fits;
    for (size_t i = 0; i < pool_.size(); ++i)
      if (ndim < 0 || static_cast<int64_t>(pool_[i].shape.size()) == ndim) fits.push_back(i);
    if (fits.empty()) return pool_[0];
    const size_t k = fits.size();
    const size_t recent = std::min<size_t>(k, 3);
    const bool deep = below(4) != 0;  // mostly the latest values: long chains
    return pool_[fits[deep ? k - 1 - static_cast<size_t>(below(static_cast<int64_t>(recent))) : static_cast<size_t>(below(static_cast<int64_t>(k)))]];
  }

  // A value of exactly this shape: from the pool, or one reshaped / reduced / broadcast to it.
  Value of_shape(const Shape& shape) {
    std::vector<size_t> fits;
    for (size_t i = 0; i < pool_.size(); ++i)
      if (pool_[i].shape == shape) fits.push_back(i);
    if (!fits.empty() && !(coin() && coin())) return pool_[fits[static_cast<size_t>(below(static_cast<int64_t>(fits.size())))]];
    Value any = pick();
    Var flat = sum(any.var) * 0.1;  // 0-d
    return {flat + zeros_like(of_shape_seed(shape)), shape};
  }

  void add(Var v, Shape s) { pool_.push_back({std::move(v), std::move(s)}); }

  // Appends one random op.
  void step() {
    const Value x = pick();
    const Shape& s = x.shape;
    const int64_t nd = static_cast<int64_t>(s.size());
    switch (below(22)) {
      case 0: add(tanh(x.var), s); break;
      case 1: add(sigmoid(x.var) - 0.5, s); break;
      case 2: add(sin(x.var) * cos(x.var), s); break;
      case 3: add(softplus(x.var) - abs(x.var) * 0.5, s); break;
      case 4: add(relu(x.var) - exp(-abs(x.var)), s); break;
      case 5: add(log1p(abs(x.var)) + sqrt(x.var * x.var + 1.0), s); break;
      case 6: {  // binary with a value of the same shape
        Value y = of_shape(s);
        switch (below(6)) {
          case 0: add(x.var + y.var, s); break;
          case 1: add(x.var - y.var * 0.5, s); break;
          case 2: add(x.var * y.var, s); break;
          case 3: add(x.var / (y.var * y.var + 1.0), s); break;
          case 4: add(maximum(x.var, y.var) + minimum(x.var, y.var * 0.5), s); break;
          // Offsets keep comparisons away from ties that rounding could break either way.
          default: add(where(x.var > y.var + 0.125, x.var, y.var * 2.0), s); break;
        }
        break;
      }
      case 7:  // broadcast against a reduction over one axis, kept
        if (nd >= 1) {
          const int64_t axis = below(nd);
          switch (below(4)) {
            case 0: add(x.var - mean(x.var, {axis}, true), s); break;
            case 1: add(x.var * 0.5 + max(x.var, {axis}, true), s); break;
            case 2: add(x.var - min(x.var, {axis}, true) * 0.25, s); break;
            default: add(x.var / (sum(abs(x.var), {axis}, true) + 1.0), s); break;
          }
        }
        break;
      case 8:  // a reduction that drops an axis
        if (nd >= 1) {
          const int64_t axis = below(nd);
          Shape r = s;
          r.erase(r.begin() + axis);
          add(coin() ? sum(x.var, {axis}) * 0.2 : mean(x.var, {axis}), r);
        }
        break;
      case 9:  // matrix products that come back to the same shape
        if (nd == 2) {
          Value y = of_shape(s);
          add(dot(dot(x.var, transpose(y.var)), x.var) * (0.5 / static_cast<double>(s[1] * s[0])), s);
        } else if (nd == 1) {
          Value y = of_shape(s);
          add(dot(x.var, y.var) * 0.1 + x.var, s);
        }
        break;
      case 10:  // views
        if (nd == 2) {
          switch (below(3)) {
            case 0: add(transpose(transpose(x.var) * 1.5), s); break;
            case 1: add(reshape(reshape(x.var, {s[0] * s[1]}) + 1.0, s), s); break;
            default: add(dimshuffle(dimshuffle(x.var, {1, -1, 0}), {2, 0}) * 0.75, s); break;
          }
        } else {
          add(flatten(x.var) * 0.5, {shape_numel(s)});
        }
        break;
      case 11:  // slices joined back together
        if (nd >= 1 && s[0] >= 2) {
          const int64_t cut = 1 + below(s[0] - 1);
          add(concatenate({slice(x.var, 0, cut, s[0]), slice(x.var, 0, 0, cut)}, 0), s);
        }
        break;
      case 12:  // rows taken by index (a permutation with a repeat)
        if (nd >= 1) {
          std::vector<int64_t> rows;
          for (int64_t r = 0; r < s[0]; ++r) rows.push_back((r * 3 + 1) % s[0]);
          if (s[0] > 1) rows[0] = rows[1];
          add(take(x.var, constant(Tensor::from(rows))), s);
        }
        break;
      case 13:  // set / inc a slice
        if (nd >= 1 && s[0] >= 2) {
          Shape part = s;
          part[0] = 1;
          Var sub = slice(x.var, 0, 0, 1);
          add(coin() ? inc_subtensor(sub, tanh(sub)) : set_subtensor(sub, sub * -1.0 + 0.25), s);
        }
        break;
      case 14:
        if (nd == 2) add(coin() ? softmax(x.var) : log_softmax(x.var, 0) * 0.1, s);
        break;
      case 15:
        if (nd == 2) add(logsumexp(x.var, {1}, true) - x.var, s);
        break;
      case 16: {  // lazy branches, on a condition away from ties (a sum may be exactly 0)
        Value y = of_shape(s);
        Var cond = tanh(sum(pick().var)) * 0.25 + (coin() ? 0.5 : -0.5) > 0.0;
        add(ifelse(cond, tanh(x.var), y.var * 0.5), s);
        break;
      }
      case 17:  // f32 round trip: the rounding happens in every mode alike
        add(cast(cast(x.var, f32) * 2.0f, f64), s);
        break;
      case 18:
        if (nd == 2) {
          Var r = sum(x.var, {0}) * 0.1;  // a row broadcast over the matrix
          add(x.var + r, s);
        }
        break;
      case 19:
        if (nd == 2 && s[0] == s[1]) add(x.var + transpose(x.var), s);  // a buffer read twice, one a view
        else add(x.var + x.var * 0.5, s);
        break;
      case 20:  // a binary chain read later by others (fusion boundaries)
        add(exp(-x.var * x.var) + cos(x.var) * 0.25 - sigmoid(x.var), s);
        break;
      default:
        add(pow(abs(x.var) + 1.0, 0.5) - 1.0, s);
        break;
    }
  }

  std::string text(const std::vector<Var>& outputs) const {
    std::ostringstream os;
    debugprint(outputs, os);
    return os.str();
  }

 private:
  // A value whose only role is to give a shape to zeros_like (a constant of that shape).
  Var of_shape_seed(const Shape& shape) { return constant(Tensor::zeros(shape, f64)); }

  std::mt19937 rng_;
  std::vector<Value> pool_;
};

}  // namespace kiln::test
