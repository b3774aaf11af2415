#include <cmath>
#include <random>
#include <sstream>

#include "tensor/tensor_book.hpp"
#include "kiln/function.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"

namespace kiln {

// Both live with the compiler because they run compiled functions; the derivatives they check
// are built by src/grad.
namespace {

// What both checks share: the tolerances of the inputs' dtype, a symbolic input per point, fn's
// output compiled, and a copy of the point.
struct Check {
  double eps, abs_tol, rel_tol;
  std::vector<Var> vars;
  std::vector<In> ins;
  Var out;
  std::vector<Tensor> point;

  Check(const char* who, const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at, const VerifyOptions& options) {
    if (at.empty()) throw GradError(std::string(who) + ": needs at least one input point");
    bool single = false;
    for (const Tensor& t : at)
      if (!is_float(t.dtype())) throw GradError(std::string(who) + ": inputs must be float tensors, got " + t.str());
      else single = single || t.dtype() == DType::f32;
    eps = options.eps > 0 ? options.eps : single ? 3e-4 : 1e-7;
    abs_tol = options.abs_tol > 0 ? options.abs_tol : single ? 1e-2 : 1e-4;
    rel_tol = options.rel_tol > 0 ? options.rel_tol : single ? 1e-2 : 1e-4;
    for (size_t i = 0; i < at.size(); ++i) {
      vars.push_back(tensor(at[i].dtype(), std::vector<bool>(at[i].ndim(), false), std::string(who) + "_input" + std::to_string(i)));
      ins.push_back(vars.back());
    }
    out = fn(vars);
    if (!out.defined() || !is_float(out.dtype())) throw GradError(std::string(who) + ": fn must return a float Var");
    for (const Tensor& t : at) point.push_back(t.clone());
  }
  // Whether a symbolic and a numeric derivative agree within the tolerances.
  bool agree(double symbolic, double numeric, double& abs_err, double& rel_err) const {
    abs_err = std::fabs(numeric - symbolic);
    rel_err = abs_err / std::max(std::fabs(numeric) + std::fabs(symbolic), 1e-8);
    return std::min(abs_err, rel_err) <= std::max(abs_tol, rel_tol) && std::isnan(symbolic) == std::isnan(numeric);
  }
};

Tensor random_like(const Tensor& like, std::mt19937_64& rng, double low, double high) {
  std::uniform_real_distribution<double> uni(low, high);
  std::vector<double> v(static_cast<size_t>(like.numel()));
  for (double& x : v) x = uni(rng);
  Tensor t = Tensor::empty(like.shape(), like.dtype());
  t.copy_from(Tensor::from(v, like.shape()));
  return t;
}

}  // namespace

void verify_grad(const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at, VerifyOptions options) {
  const InternalTensors internal;
  Check c("verify_grad", fn, at, options);
  const std::vector<Tensor>& point = c.point;
  Function f_out = function(c.ins, {c.out});
  Tensor value = f_out(point)[0];

  // A random projection turns the output into a scalar cost, as Theano's verify_grad does.
  std::mt19937_64 rng(options.seed);
  const Tensor projection = random_like(value, rng, 0.5, 1.5);
  const std::vector<double> proj = projection.to_vector<double>();
  Var cost = sum(c.out * constant(projection));
  std::vector<Var> gs = grad(cost, c.vars);
  std::vector<Out> gouts(gs.begin(), gs.end());
  Function f_grad = function(c.ins, gouts);
  const std::vector<Tensor> analytic = f_grad(point);

  // Central differences with a step relative to each element: exact to second order, symmetric
  // about a kink, and never below the dtype's resolution at large values.
  for (size_t i = 0; i < point.size(); ++i) {
    const Tensor& x = point[i];
    const int64_t n = x.numel();
    for (int64_t j = 0; j < n; ++j) {
      const double orig = x.item_as_double(j);
      const double step = c.eps * std::max(1.0, std::fabs(orig));
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
      double abs_err = 0, rel_err = 0;
      if (!c.agree(symbolic, numeric, abs_err, rel_err)) {
        std::ostringstream s;
        s << "verify_grad: the gradient of input " << i << " " << x.str() << " at element " << j
          << " differs from finite differences: symbolic " << symbolic << ", numeric " << numeric << " (abs error "
          << abs_err << ", rel error " << rel_err << ", tolerance " << std::max(c.abs_tol, c.rel_tol) << ", step " << step << ")";
        throw GradError(s.str());
      }
    }
  }
}

void verify_rop(const std::function<Var(std::vector<Var>)>& fn, const std::vector<Tensor>& at, VerifyOptions options) {
  const InternalTensors internal;
  Check c("verify_rop", fn, at, options);
  std::mt19937_64 rng(options.seed);
  std::vector<Tensor> directions;
  std::vector<Var> eval_points;
  for (const Tensor& x : c.point) {
    directions.push_back(random_like(x, rng, -1, 1));
    eval_points.push_back(constant(directions.back()));
  }
  const Var tangent = Rop({c.out}, c.vars, eval_points)[0];
  Function f = function(c.ins, {c.out, tangent});
  const std::vector<double> symbolic = f(c.point)[1].to_vector<double>();
  // Central differences along the direction, the step relative to the largest input element.
  double scale = 1;
  for (const Tensor& x : c.point)
    for (double v : x.to_vector<double>()) scale = std::max(scale, std::fabs(v));
  const double step = c.eps * scale;
  auto output_at = [&](double t) {
    std::vector<Tensor> moved;
    for (size_t i = 0; i < c.point.size(); ++i) {
      std::vector<double> v = c.point[i].to_vector<double>(), d = directions[i].to_vector<double>();
      for (size_t k = 0; k < v.size(); ++k) v[k] += t * d[k];
      Tensor m = Tensor::empty(c.point[i].shape(), c.point[i].dtype());
      m.copy_from(Tensor::from(v, c.point[i].shape()));
      moved.push_back(m);
    }
    return f(moved)[0].to_vector<double>();
  };
  const std::vector<double> up = output_at(step), down = output_at(-step);
  for (size_t k = 0; k < symbolic.size(); ++k) {
    const double numeric = (up[k] - down[k]) / (2 * step);
    double abs_err = 0, rel_err = 0;
    if (!c.agree(symbolic[k], numeric, abs_err, rel_err)) {
      std::ostringstream s;
      s << "verify_rop: the Jacobian-vector product at output element " << k << " of " << c.out.type().str()
        << " differs from finite differences: symbolic " << symbolic[k] << ", numeric " << numeric << " (abs error " << abs_err
        << ", rel error " << rel_err << ", tolerance " << std::max(c.abs_tol, c.rel_tol) << ", step " << step << ")";
      throw GradError(s.str());
    }
  }
}

}  // namespace kiln
