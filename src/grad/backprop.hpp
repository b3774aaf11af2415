#pragma once
#include <utility>
#include <vector>

#include "kiln/grad.hpp"
#include "kiln/graph.hpp"

namespace kiln {

// Reverse accumulation from seeded roots (each root with its output gradient); the gradient of
// each wrt, undefined where none reaches it. grad, Lop and the transpose Rop builds share it.
std::vector<Var> backprop(const std::vector<std::pair<Var, Var>>& seeds, const std::vector<Var>& wrt);

// Lop for eval points kiln builds itself with their outputs' shapes (an inner graph's gradient, a
// Jacobian's cotangent): no run-time check of their shapes.
std::vector<Var> lop_of_own_eval_points(const std::vector<Var>& f, const std::vector<Var>& wrt,
                                        const std::vector<Var>& eval_points, GradOptions options);

// Lets the ops that hold an inner graph (scan) differentiate it (graph/inner_gradient.hpp).
void provide_vjp_of_inner_graphs();

}  // namespace kiln
