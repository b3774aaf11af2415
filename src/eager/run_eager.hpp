#pragma once
#include <span>

#include "kiln/graph.hpp"

namespace kiln {

// One argument of an eager operation: a tensor, or a number (a weak scalar, as numbers are in
// symbolic expressions: 2.0 * x keeps x's dtype).
struct EagerArg {
  EagerArg(const Tensor& t) : tensor(&t) {}  // NOLINT
  EagerArg(double v) : number(v), number_dtype(DType::f64) {}  // NOLINT
  EagerArg(int64_t v) : number(static_cast<double>(v)), integer(v), number_dtype(DType::i64) {}  // NOLINT
  const Tensor* tensor = nullptr;
  double number = 0;
  int64_t integer = 0;
  DType number_dtype = DType::f64;
};

// Builds the symbolic expression an eager operation computes, from placeholders of its arguments'
// types and the operation's integer parameters (axes, flags).
using EagerBuild = Var (*)(std::span<const Var> inputs, std::span<const int64_t> params, const Loc& loc);

// Runs build's expression on args now: the graph is built, its nodes' executables made and its
// shapes found once per thread for each (build, params, argument dtypes and shapes), after which
// a call runs the nodes through run_node with nothing but the outputs' storage allocated. The
// result is a fresh tensor made at loc. With `into`, the last node writes into *into (an
// in-place operation), which must have the result's shape and dtype.
// may_view: the operation is a view (reshape, transpose, flatten), so its result may share an
// argument's storage; any other operation's result never does.
Tensor run_eager(EagerBuild build, std::span<const EagerArg> args, std::span<const int64_t> params, const Loc& loc,
                 const Tensor* into = nullptr, bool may_view = false);

}  // namespace kiln
