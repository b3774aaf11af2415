#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "kiln/graph.hpp"

namespace kiln {

enum class DisconnectedInputs { raise, zero };
struct GradOptions {
  // A wrt that the cost does not depend on: GradError naming it, or a zero gradient.
  DisconnectedInputs disconnected_inputs = DisconnectedInputs::raise;
};

// Reverse mode. cost must be a 0-d float value. Integer values carry no gradient.
std::vector<Var> grad(const Var& cost, const std::vector<Var>& wrt, GradOptions options = {});
Var grad(const Var& cost, const Var& wrt, GradOptions options = {});
// Vector-Jacobian products: sum over i of eval_points[i]^T d f[i] / d wrt (eval_points[i] has
// f[i]'s rank and, when it runs, its shape).
std::vector<Var> Lop(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points,
                     GradOptions options = {}, Loc loc = Loc::current());

// Forward mode, Jacobian-vector products: sum over j of d f[i] / d wrt[j] . eval_points[j], for
// each f[i] (eval_points[j] has wrt[j]'s rank and, when it runs, its shape).
std::vector<Var> Rop(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points,
                     GradOptions options = {}, Loc loc = Loc::current());
// d y / d x, of shape y.shape + x.shape, built with a scan over y's elements (one gradient per
// step), so the graph does not grow with y's length. A 0-d y gives grad(y, x).
Var jacobian(const Var& y, const Var& x, GradOptions options = {}, Loc loc = Loc::current());
// The second derivative of a 0-d cost, of shape x.shape + x.shape: jacobian(grad(cost, x), x).
Var hessian(const Var& cost, const Var& x, GradOptions options = {}, Loc loc = Loc::current());

struct JacobianOptions {
  // false: the scan above, one row of the Jacobian per step, working memory of one gradient.
  // true: the vector-Jacobian product built once and vectorized over a batch of cotangents, the
  // identity matrix, so every row comes out of one batched pass (PyTensor's vectorize=True):
  // faster for short outputs, but every intermediate of the gradient is held y.size times at once.
  bool vectorize = false;
  GradOptions grad = {};
};
Var jacobian(const Var& y, const Var& x, JacobianOptions options, Loc loc = Loc::current());
Var hessian(const Var& cost, const Var& x, JacobianOptions options, Loc loc = Loc::current());

struct VerifyOptions {
  double eps = 0;       // relative step; 0: per dtype (f64 1e-7, f32 3e-4), as Theano
  double abs_tol = 0;   // 0: per dtype (f64 1e-4, f32 1e-2)
  double rel_tol = 0;   // 0: per dtype (f64 1e-4, f32 1e-2)
  uint64_t seed = 42;
};
// Checks the symbolic gradient of fn at the point `at` against central finite differences (step
// eps * max(1, |x|) per element) of a random projection of fn's output; raises GradError naming
// the input and element that differ.
void verify_grad(const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at,
                 VerifyOptions options = {});
// Checks Rop of fn at `at` in random directions against central finite differences along those
// directions; raises GradError naming the output element that differs.
void verify_rop(const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at,
                VerifyOptions options = {});

}  // namespace kiln
