// Full derivatives built from the vector-Jacobian product: one row per step of a loop, so the
// graph does not grow with the output's length, or every row at once by vectorizing that product
// over the rows of the identity.
#include "grad/backprop.hpp"
#include "grad/vectorize.hpp"
#include "graph/node.hpp"
#include "kiln/grad.hpp"
#include "kiln/ops.hpp"
#include "kiln/scan.hpp"
#include "ops/shape.hpp"

namespace kiln {
namespace {

// Row i of the flattened y differentiated at step i; the rows stacked.
Var rows_by_scan(const Var& flat, const Var& x, GradOptions options, const Loc& loc) {
  ScanResult rows = scan(
      [&](const std::vector<Var>& a) {
        const Var& i = a[0];
        return std::vector<Var>{i + int64_t{1}, grad(flat[VarIndex(i)], x, options)};
      },
      {.sequences = {}, .outputs_info = {Taps{constant(Tensor::scalar(int64_t{0}))}, std::nullopt}, .non_sequences = {},
       .n_steps = shape_of(flat, loc)[0]},
      loc);
  return rows.outputs[1];
}

// The vector-Jacobian product for a symbolic cotangent, vectorized over a batch of cotangents:
// the rows of the identity, whose size is known only when the function runs.
Var rows_by_batch(const Var& flat, const Var& x, GradOptions options, const Loc& loc) {
  const Var cotangent = tensor(flat.dtype(), flat.type().broadcastable, "cotangent");
  const Var product = lop_of_own_eval_points({flat}, {x}, {cotangent}, options)[0];
  const Var ones = ones_like(flat, loc);
  const Var index = cumsum(cast(ones, DType::i64, loc), std::nullopt, loc);
  const Var identity =
      cast(Operand(dimshuffle(index, {0, -1}, loc), loc) == Operand(dimshuffle(index, {-1, 0}, loc), loc), flat.dtype(), loc);
  const Var rows = vectorize_graph({product}, {{cotangent, identity}})[0];
  if (rows.ndim() > product.ndim()) return rows;
  // A product that does not read the cotangent (a disconnected x's zeros) is every row's.
  std::vector<int64_t> column{0};
  column.resize(x.ndim() + 1, -1);
  return Operand(pad_left(rows, rows.ndim() + 1, loc), loc) * Operand(dimshuffle(ones, column, loc), loc);
}

Var jacobian_of(const Var& y, const Var& x, GradOptions options, bool vectorize, const Loc& loc) {
  if (!y.defined() || !x.defined()) throw GradError("jacobian: y or x is an empty Var");
  if (!is_float(y.dtype())) throw GradError("jacobian: y must be a float value, got " + y.type().str());
  try {
    if (y.ndim() == 0) return grad(y, x, options);
    const Var flat = flatten(y, 1, loc);
    const Var rows = vectorize ? rows_by_batch(flat, x, options, loc) : rows_by_scan(flat, x, options, loc);
    return reshape(rows, concatenate({shape_of(y, loc), shape_of(x, loc)}, 0, loc), y.ndim() + x.ndim(), loc);
  } catch (const GradError& e) {
    throw GradError("jacobian of y " + y.type().str() + " in x '" + x.get()->label() + "' " + x.type().str() +
                    (vectorize ? " (every element of y at once by Lop): " : " (each element of y by grad): ") + e.what());
  }
}

Var hessian_of(const Var& cost, const Var& x, GradOptions options, bool vectorize, const Loc& loc) {
  if (!cost.defined() || cost.ndim() != 0)
    throw GradError("hessian: the cost must be a scalar (0-d), got " + (cost.defined() ? cost.type().str() : std::string("an empty Var")));
  Var g;
  try {
    g = grad(cost, x, options);
  } catch (const GradError& e) {
    throw GradError(std::string("hessian: ") + e.what());  // the user called hessian, not grad
  }
  return jacobian_of(g, x, options, vectorize, loc);
}

}  // namespace

Var jacobian(const Var& y, const Var& x, GradOptions options, Loc loc) { return jacobian_of(y, x, options, false, loc); }
Var jacobian(const Var& y, const Var& x, JacobianOptions options, Loc loc) {
  return jacobian_of(y, x, options.grad, options.vectorize, loc);
}
Var hessian(const Var& cost, const Var& x, GradOptions options, Loc loc) { return hessian_of(cost, x, options, false, loc); }
Var hessian(const Var& cost, const Var& x, JacobianOptions options, Loc loc) {
  return hessian_of(cost, x, options.grad, options.vectorize, loc);
}

}  // namespace kiln
