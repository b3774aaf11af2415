#pragma once
#include <vector>

#include "kiln/function.hpp"
#include "kiln/graph.hpp"

namespace kiln {

// Optimizers as update rules (as Lasagne's for Theano): each returns the Updates of one training
// step for `params`, to pass to function(...); their state (velocities, averages, the step count)
// lives in shared variables made here, zero at first, shaped and typed as each parameter. The
// rates may be numbers or variables (a shared learning rate changes between calls). Every rule is
// elementwise per parameter, so the fusion rewrite computes each parameter's step in one pass.
// The first argument is the cost (differentiated here) or the gradients, one per parameter. The
// nodes they build name the caller's line.
struct Gradients {
  Gradients(const Var& cost) : cost(cost) {}  // NOLINT: a cost converts
  Gradients(std::vector<Var> grads) : grads(std::move(grads)) {}  // NOLINT: so do gradients
  Var cost;
  std::vector<Var> grads;
};

// p <- p - learning_rate * g
Updates sgd(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate = 0.01,
            Loc loc = Loc::current());
// v <- momentum * v - learning_rate * g;  p <- p + v
Updates momentum(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate = 0.01,
                 const Var& momentum = 0.9, Loc loc = Loc::current());
// v <- momentum * v - learning_rate * g;  p <- p + momentum * v - learning_rate * g
Updates nesterov(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate = 0.01,
                 const Var& momentum = 0.9, Loc loc = Loc::current());
// a <- a + g^2;  p <- p - learning_rate * g / sqrt(a + epsilon)
Updates adagrad(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate = 1.0,
                const Var& epsilon = 1e-6, Loc loc = Loc::current());
// a <- rho * a + (1 - rho) * g^2;  p <- p - learning_rate * g / sqrt(a + epsilon)
Updates rmsprop(const Gradients& gradients, const std::vector<Shared>& params, const Var& learning_rate = 1.0,
                const Var& rho = 0.9, const Var& epsilon = 1e-6, Loc loc = Loc::current());

struct AdamOptions {
  Var learning_rate = 0.001;
  Var beta1 = 0.9;
  Var beta2 = 0.999;
  Var epsilon = 1e-8;
};
// t <- t + 1;  m <- beta1 * m + (1 - beta1) * g;  v <- beta2 * v + (1 - beta2) * g^2;
// p <- p - learning_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + epsilon)
Updates adam(const Gradients& gradients, const std::vector<Shared>& params, AdamOptions options = {}, Loc loc = Loc::current());

}  // namespace kiln
