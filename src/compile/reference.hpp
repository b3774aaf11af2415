#pragma once
#include <vector>

#include "graph/node.hpp"

namespace kiln {

// Mode::debug() judges a rewrite against the value of what it replaced computed in long double
// (11 more bits than f64), not against that value in its own dtype: a rewrite that makes an
// expression more exact (log(1 - sigmoid(x)) -> -softplus(x)) must not be called wrong for it.
// Only elementwise expressions are evaluated so; others are their own reference.

// The values an elementwise expression reads: the leaves and non-elementwise results where its
// elementwise part ends. Empty when root is not computed elementwise.
std::vector<Var> elementwise_boundary(const Var& root);

// root's value broadcast to `shape` (row-major), computed in long double from the values of its
// boundary (in the order elementwise_boundary gives).
std::vector<long double> long_double_value(const Var& root, const std::vector<Var>& boundary,
                                           const std::vector<Tensor>& boundary_values, const Shape& shape);

}  // namespace kiln
