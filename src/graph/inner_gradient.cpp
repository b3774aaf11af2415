#include "graph/inner_gradient.hpp"

#include <atomic>

#include "kiln/errors.hpp"

namespace kiln {

namespace {
std::atomic<InnerVjp> provided{nullptr};
std::atomic<InnerJvp> provided_jvp{nullptr};
}

void provide_inner_vjp(InnerVjp vjp) { provided.store(vjp, std::memory_order_release); }

std::vector<Var> inner_vjp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points) {
  const InnerVjp vjp = provided.load(std::memory_order_acquire);
  if (!vjp) throw Error("the gradient of an inner graph was asked for outside grad() or Lop()");
  return vjp(f, wrt, eval_points);
}

void provide_inner_jvp(InnerJvp jvp) { provided_jvp.store(jvp, std::memory_order_release); }

std::vector<Var> inner_jvp(const std::vector<Var>& f, const std::vector<Var>& wrt, const std::vector<Var>& eval_points) {
  const InnerJvp jvp = provided_jvp.load(std::memory_order_acquire);
  if (!jvp) throw Error("the Jacobian-vector product of an inner graph was asked for outside Rop()");
  return jvp(f, wrt, eval_points);
}

}  // namespace kiln
