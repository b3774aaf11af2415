#include "ops/elemwise.hpp"

#include <cmath>

#include "kiln/ops.hpp"
#include "ops/composite.hpp"
#include "ops/composite_jit.hpp"
#include "ops/reduce.hpp"
#include "ops/shape.hpp"
#include "tensor/copy.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/isa.hpp"
#include "tensor/nd_loop.hpp"
#include "tensor/same_dims.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

const char* scalar_op_name(ScalarOp op) {
  switch (op) {
    case ScalarOp::neg: return "neg";
    case ScalarOp::exp: return "exp";
    case ScalarOp::log: return "log";
    case ScalarOp::log1p: return "log1p";
    case ScalarOp::expm1: return "expm1";
    case ScalarOp::sqrt: return "sqrt";
    case ScalarOp::sqr: return "sqr";
    case ScalarOp::tanh: return "tanh";
    case ScalarOp::sigmoid: return "sigmoid";
    case ScalarOp::softplus: return "softplus";
    case ScalarOp::relu: return "relu";
    case ScalarOp::abs: return "abs";
    case ScalarOp::sign: return "sign";
    case ScalarOp::sin: return "sin";
    case ScalarOp::cos: return "cos";
    case ScalarOp::floor: return "floor";
    case ScalarOp::ceil: return "ceil";
    case ScalarOp::round: return "round";
    case ScalarOp::erf: return "erf";
    case ScalarOp::cast: return "cast";
    case ScalarOp::add: return "add";
    case ScalarOp::sub: return "sub";
    case ScalarOp::mul: return "mul";
    case ScalarOp::div: return "true_div";
    case ScalarOp::pow: return "pow";
    case ScalarOp::mod: return "mod";
    case ScalarOp::maximum: return "maximum";
    case ScalarOp::minimum: return "minimum";
    case ScalarOp::lt: return "lt";
    case ScalarOp::le: return "le";
    case ScalarOp::gt: return "gt";
    case ScalarOp::ge: return "ge";
    case ScalarOp::eq: return "eq";
    case ScalarOp::ne: return "neq";
    case ScalarOp::fill: return "fill";
    case ScalarOp::where: return "where";
  }
  return "?";
}

int scalar_op_arity(ScalarOp op) {
  if (op == ScalarOp::where) return 3;
  return op >= ScalarOp::add ? 2 : 1;
}

bool is_variadic(ScalarOp op) { return op == ScalarOp::add || op == ScalarOp::mul; }

namespace {

bool is_comparison(ScalarOp op) { return op >= ScalarOp::lt && op <= ScalarOp::ne; }
bool needs_float(ScalarOp op) {
  switch (op) {
    case ScalarOp::exp: case ScalarOp::log: case ScalarOp::log1p: case ScalarOp::expm1: case ScalarOp::sqrt:
    case ScalarOp::tanh: case ScalarOp::sigmoid: case ScalarOp::softplus: case ScalarOp::sin: case ScalarOp::cos:
    case ScalarOp::erf: case ScalarOp::div: case ScalarOp::pow:
      return true;
    default:
      return false;
  }
}
// b8 operands of these count as integers (NumPy: True + True == 2; kiln's integer is i64).
bool is_arithmetic(ScalarOp op) {
  return op == ScalarOp::add || op == ScalarOp::sub || op == ScalarOp::mul || op == ScalarOp::neg ||
         op == ScalarOp::sqr || op == ScalarOp::sign || op == ScalarOp::mod;
}

int category(DType d) { return d == DType::b8 ? 0 : is_integer(d) ? 1 : 2; }

DType promote_strong(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) {
    if (ca == 0) return b;
    if (cb == 0) return a;
    DType f = ca == 2 ? a : b;  // int with float: NumPy widens f32 to f64
    return f == DType::f32 ? DType::f64 : f;
  }
  return dtype_size(a) >= dtype_size(b) ? a : b;
}

Var cast_to(const Var& v, DType d, const Loc& loc) {
  if (v.dtype() == d) return v;
  const Variable* var = v.get();
  if (var->constant && var->weak && d == DType::i32 && var->constant->dtype() == DType::i64)
    check_fits_i32(var->constant->item<int64_t>(), loc);
  if (var->constant) {
    Var c = constant(var->constant->to(d));
    c.get()->weak = var->weak;
    return c;
  }
  return apply1(std::make_shared<Elemwise>(ScalarOp::cast, d), {v}, loc);
}

}  // namespace

void check_fits_i32(int64_t number, const Loc& loc) {
  if (number >= INT32_MIN && number <= INT32_MAX) return;
  throw TypeError("the number " + std::to_string(number) +
                  " does not fit i32, the dtype of the tensor it is combined with (kiln would wrap it, so it refuses; "
                  "NumPy 2 raises OverflowError in arithmetic); cast the tensor to i64 first (at " + loc_str(loc) + ")");
}

DType result_dtype(const std::vector<Var>& inputs) {
  bool any_strong = false;
  DType strong = DType::b8;
  DType weak = DType::b8;
  for (const Var& v : inputs) {
    if (!v.defined()) throw TypeError("an operand is an empty Var (default-constructed); build it with matrix(), scalar(), ... first");
    if (v.get()->weak) {
      weak = promote_strong(weak, v.dtype());
    } else {
      strong = any_strong ? promote_strong(strong, v.dtype()) : v.dtype();
      any_strong = true;
    }
  }
  if (!any_strong) return weak;
  if (category(weak) <= category(strong)) return strong;
  return weak == DType::f64 || weak == DType::f32 ? DType::f64 : DType::i64;
}

Var elemwise(ScalarOp op, std::vector<Var> inputs, const Loc& loc) {
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined())
      throw TypeError(std::string(scalar_op_name(op)) + ": input " + std::to_string(i) + " is an empty Var (at " +
                      loc_str(loc) + ")");
  const size_t first_value = (op == ScalarOp::where || op == ScalarOp::fill) ? 1 : 0;
  std::vector<Var> values(inputs.begin() + first_value, inputs.end());
  DType common = result_dtype(values);
  if (needs_float(op) && !is_float(common)) common = DType::f64;
  if (is_arithmetic(op) && common == DType::b8) common = DType::i64;
  int64_t ndim = 0;
  for (const Var& v : inputs) ndim = std::max(ndim, v.ndim());
  for (size_t i = 0; i < inputs.size(); ++i) {
    Var v = inputs[i];
    if (i >= first_value) v = cast_to(v, common, loc);
    else if (op == ScalarOp::where && v.dtype() != DType::b8) v = elemwise(ScalarOp::ne, {v, Var(0)}, loc);
    inputs[i] = pad_left(v, ndim, loc);
  }
  // Arithmetic on bare numbers alone gives a bare number, as Python's does before NumPy sees it:
  // (1.0 - beta) * x keeps x's dtype.
  bool all_weak = common != DType::b8;
  for (size_t i = first_value; i < inputs.size(); ++i) all_weak = all_weak && values[i - first_value].get()->weak;
  Var out = apply1(std::make_shared<Elemwise>(op), std::move(inputs), loc);
  out.get()->weak = all_weak;
  return out;
}

std::string Elemwise::name() const {
  if (op_ == ScalarOp::cast) return std::string("cast{") + dtype_name(cast_to_) + "}";
  return scalar_op_name(op_);
}

std::vector<Type> Elemwise::infer_types(const std::vector<Type>& in) const {
  const int arity = arity_;
  if (static_cast<int>(in.size()) != arity || (is_variadic(op_) ? arity < 2 : arity != scalar_op_arity(op_)))
    throw TypeError(name() + ": takes " + std::to_string(arity) + " inputs, got " + std::to_string(in.size()));
  const int64_t ndim = in[0].ndim();
  std::vector<bool> bc(ndim, true);
  for (const Type& t : in) {
    if (t.ndim() != ndim) throw TypeError(name() + ": inputs differ in ndim (" + in[0].str() + " vs " + t.str() + ")");
    for (int64_t d = 0; d < ndim; ++d) bc[d] = bc[d] && t.broadcastable[d];
  }
  const size_t first_value = (op_ == ScalarOp::where || op_ == ScalarOp::fill) ? 1 : 0;
  DType dtype = in[first_value].dtype;
  for (size_t i = first_value; i < in.size(); ++i)
    if (in[i].dtype != dtype)
      throw TypeError(name() + ": inputs must share a dtype, got " + in[first_value].str() + " and " + in[i].str());
  if (op_ == ScalarOp::where && in[0].dtype != DType::b8)
    throw TypeError("where: the condition must be b8, got " + in[0].str());
  if (is_comparison(op_)) dtype = DType::b8;
  if (op_ == ScalarOp::cast) dtype = cast_to_;
  if (needs_float(op_) && !is_float(dtype))
    throw TypeError(name() + ": needs float inputs, got " + in[first_value].str());
  if (!dispatch_dtype(in[first_value].dtype, [&](auto tag) { return has_kernel<decltype(tag)>(op_); }))
    throw TypeError(name() + ": is not defined for " + dtype_name(in[first_value].dtype) + " values, got " +
                    in[first_value].str() + "; cast them first");
  return {Type{dtype, bc}};
}

std::vector<Shape> Elemwise::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape out = in[0];
  for (size_t i = 1; i < in.size(); ++i) {
    for (size_t d = 0; d < out.size(); ++d) {
      if (in[i][d] == out[d] || in[i][d] == 1) continue;
      if (out[d] == 1) {
        out[d] = in[i][d];
        continue;
      }
      std::string shapes;
      for (size_t k = 0; k < in.size(); ++k) shapes += (k ? " and " : "") + shape_str(in[k]);
      throw ShapeError(name() + ": shapes " + shapes + " cannot be broadcast together: dimension " +
                       std::to_string(d) + " is " + std::to_string(out[d]) + " vs " + std::to_string(in[i][d]));
    }
  }
  return {out};
}

std::vector<std::pair<int, int>> Elemwise::inplace_options() const {
  if (op_ == ScalarOp::cast || is_comparison(op_) || op_ == ScalarOp::fill) return {};
  if (op_ == ScalarOp::where) return {{0, 1}, {0, 2}};
  // A chain add(a, b, c, ...) writes a + b first and then reads c, d, ...: only a and b may be
  // overwritten.
  std::vector<std::pair<int, int>> out;
  for (int i = 0; i < std::min(arity_, 2); ++i) out.push_back({0, i});
  return out;
}

namespace {

template <class O, class A, class F>
void map1(Tensor& out, const Tensor& a, F f, int64_t threshold) {
  auto loop = collapse_loop<2>(out.shape(), {out.strides(), broadcast_strides(a, out.shape())});
  O* po = reinterpret_cast<O*>(out.raw_data());
  const A* pa = reinterpret_cast<const A*>(a.raw_data());
  run_loop(loop, [&](int64_t n, std::array<int64_t, 2> off, std::array<int64_t, 2> st) {
    O* o = po + off[0];
    const A* x = pa + off[1];
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]]);
    }
  }, threshold);
}

template <class O, class A, class F>
void map2(Tensor& out, const Tensor& a, const Tensor& b, F f, int64_t threshold) {
  auto loop = collapse_loop<3>(out.shape(), {out.strides(), broadcast_strides(a, out.shape()),
                                              broadcast_strides(b, out.shape())});
  O* po = reinterpret_cast<O*>(out.raw_data());
  const A* pa = reinterpret_cast<const A*>(a.raw_data());
  const A* pb = reinterpret_cast<const A*>(b.raw_data());
  run_loop(loop, [&](int64_t n, std::array<int64_t, 3> off, std::array<int64_t, 3> st) {
    O* o = po + off[0];
    const A* x = pa + off[1];
    const A* y = pb + off[2];
    if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
    } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
      const A yv = *y;
      for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
    } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
      const A xv = *x;
      for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * st[0]] = f(x[i * st[1]], y[i * st[2]]);
    }
  }, threshold);
}

template <class T>
void map_where(Tensor& out, const Tensor& c, const Tensor& a, const Tensor& b) {
  auto loop = collapse_loop<4>(out.shape(), {out.strides(), broadcast_strides(c, out.shape()),
                                              broadcast_strides(a, out.shape()), broadcast_strides(b, out.shape())});
  T* po = reinterpret_cast<T*>(out.raw_data());
  const bool* pc = reinterpret_cast<const bool*>(c.raw_data());
  const T* pa = reinterpret_cast<const T*>(a.raw_data());
  const T* pb = reinterpret_cast<const T*>(b.raw_data());
  run_loop(loop, [&](int64_t n, std::array<int64_t, 4> off, std::array<int64_t, 4> st) {
    for (int64_t i = 0; i < n; ++i)
      po[off[0] + i * st[0]] = pc[off[1] + i * st[1]] ? pa[off[2] + i * st[2]] : pb[off[3] + i * st[3]];
  });
}

constexpr int64_t kCheap = 1 << 16;
constexpr int64_t kCostly = 1 << 14;

template <class T> void apply_unary(ScalarOp op, Tensor& out, const Tensor& a) {
  const bool found = visit_unary<T>(op, [&](auto f, bool costly) { map1<T, T>(out, a, f, costly ? kCostly : kCheap); });
  if (!found) throw TypeError(std::string(scalar_op_name(op)) + ": no kernel for " + dtype_name(a.dtype()));
}

template <class T> void apply_binary(ScalarOp op, Tensor& out, const Tensor& a, const Tensor& b) {
  const bool found = visit_binary<T>(op, [&](auto f, bool costly) {
    using R = decltype(f(T{}, T{}));
    map2<R, T>(out, a, b, f, costly ? kCostly : kCheap);
  });
  if (!found) throw TypeError(std::string(scalar_op_name(op)) + ": no kernel for " + dtype_name(a.dtype()));
}

// One elementwise op runs as the one-instruction fused program it is (ops/composite_jit) when its
// operands are read in place (contiguous in the output's shape, or single values by their type);
// through the strided loops otherwise.
class ElemwiseKernel final : public KernelOf<Elemwise> {
 public:
  ElemwiseKernel(std::shared_ptr<const Elemwise> op, const Node& node) : KernelOf(std::move(op), node) {
    std::vector<int> args;
    std::vector<DType> dtypes;
    for (const Var& in : node.inputs) {
      args.push_back(static_cast<int>(args.size()));
      dtypes.push_back(in.dtype());
      single_.push_back(std::ranges::all_of(in.type().broadcastable, [](bool b) { return b; }));
    }
    const std::vector<ScalarInstruction> program{{this->op().scalar_op(), node.outputs[0]->type.dtype, args}};
    compiled_ = CompiledProgram::compile(program, dtypes, single_, active_isa());
  }

  void run(InputValues in, OutputValues out, std::span<std::byte>) const override {
    const ScalarOp op = this->op().scalar_op();
    Tensor& o = out[0];
    if (compiled_ && compiled_->isa() == active_isa() && reads_in_place(in, o)) return run_in_place(*compiled_, in, single_, out);
    if (op == ScalarOp::cast || op == ScalarOp::fill) return copy_broadcast(o, in[op == ScalarOp::fill ? 1 : 0]);
    if (op == ScalarOp::where)
      return dispatch_dtype(in[1].dtype(), [&](auto tag) { map_where<decltype(tag)>(o, in[0], in[1], in[2]); });
    dispatch_dtype(in[0].dtype(), [&](auto tag) {
      using T = decltype(tag);
      if (in.size() == 1) {
        apply_unary<T>(op, o, in[0]);
      } else {
        apply_binary<T>(op, o, in[0], in[1]);
        for (size_t k = 2; k < in.size(); ++k) apply_binary<T>(op, o, o, in[k]);
      }
    });
  }

 private:
  bool reads_in_place(InputValues in, const Tensor& o) const {
    if (!o.is_contiguous()) return false;
    for (size_t i = 0; i < in.size(); ++i)
      if (!single_[i] && (!same_dims(in[i].shape(), o.shape()) || !in[i].is_contiguous())) return false;
    return true;
  }

  SmallVector<bool, 4> single_;  // per input: one value by its type (every axis broadcastable)
  std::shared_ptr<const CompiledProgram> compiled_;
};

}  // namespace

void add_elemwise_kernels(KernelTable& table) { table.add<Elemwise, ElemwiseKernel>(); }

std::vector<Var> Elemwise::L_op(const Node& node, const std::vector<Var>& gouts) const {
  const Loc loc = node.loc;
  const std::vector<Var>& x = node.inputs;
  const Var y = node.output(0);
  const Var& g = gouts[0];
  std::vector<Var> gin(x.size());
  auto differentiable = [&](size_t i) { return is_float(x[i].dtype()); };
  auto zero = [&](size_t i) { return zeros_like(x[i], loc); };
  switch (op_) {
    case ScalarOp::neg: gin[0] = -g; break;
    case ScalarOp::exp: gin[0] = g * y; break;
    case ScalarOp::log: gin[0] = g / x[0]; break;
    case ScalarOp::log1p: gin[0] = g / (x[0] + 1.0); break;
    case ScalarOp::expm1: gin[0] = g * (y + 1.0); break;
    case ScalarOp::sqrt: gin[0] = g * 0.5 / y; break;
    case ScalarOp::sqr: gin[0] = g * 2.0 * x[0]; break;
    case ScalarOp::tanh: gin[0] = g * (1.0 - y * y); break;
    case ScalarOp::sigmoid: gin[0] = g * y * (1.0 - y); break;
    case ScalarOp::softplus: gin[0] = g * sigmoid(x[0], loc); break;
    case ScalarOp::relu: gin[0] = where(x[0] > 0, g, 0, loc); break;
    case ScalarOp::abs: gin[0] = g * sign(x[0], loc); break;
    case ScalarOp::sin: gin[0] = g * cos(x[0], loc); break;
    case ScalarOp::cos: gin[0] = -(g * sin(x[0], loc)); break;
    case ScalarOp::sign: case ScalarOp::floor: case ScalarOp::ceil: case ScalarOp::round: gin[0] = zero(0); break;
    case ScalarOp::erf: gin[0] = g * (1.1283791670955126 * exp(-(x[0] * x[0]), loc)); break;  // 2/sqrt(pi) e^(-x^2)
    case ScalarOp::cast: if (differentiable(0)) gin[0] = cast(g, x[0].dtype(), loc); break;
    case ScalarOp::add:
      for (size_t i = 0; i < x.size(); ++i) gin[i] = g;
      break;
    case ScalarOp::sub: gin[0] = g; gin[1] = -g; break;
    case ScalarOp::mul:
      for (size_t i = 0; i < x.size(); ++i) {
        Var others = g;
        for (size_t j = 0; j < x.size(); ++j)
          if (j != i) others = others * x[j];
        gin[i] = others;
      }
      break;
    case ScalarOp::div: gin[0] = g / x[1]; gin[1] = -(g * y) / x[1]; break;
    case ScalarOp::pow:
      // x^0 is 1 for every x and 0^y is 0 for every y > 0: their derivatives are 0 there, not
      // 0 times an infinite power or logarithm (NaN).
      gin[0] = g * where(x[1] == 0.0, 0.0, x[1] * pow(x[0], x[1] - 1.0, loc), loc);
      gin[1] = g * where(y == 0.0, 0.0, log(x[0], loc) * y, loc);
      break;
    case ScalarOp::mod: gin[0] = g; gin[1] = -(g * floor(x[0] / x[1], loc)); break;  // x - floor(x / y) * y
    case ScalarOp::maximum: gin[0] = where(x[0] >= x[1], g, 0, loc); gin[1] = where(x[0] >= x[1], 0, g, loc); break;
    case ScalarOp::minimum: gin[0] = where(x[0] <= x[1], g, 0, loc); gin[1] = where(x[0] <= x[1], 0, g, loc); break;
    case ScalarOp::lt: case ScalarOp::le: case ScalarOp::gt: case ScalarOp::ge: case ScalarOp::eq: case ScalarOp::ne:
      gin[0] = zero(0); gin[1] = zero(1); break;
    case ScalarOp::fill: gin[1] = g; break;
    case ScalarOp::where: gin[1] = where(x[0], g, 0, loc); gin[2] = where(x[0], 0, g, loc); break;
  }
  for (size_t i = 0; i < x.size(); ++i) {
    if (!gin[i].defined() || !differentiable(i)) {
      gin[i] = Var();
      continue;
    }
    gin[i] = cast(sum_to_shape_of(gin[i], x[i], loc), x[i].dtype(), loc);
  }
  return gin;
}

// The public elementwise functions.
Var operator+(const Operand& a, const Operand& b) { return elemwise(ScalarOp::add, {a.var, b.var}, a.loc); }
Var operator-(const Operand& a, const Operand& b) { return elemwise(ScalarOp::sub, {a.var, b.var}, a.loc); }
Var operator*(const Operand& a, const Operand& b) { return elemwise(ScalarOp::mul, {a.var, b.var}, a.loc); }
Var operator/(const Operand& a, const Operand& b) { return elemwise(ScalarOp::div, {a.var, b.var}, a.loc); }
Var operator-(const Operand& a) { return elemwise(ScalarOp::neg, {a.var}, a.loc); }
Var operator<(const Operand& a, const Operand& b) { return elemwise(ScalarOp::lt, {a.var, b.var}, a.loc); }
Var operator<=(const Operand& a, const Operand& b) { return elemwise(ScalarOp::le, {a.var, b.var}, a.loc); }
Var operator>(const Operand& a, const Operand& b) { return elemwise(ScalarOp::gt, {a.var, b.var}, a.loc); }
Var operator>=(const Operand& a, const Operand& b) { return elemwise(ScalarOp::ge, {a.var, b.var}, a.loc); }
Var operator==(const Operand& a, const Operand& b) { return elemwise(ScalarOp::eq, {a.var, b.var}, a.loc); }
Var operator!=(const Operand& a, const Operand& b) { return elemwise(ScalarOp::ne, {a.var, b.var}, a.loc); }

Var exp(const Var& x, Loc loc) { return elemwise(ScalarOp::exp, {x}, loc); }
Var log(const Var& x, Loc loc) { return elemwise(ScalarOp::log, {x}, loc); }
Var log1p(const Var& x, Loc loc) { return elemwise(ScalarOp::log1p, {x}, loc); }
Var expm1(const Var& x, Loc loc) { return elemwise(ScalarOp::expm1, {x}, loc); }
Var sqrt(const Var& x, Loc loc) { return elemwise(ScalarOp::sqrt, {x}, loc); }
Var sqr(const Var& x, Loc loc) { return elemwise(ScalarOp::sqr, {x}, loc); }
Var tanh(const Var& x, Loc loc) { return elemwise(ScalarOp::tanh, {x}, loc); }
Var sigmoid(const Var& x, Loc loc) { return elemwise(ScalarOp::sigmoid, {x}, loc); }
Var softplus(const Var& x, Loc loc) { return elemwise(ScalarOp::softplus, {x}, loc); }
Var relu(const Var& x, Loc loc) { return elemwise(ScalarOp::relu, {x}, loc); }
Var abs(const Var& x, Loc loc) { return elemwise(ScalarOp::abs, {x}, loc); }
Var sign(const Var& x, Loc loc) { return elemwise(ScalarOp::sign, {x}, loc); }
Var sin(const Var& x, Loc loc) { return elemwise(ScalarOp::sin, {x}, loc); }
Var cos(const Var& x, Loc loc) { return elemwise(ScalarOp::cos, {x}, loc); }
Var pow(const Var& x, const Var& y, Loc loc) { return elemwise(ScalarOp::pow, {x, y}, loc); }
Var square(const Var& x, Loc loc) { return elemwise(ScalarOp::sqr, {x}, loc); }
Var floor(const Var& x, Loc loc) { return elemwise(ScalarOp::floor, {x}, loc); }
Var ceil(const Var& x, Loc loc) { return elemwise(ScalarOp::ceil, {x}, loc); }
Var round(const Var& x, Loc loc) { return elemwise(ScalarOp::round, {x}, loc); }
Var erf(const Var& x, Loc loc) { return elemwise(ScalarOp::erf, {x}, loc); }
Var mod(const Operand& x, const Operand& y) { return elemwise(ScalarOp::mod, {x.var, y.var}, x.loc); }
Var operator%(const Operand& x, const Operand& y) { return elemwise(ScalarOp::mod, {x.var, y.var}, x.loc); }
// max(x, lo) then min(., hi), as NumPy's clip (hi wins where lo > hi; NaN stays NaN): the
// gradient reaches x where lo <= x <= hi and lo (hi) where x is below (above) it, as PyTensor's.
Var clip(const Var& x, const Operand& lo, const Operand& hi, Loc loc) {
  if (!x.defined()) throw TypeError("clip: x is an empty Var (at " + loc_str(loc) + ")");
  return elemwise(ScalarOp::minimum, {elemwise(ScalarOp::maximum, {x, lo.var}, loc), hi.var}, loc);
}
Var maximum(const Var& x, const Var& y, Loc loc) { return elemwise(ScalarOp::maximum, {x, y}, loc); }
Var minimum(const Var& x, const Var& y, Loc loc) { return elemwise(ScalarOp::minimum, {x, y}, loc); }
Var where(const Var& c, const Var& a, const Var& b, Loc loc) { return elemwise(ScalarOp::where, {c, a, b}, loc); }
Var cast(const Var& x, DType dtype, Loc loc) { return cast_to(x, dtype, loc); }
Var fill_like(const Var& like, const Var& value, const Loc& loc) {
  return elemwise(ScalarOp::fill, {like, value}, loc);
}
Var zeros_like(const Var& x, Loc loc) { return elemwise(ScalarOp::fill, {x, constant(Tensor::zeros({}, x.dtype()))}, loc); }
Var ones_like(const Var& x, Loc loc) { return elemwise(ScalarOp::fill, {x, constant(Tensor::ones({}, x.dtype()))}, loc); }

}  // namespace kiln
