#pragma once
#include <vector>

#include "graph/node.hpp"

namespace kiln {

// The vector-Jacobian product of an inner graph (a loop's body), for the L_op of the ops that hold
// one. The autodiff layer, above the ops, provides it: src/grad sets it before it differentiates
// anything, and only src/grad calls L_op, so the ops need not include it. Inputs of wrt the
// outputs do not reach get zeros.
using InnerVjp = std::vector<Var> (*)(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points);
void provide_inner_vjp(InnerVjp vjp);
std::vector<Var> inner_vjp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points);

// Its forward twin, the Jacobian-vector product of an inner graph (for R_op), provided by Rop:
// outputs the wrt do not reach get zeros.
using InnerJvp = InnerVjp;
void provide_inner_jvp(InnerJvp jvp);
std::vector<Var> inner_jvp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points);

}  // namespace kiln
