// Full derivatives built from the vector-Jacobian product, one row per step of a loop, so the
// graph does not grow with the output's length.
#include "graph/node.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"
#include "kiln/scan.hpp"

namespace kiln {

Var jacobian(const Var& y, const Var& x, GradOptions options) {
  if (!y.defined() || !x.defined()) throw GradError("jacobian: y or x is an empty Var");
  if (!is_float(y.dtype())) throw GradError("jacobian: y must be a float value, got " + y.type().str());
  try {
    if (y.ndim() == 0) return grad(y, x, options);
    // Row i of the flattened y differentiated at step i; the rows stacked, then shaped y.shape + x.shape.
    const Var flat = flatten(y, 1);
    ScanResult rows = scan(
        [&](const std::vector<Var>& a) {
          const Var& i = a[0];
          return std::vector<Var>{i + int64_t{1}, grad(flat[VarIndex(i)], x, options)};
        },
        {.sequences = {}, .outputs_info = {Taps{constant(Tensor::scalar(int64_t{0}))}, std::nullopt}, .non_sequences = {},
         .n_steps = shape_of(flat)[0]});
    return reshape(rows.outputs[1], concatenate({shape_of(y), shape_of(x)}), y.ndim() + x.ndim());
  } catch (const GradError& e) {
    throw GradError("jacobian of y " + y.type().str() + " in x '" + x.get()->label() + "' " + x.type().str() + " (each element of y by grad): " + e.what());
  }
}

Var hessian(const Var& cost, const Var& x, GradOptions options) {
  if (!cost.defined() || cost.ndim() != 0)
    throw GradError("hessian: the cost must be a scalar (0-d), got " + (cost.defined() ? cost.type().str() : std::string("an empty Var")));
  return jacobian(grad(cost, x, options), x, options);
}

}  // namespace kiln
