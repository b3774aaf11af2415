#include <cmath>
#include <random>
#include <sstream>

#include "kiln/function.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"

namespace kiln {

// Lives with the compiler because it runs compiled functions; the gradients it checks are built
// by src/grad.
void verify_grad(const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at, VerifyOptions options) {
  if (at.empty()) throw GradError("verify_grad: needs at least one input point");
  DType dtype = at[0].dtype();
  for (const Tensor& t : at)
    if (!is_float(t.dtype())) throw GradError("verify_grad: inputs must be float tensors, got " + t.str());
    else if (t.dtype() == DType::f32) dtype = DType::f32;
  const bool single = dtype == DType::f32;
  const double eps = options.eps > 0 ? options.eps : single ? 3e-4 : 1e-7;
  const double abs_tol = options.abs_tol > 0 ? options.abs_tol : single ? 1e-2 : 1e-4;
  const double rel_tol = options.rel_tol > 0 ? options.rel_tol : single ? 1e-2 : 1e-4;

  std::vector<Var> vars;
  std::vector<In> ins;
  for (size_t i = 0; i < at.size(); ++i) {
    vars.push_back(tensor(at[i].dtype(), std::vector<bool>(at[i].ndim(), false), "verify_grad_input" + std::to_string(i)));
    ins.push_back(vars.back());
  }
  Var out = fn(vars);
  if (!out.defined() || !is_float(out.dtype())) throw GradError("verify_grad: fn must return a float Var");
  Function f_out = function(ins, {out});
  std::vector<Tensor> point;
  for (const Tensor& t : at) point.push_back(t.clone());
  Tensor value = f_out(point)[0];

  // A random projection turns the output into a scalar cost, as Theano's verify_grad does.
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> uni(0.5, 1.5);
  Tensor projection = Tensor::empty(value.shape(), out.dtype());
  std::vector<double> proj(projection.numel());
  for (double& v : proj) v = uni(rng);
  projection.copy_from(Tensor::from(proj, value.shape()));
  Var cost = sum(out * constant(projection));
  std::vector<Var> gs = grad(cost, vars);
  std::vector<Out> gouts(gs.begin(), gs.end());
  Function f_grad = function(ins, gouts);
  const std::vector<Tensor> analytic = f_grad(point);

  // Central differences with a step relative to each element: exact to second order, symmetric
  // about a kink, and never below the dtype's resolution at large values.
  for (size_t i = 0; i < point.size(); ++i) {
    const Tensor& x = point[i];
    const int64_t n = x.numel();
    for (int64_t j = 0; j < n; ++j) {
      const double orig = x.item_as_double(j);
      const double step = eps * std::max(1.0, std::fabs(orig));
      // fn's output with element j moved to `to`, and where it actually landed in the dtype.
      auto output_at = [&](double to) -> std::pair<std::vector<double>, double> {
        Tensor moved_x = x.clone();
        moved_x.reshape({n}).view({1}, {1}, j).copy_from(Tensor::full({1}, to, x.dtype()));
        std::vector<Tensor> moved = point;
        moved[i] = moved_x;
        return {f_out(moved)[0].to_vector<double>(), moved_x.item_as_double(j)};
      };
      const auto [up, x_up] = output_at(orig + step);
      const auto [down, x_down] = output_at(orig - step);
      // Each output's change is projected, in f64: projecting the outputs first would let a large
      // output hide the small change of another.
      double change = 0;
      for (size_t k = 0; k < up.size(); ++k) change += proj[k] * (up[k] - down[k]);
      const double numeric = change / (x_up - x_down);
      const double symbolic = analytic[i].item_as_double(j);
      const double abs_err = std::fabs(numeric - symbolic);
      const double rel_err = abs_err / std::max(std::fabs(numeric) + std::fabs(symbolic), 1e-8);
      if (std::min(abs_err, rel_err) > std::max(abs_tol, rel_tol) || std::isnan(symbolic) != std::isnan(numeric)) {
        std::ostringstream s;
        s << "verify_grad: the gradient of input " << i << " " << x.str() << " at element " << j
          << " differs from finite differences: symbolic " << symbolic << ", numeric " << numeric << " (abs error "
          << abs_err << ", rel error " << rel_err << ", tolerance " << std::max(abs_tol, rel_tol) << ", step " << step << ")";
        throw GradError(s.str());
      }
    }
  }
}

}  // namespace kiln
