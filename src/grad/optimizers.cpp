#include "kiln/optimizers.hpp"

#include "kiln/grad.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace {

std::vector<Var> gradients_of(const Gradients& gradients, const std::vector<Shared>& params, const char* rule) {
  if (params.empty()) throw TypeError(std::string(rule) + ": needs at least one parameter");
  for (const Shared& p : params)
    if (!p.defined() || !is_float(p.dtype()))
      throw TypeError(std::string(rule) + ": every parameter must be a float shared variable, got " +
                      (p.defined() ? "'" + p.name() + "' " + p.type().str() : std::string("an empty one")));
  if (gradients.cost.defined()) {
    try {
      return grad(gradients.cost, std::vector<Var>(params.begin(), params.end()));
    } catch (const GradError&) {
      // grad's advice (GradOptions) is not an optimizer's: name the parameter the cost ignores.
      for (const Shared& p : params) {
        try {
          grad(gradients.cost, Var(p));
        } catch (const GradError&) {
          throw GradError(std::string(rule) + ": the cost does not depend on parameter '" + p.name() + "' " + p.type().str() +
                          "; leave it out of the parameters (an optimizer updates what the cost depends on)");
        }
      }
      throw;
    }
  }
  if (gradients.grads.size() != params.size())
    throw TypeError(std::string(rule) + ": " + std::to_string(gradients.grads.size()) + " gradients for " +
                    std::to_string(params.size()) + " parameters; give one per parameter (or the cost)");
  for (size_t i = 0; i < params.size(); ++i) {
    const Var& g = gradients.grads[i];
    if (!g.defined() || g.ndim() != params[i].ndim())
      throw TypeError(std::string(rule) + ": the gradient of '" + params[i].name() + "' " + params[i].type().str() + " is " +
                      (g.defined() ? g.type().str() : std::string("empty")));
    // The update keeps the parameter's dtype; a gradient of another (f64 after scaling by an f64
    // value) would surface later as a type error on a state variable the user never made.
    if (g.dtype() != params[i].dtype())
      throw TypeError(std::string(rule) + ": the gradient of '" + params[i].name() + "' " + params[i].type().str() + " is " +
                      g.type().str() + "; cast it to the parameter's dtype (cast(g, " + dtype_name(params[i].dtype()) + "))");
  }
  return gradients.grads;
}

// The arithmetic of the rules, each node built at the caller's line.
class Rule {
 public:
  explicit Rule(const Loc& loc) : loc_(loc) {}
  Var add(const Var& a, const Var& b) const { return Operand(a, loc_) + Operand(b, loc_); }
  Var sub(const Var& a, const Var& b) const { return Operand(a, loc_) - Operand(b, loc_); }
  Var mul(const Var& a, const Var& b) const { return Operand(a, loc_) * Operand(b, loc_); }
  Var div(const Var& a, const Var& b) const { return Operand(a, loc_) / Operand(b, loc_); }
  Var square(const Var& a) const { return sqr(a, loc_); }
  Var root(const Var& a) const { return sqrt(a, loc_); }
  // A rate in the parameter's dtype: a float64 rate (a shared schedule) must not widen an f32 step.
  Var in_dtype_of(const Var& rate, const Shared& p) const { return rate.dtype() == p.dtype() ? rate : cast(rate, p.dtype(), loc_); }

 private:
  Loc loc_;
};

// A state variable for p: zeros of p's shape and dtype, named after it.
Shared state_like(const Shared& p, const char* what) {
  const Tensor value = p.get_value({.borrow = true});
  return shared(Tensor::zeros(value.shape(), p.dtype()), p.name() + "." + what);
}

}  // namespace

Updates sgd(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate, Loc loc) {
  const std::vector<Var> g = gradients_of(gradients, params, "sgd");
  const Rule r(loc);
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i)
    updates.push_back({params[i], r.sub(params[i], r.mul(r.in_dtype_of(learning_rate, params[i]), g[i]))});
  return updates;
}

Updates momentum(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate, const Var& momentum,
                 Loc loc) {
  const std::vector<Var> g = gradients_of(gradients, params, "momentum");
  const Rule r(loc);
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) {
    const Shared& p = params[i];
    const Shared v = state_like(p, "velocity");
    const Var new_v = r.sub(r.mul(r.in_dtype_of(momentum, p), v), r.mul(r.in_dtype_of(learning_rate, p), g[i]));
    updates.push_back({v, new_v});
    updates.push_back({p, r.add(p, new_v)});
  }
  return updates;
}

Updates nesterov(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate, const Var& momentum,
                 Loc loc) {
  const std::vector<Var> g = gradients_of(gradients, params, "nesterov");
  const Rule r(loc);
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) {
    const Shared& p = params[i];
    const Shared v = state_like(p, "velocity");
    const Var mu = r.in_dtype_of(momentum, p), step = r.mul(r.in_dtype_of(learning_rate, p), g[i]);
    const Var new_v = r.sub(r.mul(mu, v), step);
    updates.push_back({v, new_v});
    updates.push_back({p, r.sub(r.add(p, r.mul(mu, new_v)), step)});
  }
  return updates;
}

Updates adagrad(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate, const Var& epsilon,
                Loc loc) {
  const std::vector<Var> g = gradients_of(gradients, params, "adagrad");
  const Rule r(loc);
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) {
    const Shared& p = params[i];
    const Shared total = state_like(p, "sum_of_squares");
    const Var new_total = r.add(total, r.square(g[i]));
    updates.push_back({total, new_total});
    const Var scale = r.root(r.add(new_total, r.in_dtype_of(epsilon, p)));
    updates.push_back({p, r.sub(p, r.div(r.mul(r.in_dtype_of(learning_rate, p), g[i]), scale))});
  }
  return updates;
}

Updates rmsprop(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate, const Var& rho,
                const Var& epsilon, Loc loc) {
  const std::vector<Var> g = gradients_of(gradients, params, "rmsprop");
  const Rule r(loc);
  Updates updates;
  for (size_t i = 0; i < params.size(); ++i) {
    const Shared& p = params[i];
    const Shared average = state_like(p, "mean_square");
    const Var decay = r.in_dtype_of(rho, p);
    const Var new_average = r.add(r.mul(decay, average), r.mul(r.sub(1.0, decay), r.square(g[i])));
    updates.push_back({average, new_average});
    const Var scale = r.root(r.add(new_average, r.in_dtype_of(epsilon, p)));
    updates.push_back({p, r.sub(p, r.div(r.mul(r.in_dtype_of(learning_rate, p), g[i]), scale))});
  }
  return updates;
}

Updates adam(const Gradients& gradients, const std::vector<Shared>& params, AdamOptions options, Loc loc) {
  const std::vector<Var> g = gradients_of(gradients, params, "adam");
  const Rule r(loc);
  Updates updates;
  // One step count for all parameters, in f64 so that beta^t stays exact over long runs.
  const Shared t = shared(Tensor::zeros({}, DType::f64), "adam.t");
  const Var new_t = r.add(t, 1.0);
  updates.push_back({t, new_t});
  const Var beta1 = cast(options.beta1, DType::f64, loc), beta2 = cast(options.beta2, DType::f64, loc);
  const Var step_size = r.div(r.mul(cast(options.learning_rate, DType::f64, loc), r.root(r.sub(1.0, pow(beta2, new_t, loc)))),
                              r.sub(1.0, pow(beta1, new_t, loc)));
  for (size_t i = 0; i < params.size(); ++i) {
    const Shared& p = params[i];
    const Shared m = state_like(p, "first_moment"), v = state_like(p, "second_moment");
    const Var b1 = r.in_dtype_of(beta1, p), b2 = r.in_dtype_of(beta2, p);
    const Var new_m = r.add(r.mul(b1, m), r.mul(r.sub(1.0, b1), g[i]));
    const Var new_v = r.add(r.mul(b2, v), r.mul(r.sub(1.0, b2), r.square(g[i])));
    updates.push_back({m, new_m});
    updates.push_back({v, new_v});
    const Var denominator = r.add(r.root(new_v), r.in_dtype_of(options.epsilon, p));
    updates.push_back({p, r.sub(p, r.div(r.mul(r.in_dtype_of(step_size, p), new_m), denominator))});
  }
  return updates;
}

}  // namespace kiln
