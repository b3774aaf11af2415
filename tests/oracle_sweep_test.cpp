// The oracle sweep (as ggml's test-backend-ops): every op, every dtype it accepts, contiguous,
// transposed, strided and broadcast operands, unfused (plain) and fused (fast_run), planned and
// checked against an unplanned run (debug), 1 and 2 threads, every instruction set this CPU runs,
// against plain references written here; every differentiable op through verify_grad and
// verify_rop in f64, also at magnitudes of 10^3 to 10^4 where the op is stabilized. Each test
// prints how many combinations it ran.
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <optional>

#include "graph/node.hpp"
#include "graph/op.hpp"
#include "conv_reference.hpp"
#include "pool_reference.hpp"
#include "tensor/isa.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::test;

namespace {

const DType kDtypes[] = {f32, f64, i32, i64, b8};

std::vector<Mode> sweep_modes() { return {plain_mode(), Mode::fast_run(), Mode::debug()}; }

std::vector<Isa> instruction_sets() {
  std::vector<Isa> sets{Isa::baseline};
  limit_isa(Isa::avx512);
  if (active_isa() >= Isa::avx2) sets.push_back(Isa::avx2);
  if (active_isa() >= Isa::avx512) sets.push_back(Isa::avx512);
  return sets;
}

// Random values of a dtype: floats in [lo, hi], integers in [-5, 5] (or [1, 5] when positive), bools.
Tensor values_of(const Shape& shape, DType dtype, uint64_t seed, bool positive) {
  if (dtype == b8) {
    std::vector<bool> v(static_cast<size_t>(shape_numel(shape)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = ((i * 7 + seed) % 3) != 0;
    return Tensor::from(v, shape);
  }
  if (is_integer(dtype)) {
    Tensor t = random_tensor(shape, f64, positive ? 1 : -5, 5.999, seed);
    std::vector<double> v = t.to_vector<double>();
    for (double& x : v) x = std::floor(x);
    return Tensor::from(v, shape).to(dtype);
  }
  return random_tensor(shape, dtype, positive ? 0.1 : -3, 3, seed);
}

// The same values, laid out as asked: contiguous, a transposed view, a strided view, or (for a
// broadcast operand) one row or one column.
enum class Layout { contiguous, transposed, strided, row, column };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::strided: return "strided";
    case Layout::row: return "row";
    case Layout::column: return "column";
  }
  return "?";
}

Tensor laid_out(const Tensor& values, Layout layout) {
  const int64_t r = values.shape()[0], c = values.shape()[1];
  switch (layout) {
    case Layout::transposed: {
      Tensor t = Tensor::empty({c, r}, values.dtype());
      t.view({r, c}, {1, r}, 0).copy_from(values);
      return t.view({r, c}, {1, r}, 0);
    }
    case Layout::strided: {
      Tensor wide = Tensor::zeros({r, 2 * c + 1}, values.dtype());
      Tensor v = wide.view({r, c}, {2 * c + 1, 2}, 1);
      v.copy_from(values);
      return v;
    }
    case Layout::row: return values.view({1, c}, {c, 1}, 0).clone();
    case Layout::column: return values.view({r, 1}, {c, c}, 0).clone();
    case Layout::contiguous: return values;
  }
  return values;
}

std::vector<double> transpose_values(const Tensor& t) {
  return t.view({t.shape()[1], t.shape()[0]}, {t.strides()[1], t.strides()[0]}, t.offset()).to_vector<double>();
}

double round_to(DType dtype, double x) {
  switch (dtype) {
    case DType::f32: return static_cast<float>(x);
    case DType::f64: return x;
    case DType::i32: return static_cast<double>(static_cast<int32_t>(x));
    case DType::i64: return static_cast<double>(static_cast<int64_t>(x));
    case DType::b8: return x != 0 ? 1 : 0;
  }
  return x;
}

// got == want elementwise, within the dtype's precision (f32 kernels use polynomial exp, tanh, ...).
void expect_close(const Tensor& got, const std::vector<double>& want, DType dtype, const std::string& what) {
  const auto g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  const double rel = dtype == f32 ? 4e-6 : 1e-12;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(g[i])) << what << ", element " << i << ": " << g[i] << " instead of NaN";
      continue;
    }
    if (g[i] == want[i]) continue;
    ASSERT_NEAR(g[i], want[i], rel * std::max(1.0, std::fabs(want[i]))) << what << ", element " << i;
  }
}

// NumPy's result dtype for the sweep's elementwise ops (docs/ops.md).
enum class Kind { float_function, arithmetic, keeps, division, comparison };
DType result_dtype_of(Kind kind, DType in) {
  switch (kind) {
    case Kind::float_function: return is_float(in) ? in : f64;
    case Kind::arithmetic: return in == b8 ? i64 : in;
    case Kind::keeps: return in;
    case Kind::division: return is_float(in) ? in : f64;
    case Kind::comparison: return b8;
  }
  return in;
}

struct ElementwiseCase {
  std::string name;
  int arity;
  Kind kind;
  std::function<Var(const std::vector<Var>&)> build;
  std::function<double(double, double)> reference;  // in double; rounded to the result dtype after
  bool positive = false;                            // the domain needs positive operands
};

double stable_softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }
double stable_sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

std::vector<ElementwiseCase> elementwise_cases() {
  using V = const std::vector<Var>&;
  auto u = [](std::string name, Kind kind, std::function<Var(const Var&)> f, std::function<double(double)> r,
              bool positive = false) {
    return ElementwiseCase{name, 1, kind, [f](V v) { return f(v[0]); }, [r](double a, double) { return r(a); }, positive};
  };
  auto b = [](std::string name, Kind kind, std::function<Var(const Var&, const Var&)> f,
              std::function<double(double, double)> r, bool positive = false) {
    return ElementwiseCase{name, 2, kind, [f](V v) { return f(v[0], v[1]); }, r, positive};
  };
  return {
      u("neg", Kind::arithmetic, [](const Var& x) { return -x; }, [](double a) { return -a; }),
      u("exp", Kind::float_function, [](const Var& x) { return exp(x); }, [](double a) { return std::exp(a); }),
      u("log", Kind::float_function, [](const Var& x) { return log(x); }, [](double a) { return std::log(a); }, true),
      u("log1p", Kind::float_function, [](const Var& x) { return log1p(x); }, [](double a) { return std::log1p(a); }, true),
      u("expm1", Kind::float_function, [](const Var& x) { return expm1(x); }, [](double a) { return std::expm1(a); }),
      u("sqrt", Kind::float_function, [](const Var& x) { return sqrt(x); }, [](double a) { return std::sqrt(a); }, true),
      u("sqr", Kind::arithmetic, [](const Var& x) { return sqr(x); }, [](double a) { return a * a; }),
      u("tanh", Kind::float_function, [](const Var& x) { return tanh(x); }, [](double a) { return std::tanh(a); }),
      u("sigmoid", Kind::float_function, [](const Var& x) { return sigmoid(x); }, stable_sigmoid),
      u("softplus", Kind::float_function, [](const Var& x) { return softplus(x); }, stable_softplus),
      u("relu", Kind::keeps, [](const Var& x) { return relu(x); }, [](double a) { return std::max(a, 0.0); }),
      u("abs", Kind::keeps, [](const Var& x) { return abs(x); }, [](double a) { return std::fabs(a); }),
      u("sign", Kind::arithmetic, [](const Var& x) { return sign(x); }, [](double a) { return a != a ? a : double((0 < a) - (a < 0)); }),
      u("sin", Kind::float_function, [](const Var& x) { return sin(x); }, [](double a) { return std::sin(a); }),
      u("cos", Kind::float_function, [](const Var& x) { return cos(x); }, [](double a) { return std::cos(a); }),
      u("square", Kind::arithmetic, [](const Var& x) { return square(x); }, [](double a) { return a * a; }),
      u("floor", Kind::keeps, [](const Var& x) { return floor(x); }, [](double a) { return std::floor(a); }),
      u("ceil", Kind::keeps, [](const Var& x) { return ceil(x); }, [](double a) { return std::ceil(a); }),
      u("round", Kind::keeps, [](const Var& x) { return round(x); }, [](double a) { return std::nearbyint(a); }),
      u("erf", Kind::float_function, [](const Var& x) { return erf(x); }, [](double a) { return std::erf(a); }),
      u("clip", Kind::arithmetic, [](const Var& x) { return clip(x, -1, 2); }, [](double a) { return std::min(std::max(a, -1.0), 2.0); }),
      b("add", Kind::arithmetic, [](const Var& x, const Var& y) { return x + y; }, [](double a, double c) { return a + c; }),
      b("sub", Kind::arithmetic, [](const Var& x, const Var& y) { return x - y; }, [](double a, double c) { return a - c; }),
      b("mul", Kind::arithmetic, [](const Var& x, const Var& y) { return x * y; }, [](double a, double c) { return a * c; }),
      b("div", Kind::division, [](const Var& x, const Var& y) { return x / y; }, [](double a, double c) { return a / c; }, true),
      b("pow", Kind::division, [](const Var& x, const Var& y) { return pow(x, y); }, [](double a, double c) { return std::pow(a, c); }, true),
      b("maximum", Kind::keeps, [](const Var& x, const Var& y) { return maximum(x, y); }, [](double a, double c) { return std::max(a, c); }),
      b("minimum", Kind::keeps, [](const Var& x, const Var& y) { return minimum(x, y); }, [](double a, double c) { return std::min(a, c); }),
      b("lt", Kind::comparison, [](const Var& x, const Var& y) { return x < y; }, [](double a, double c) { return double(a < c); }),
      b("le", Kind::comparison, [](const Var& x, const Var& y) { return x <= y; }, [](double a, double c) { return double(a <= c); }),
      b("gt", Kind::comparison, [](const Var& x, const Var& y) { return x > y; }, [](double a, double c) { return double(a > c); }),
      b("ge", Kind::comparison, [](const Var& x, const Var& y) { return x >= y; }, [](double a, double c) { return double(a >= c); }),
      b("eq", Kind::comparison, [](const Var& x, const Var& y) { return x == y; }, [](double a, double c) { return double(a == c); }),
      b("ne", Kind::comparison, [](const Var& x, const Var& y) { return x != y; }, [](double a, double c) { return double(a != c); }),
      b("mod", Kind::arithmetic, [](const Var& x, const Var& y) { return x % y; },
        [](double a, double c) { return c == 0 ? 0 : a - std::floor(a / c) * c; }, true),
      b("mod negative divisor", Kind::arithmetic, [](const Var& x, const Var& y) { return x % -y; },
        [](double a, double c) { return c == 0 ? 0 : a - std::floor(a / -c) * -c; }, true),
      b("clip by values", Kind::keeps, [](const Var& x, const Var& y) { return clip(x, y, y); }, [](double, double c) { return c; }),
  };
}

// Runs one compiled function on the given arguments on 1 and 2 threads and on every instruction
// set, checking each result; returns how many runs it made.
int run_everywhere(const Function& f, const std::vector<Tensor>& args, const std::function<void(const std::vector<Tensor>&, const std::string&)>& check) {
  int runs = 0;
  for (int threads : {1, 2}) {
    ThreadsForScope scope(threads);
    for (Isa isa : instruction_sets()) {
      limit_isa(isa);
      check(f(args), std::to_string(threads) + " threads, " + isa_name(isa));
      ++runs;
    }
  }
  limit_isa(Isa::avx512);
  return runs;
}

}  // namespace

TEST(OracleSweep, ElementwiseOpsEveryDtypeLayoutModeThreadCountAndInstructionSet) {
  int combinations = 0, refused = 0;
  for (const ElementwiseCase& op : elementwise_cases())
    for (DType dtype : kDtypes) {
      std::vector<Var> vars;
      for (int i = 0; i < op.arity; ++i) vars.push_back(matrix("x" + std::to_string(i), dtype));
      Var z;
      try {
        z = op.build(vars);
      } catch (const TypeError&) {
        ++refused;  // refused when the graph is built: never at run time (issue 9, item 8)
        continue;
      }
      const DType out = result_dtype_of(op.kind, dtype);
      ASSERT_EQ(z.dtype(), out) << op.name << " of " << dtype_name(dtype);
      // Fused: the op inside a composite that reads its result twice; the reference follows.
      const Var fused = z + z;
      const DType fused_dtype = fused.dtype();
      for (const Mode& mode : sweep_modes()) {
        const std::vector<In> ins(vars.begin(), vars.end());
        Function plain_f = function(ins, {z}, {.mode = mode});
        Function fused_f = function(ins, {fused}, {.mode = mode});
        // Handing z back too makes it a second output of the fused pass (in the modes that fuse).
        std::optional<Function> two_outputs_f;
        if (mode.name() != plain_mode().name()) two_outputs_f = function(ins, {fused, z}, {.mode = mode});
        for (int64_t rows : {3, 160}) {
          const int64_t cols = rows == 3 ? 4 : 512;  // 81 920 elements: the kernels use threads
          for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided, Layout::row, Layout::column}) {
            if (rows > 3 && (layout == Layout::strided || mode.name() == "debug")) continue;
            std::vector<Tensor> values, args;
            for (int i = 0; i < op.arity; ++i) {
              Tensor v = values_of({rows, cols}, dtype, static_cast<uint64_t>(i * 31 + rows), op.positive);
              // The first operand keeps the full shape; a broadcast layout applies to the last one.
              const Layout l = (i + 1 < op.arity && (layout == Layout::row || layout == Layout::column)) ? Layout::contiguous : layout;
              Tensor a = laid_out(v, l);
              values.push_back(a.contiguous());
              args.push_back(a);
            }
            Shape shape = values[0].shape();
            for (const Tensor& v : values)
              for (size_t d = 0; d < 2; ++d) shape[d] = std::max(shape[d], v.shape()[d]);
            std::vector<double> want(static_cast<size_t>(shape_numel(shape)));
            std::vector<std::vector<double>> in;
            for (const Tensor& v : values) in.push_back(v.to_vector<double>());
            for (int64_t r = 0; r < shape[0]; ++r)
              for (int64_t c = 0; c < shape[1]; ++c) {
                double a[2] = {0, 0};
                for (size_t i = 0; i < values.size(); ++i) {
                  const int64_t vr = values[i].shape()[0] == 1 ? 0 : r, vc = values[i].shape()[1] == 1 ? 0 : c;
                  a[i] = in[i][vr * values[i].shape()[1] + vc];
                }
                // Integer arithmetic is exact in double for the sweep's small values; f32 rounds.
                const double x = dtype == f32 ? static_cast<float>(a[0]) : a[0];
                want[r * shape[1] + c] = round_to(out, op.reference(x, a[1]));
              }
            std::vector<double> doubled(want.size());
            for (size_t i = 0; i < want.size(); ++i) doubled[i] = round_to(fused_dtype, want[i] + want[i]);
            const std::string what = op.name + " " + dtype_name(dtype) + " " + layout_name(layout) + " " +
                                     std::to_string(rows) + "x" + std::to_string(cols) + " " + mode.name();
            combinations += run_everywhere(plain_f, args, [&](const std::vector<Tensor>& o, const std::string& where) {
              ASSERT_EQ(o[0].shape(), shape) << what;
              expect_close(o[0], want, out, what + " " + where);
            });
            combinations += run_everywhere(fused_f, args, [&](const std::vector<Tensor>& o, const std::string& where) {
              expect_close(o[0], doubled, fused_dtype, what + " fused " + where);
            });
            if (two_outputs_f)
              combinations += run_everywhere(*two_outputs_f, args, [&](const std::vector<Tensor>& o, const std::string& where) {
                expect_close(o[0], doubled, fused_dtype, what + " fused, two outputs " + where);
                expect_close(o[1], want, out, what + " fused, two outputs " + where);
              });
          }
        }
      }
    }
  std::cout << "elementwise sweep: " << combinations << " combinations run, " << refused
            << " op/dtype pairs refused when built\n";
  EXPECT_GT(combinations, 10000);
}

namespace {

struct Reduction {
  std::string name;
  std::function<Var(const Var&, Axes, bool)> build;
};

// The reference of a reduction over `axes` of a row-major (rows x cols) array.
std::vector<double> reduce_reference(const std::string& name, const std::vector<double>& x, int64_t rows, int64_t cols,
                                     const std::vector<int64_t>& axes) {
  const bool over_rows = axes.empty() || std::find(axes.begin(), axes.end(), 0) != axes.end();
  const bool over_cols = axes.empty() || std::find(axes.begin(), axes.end(), 1) != axes.end();
  const int64_t out_r = over_rows ? 1 : rows, out_c = over_cols ? 1 : cols;
  std::vector<std::vector<double>> groups(static_cast<size_t>(out_r * out_c));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) groups[(over_rows ? 0 : r) * out_c + (over_cols ? 0 : c)].push_back(x[r * cols + c]);
  std::vector<double> out;
  for (const auto& g : groups) {
    double v = 0;
    if (name == "sum" || name == "mean") {
      for (double e : g) v += e;
      if (name == "mean") v /= static_cast<double>(g.size());
    } else if (name == "prod") {
      v = 1;
      for (double e : g) v *= e;
    } else if (name == "max" || name == "min") {
      v = g[0];
      for (double e : g) v = name == "max" ? std::max(v, e) : std::min(v, e);
    } else if (name == "var" || name == "std" || name == "var ddof 1") {
      double mean = 0, squares = 0;
      for (double e : g) mean += e;
      mean /= static_cast<double>(g.size());
      for (double e : g) squares += (e - mean) * (e - mean);
      v = squares / static_cast<double>(g.size() - (name == "var ddof 1" ? 1 : 0));
      if (name == "std") v = std::sqrt(v);
    } else {  // argmax (argmin): the first maximum (minimum)
      size_t best = 0;
      for (size_t i = 1; i < g.size(); ++i)
        if (name == "argmin" ? g[i] < g[best] : g[i] > g[best]) best = i;
      v = static_cast<double>(best);
    }
    out.push_back(v);
  }
  return out;
}

DType reduction_dtype(const std::string& name, DType in) {
  if (name == "argmax" || name == "argmin") return i64;
  if (name == "mean" || name == "var" || name == "std" || name == "var ddof 1") return is_float(in) ? in : f64;
  if (name == "sum" || name == "prod") return is_float(in) ? in : i64;
  return in;  // max, min: NumPy keeps the dtype, booleans included (any / all)
}

}  // namespace

TEST(OracleSweep, ReductionsEveryDtypeAxisLayoutModeThreadCountAndInstructionSet) {
  const std::vector<Reduction> reductions{
      {"sum", [](const Var& x, Axes a, bool k) { return sum(x, a, k); }},
      {"mean", [](const Var& x, Axes a, bool k) { return mean(x, a, k); }},
      {"max", [](const Var& x, Axes a, bool k) { return max(x, a, k); }},
      {"min", [](const Var& x, Axes a, bool k) { return min(x, a, k); }},
      {"prod", [](const Var& x, Axes a, bool k) { return prod(x, a, k); }},
      {"argmax", [](const Var& x, Axes a, bool k) { return argmax(x, a, k); }},
      {"argmin", [](const Var& x, Axes a, bool k) { return argmin(x, a, k); }},
      {"var", [](const Var& x, Axes a, bool k) { return var(x, a, k); }},
      {"var ddof 1", [](const Var& x, Axes a, bool k) { return var(x, a, k, 1); }},
      {"std", [](const Var& x, Axes a, bool k) { return kiln::std(x, a, k); }}};
  int combinations = 0;
  for (const Reduction& red : reductions)
    for (DType dtype : kDtypes)
      for (const Axes& axes : std::vector<Axes>{{}, {0}, {1}, {-1}, {0, 1}})
        for (bool keep : {false, true}) {
          if ((red.name == "argmax" || red.name == "argmin") && axes.size() == 2) continue;  // one axis or all
          Var x = matrix("x", dtype);
          Var y = red.build(x, axes, keep);
          const DType out = reduction_dtype(red.name, dtype);
          ASSERT_EQ(y.dtype(), out) << red.name << " " << dtype_name(dtype);
          std::vector<int64_t> norm;
          for (int64_t a : axes) norm.push_back(a < 0 ? a + 2 : a);
          for (const Mode& mode : sweep_modes()) {
            Function f = function({x}, {y}, {.mode = mode});
            for (int64_t rows : {3, 300}) {
              const int64_t cols = rows == 3 ? 5 : 290;
              if (rows > 3 && mode.name() == "debug") continue;
              for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
                // prod of many values overflows: the large case keeps prod's values near 1.
                Tensor v = red.name == "prod" && rows > 3 && is_float(dtype)
                               ? random_tensor({rows, cols}, dtype, 0.999, 1.001, 3)
                               : values_of({rows, cols}, dtype, static_cast<uint64_t>(rows + cols), false);
                // A long product overflows integers and loses f32's digits: not the point here.
                if (red.name == "prod" && rows > 3 && dtype != f64) continue;
                const std::vector<double> want_raw = reduce_reference(red.name, v.to_vector<double>(), rows, cols, norm);
                std::vector<double> want;
                for (double w : want_raw) want.push_back(round_to(out, w));
                const std::string what = red.name + " " + dtype_name(dtype) + " axes " + std::to_string(axes.size()) +
                                         (keep ? " keepdims " : " ") + layout_name(layout) + " " + std::to_string(rows) + " " + mode.name();
                const double tol_scale = rows > 3 ? 1e-9 : 0;  // large sums of f64 round differently (pairwise)
                combinations += run_everywhere(f, {laid_out(v, layout)}, [&](const std::vector<Tensor>& o, const std::string& where) {
                  const auto g = o[0].to_vector<double>();
                  ASSERT_EQ(g.size(), want.size()) << what;
                  for (size_t i = 0; i < g.size(); ++i) {
                    const double tol = (out == f32 ? 2e-5 : 1e-12 + tol_scale) * std::max(1.0, std::fabs(want[i]));
                    ASSERT_NEAR(g[i], want[i], tol) << what << " " << where << ", element " << i;
                  }
                });
              }
            }
          }
        }
  std::cout << "reduction sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 3000);
}

TEST(OracleSweep, MatrixProductsEveryShapeLayoutDtypeModeThreadCountAndInstructionSet) {
  int combinations = 0;
  auto naive = [](const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n) {
    std::vector<double> c(static_cast<size_t>(m * n), 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t p = 0; p < k; ++p)
        for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
    return c;
  };
  for (DType dtype : {f32, f64, i32})
    for (auto [m, k, n] : std::vector<std::array<int64_t, 3>>{{1, 7, 5}, {6, 1, 4}, {5, 9, 1}, {33, 70, 17}, {120, 300, 64}})
      for (int form = 0; form < 3; ++form) {  // dot, c + dot (gemm under fast_run), c - 0.5 * dot with c broadcast
        Var a = matrix("a", dtype), b = matrix("b", dtype), c = matrix("c", dtype);
        Var y = form == 0 ? dot(a, b) : form == 1 ? c + dot(a, b) : c - 0.5 * dot(a, b);
        const DType out = y.dtype();
        for (const Mode& mode : sweep_modes()) {
          if (m > 33 && mode.name() == "debug") continue;
          Function f = function({a, b, c}, {y}, {.mode = mode, .allow_unused_inputs = true});
          for (Layout la : {Layout::contiguous, Layout::transposed, Layout::strided})
            for (Layout lb : {Layout::contiguous, Layout::transposed}) {
              Tensor av = values_of({m, k}, dtype, 5, false), bv = values_of({k, n}, dtype, 6, false);
              Tensor cv = form == 2 ? values_of({1, n}, dtype, 7, false) : values_of({m, n}, dtype, 7, false);
              std::vector<double> want = naive(av.to_vector<double>(), bv.to_vector<double>(), m, k, n);
              const auto cw = cv.to_vector<double>();
              for (int64_t i = 0; i < m; ++i)
                for (int64_t j = 0; j < n; ++j) {
                  double& w = want[i * n + j];
                  w = form == 0 ? w : form == 1 ? cw[i * n + j] + w : cw[j] - 0.5 * w;
                  w = round_to(out, w);
                }
              const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(m) + "x" + std::to_string(k) +
                                       "x" + std::to_string(n) + " form " + std::to_string(form) + " " + layout_name(la) + "/" +
                                       layout_name(lb) + " " + mode.name();
              combinations += run_everywhere(f, {laid_out(av, la), laid_out(bv, lb), cv}, [&](const std::vector<Tensor>& o, const std::string& where) {
                const auto g = o[0].to_vector<double>();
                ASSERT_EQ(g.size(), want.size()) << what;
                for (size_t i = 0; i < g.size(); ++i)
                  ASSERT_NEAR(g[i], want[i], (out == f32 ? 1e-4 : 1e-10) * std::max(1.0, std::fabs(want[i]))) << what << " " << where;
              });
            }
        }
      }
  // Vectors and batches: dot of 1-D operands and matmul with broadcast batch axes.
  Var v = vector("v"), w = vector("w"), m3 = tensor3("m3"), b3 = tensor3("b3");
  Function g = function({v, w, m3, b3}, {dot(v, w), dot(v, reshape(w, {6, 1})), matmul(m3, b3)});
  const Tensor vv = Tensor::from({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {6}), ww = Tensor::from({1.f, 0.f, -1.f, 2.f, 0.5f, 1.f}, {6});
  const Tensor mm = random_tensor({2, 3, 4}, f32, -1, 1, 1), bb = random_tensor({1, 4, 2}, f32, -1, 1, 2);
  combinations += run_everywhere(g, {vv.view({6}, {1}, 0), ww, mm, bb}, [&](const std::vector<Tensor>& o, const std::string& where) {
    expect_values(o[0], {1 - 3 + 8 + 2.5 + 6}, 1e-6);
    expect_values(o[1], {1 - 3 + 8 + 2.5 + 6}, 1e-6);
    EXPECT_EQ(o[2].shape(), (Shape{2, 3, 2})) << where;
    const auto m_ = mm.to_vector<double>(), b_ = bb.to_vector<double>(), got = o[2].to_vector<double>();
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j) {
          double s = 0;
          for (int64_t p = 0; p < 4; ++p) s += m_[(t * 3 + i) * 4 + p] * b_[p * 2 + j];
          EXPECT_NEAR(got[(t * 3 + i) * 2 + j], s, 1e-5) << where;
        }
  });
  std::cout << "matrix product sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 1000);
}

TEST(OracleSweep, ShapeAndIndexingOpsEveryDtypeLayoutAndMode) {
  int combinations = 0;
  for (DType dtype : kDtypes) {
    Var x = matrix("x", dtype), y = matrix("y", dtype);
    const int64_t r = 4, c = 6;
    const Tensor xv = values_of({r, c}, dtype, 11, false), yv = values_of({r, c}, dtype, 12, false);
    const auto X = xv.to_vector<double>(), Y = yv.to_vector<double>();
    auto at = [&](const std::vector<double>& m, int64_t i, int64_t j) { return m[i * c + j]; };
    std::vector<std::pair<Var, std::vector<double>>> cases;
    {  // transpose, dimshuffle, reshape, flatten
      std::vector<double> t;
      for (int64_t j = 0; j < c; ++j)
        for (int64_t i = 0; i < r; ++i) t.push_back(at(X, i, j));
      cases.push_back({transpose(x), t});
      cases.push_back({dimshuffle(dimshuffle(x, {1, -1, 0}), {0, 2}), t});
      cases.push_back({reshape(x, {3, 8}), X});
      cases.push_back({flatten(transpose(x)), t});
    }
    {  // concatenate and stack
      std::vector<double> cat = X;
      cat.insert(cat.end(), Y.begin(), Y.end());
      cases.push_back({concatenate({x, y}, 0), cat});
      cases.push_back({stack({x, y}), cat});
      std::vector<double> side;
      for (int64_t i = 0; i < r; ++i) {
        for (int64_t j = 0; j < c; ++j) side.push_back(at(X, i, j));
        for (int64_t j = 0; j < c; ++j) side.push_back(at(Y, i, j));
      }
      cases.push_back({concatenate({x, y}, 1), side});
    }
    {  // slices with negative steps, x[i], take with negative indices
      std::vector<double> s, row, taken;
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = c - 1; j >= 1; j -= 2) s.push_back(at(X, i, j));
      for (int64_t j = 0; j < c; ++j) row.push_back(at(X, r - 2, j));
      for (int64_t i : {3, 0, 3})
        for (int64_t j = 0; j < c; ++j) taken.push_back(at(X, i, j));
      cases.push_back({slice(x, 1, std::nullopt, std::nullopt, -2), s});
      cases.push_back({x[-2], row});
      cases.push_back({take(x, constant(Tensor::from(std::vector<int64_t>{-1, 0, 3}))), taken});
    }
    if (dtype != b8) {  // set and inc a slice (b8 cannot be incremented)
      std::vector<double> set = X, inc = X;
      for (int64_t j = 0; j < c; ++j) {
        set[1 * c + j] = round_to(dtype, at(Y, 0, j));
        inc[1 * c + j] = round_to(dtype, at(X, 1, j) + at(Y, 0, j));
      }
      cases.push_back({set_subtensor(slice(x, 0, 1, 2), slice(y, 0, 0, 1)), set});
      cases.push_back({inc_subtensor(slice(x, 0, 1, 2), slice(y, 0, 0, 1)), inc});
      std::vector<double> taken_inc = X;
      for (int64_t j = 0; j < c; ++j) taken_inc[2 * c + j] = round_to(dtype, at(X, 2, j) + 2 * at(Y, 0, j));
      cases.push_back({inc_subtensor(take(x, constant(Tensor::from(std::vector<int64_t>{2, -2}))), slice(y, 0, 0, 2) * 0 + slice(y, 0, 0, 1)),
                       taken_inc});
    }
    {  // cumsum (integers and bools sum as i64, added in order in the result's dtype)
      const DType sum_dtype = is_float(dtype) ? dtype : i64;
      std::vector<double> along_rows = X, along_cols = X, flat = X;
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j) {
          if (i > 0) along_rows[i * c + j] = round_to(sum_dtype, along_rows[(i - 1) * c + j] + X[i * c + j]);
          if (j > 0) along_cols[i * c + j] = round_to(sum_dtype, along_cols[i * c + j - 1] + X[i * c + j]);
          if (i * c + j > 0) flat[i * c + j] = round_to(sum_dtype, flat[i * c + j - 1] + X[i * c + j]);
        }
      cases.push_back({cumsum(x, 0), along_rows});
      cases.push_back({cumsum(x, -1), along_cols});
      cases.push_back({cumsum(x), flat});
    }
    {  // tile, repeat, pad
      std::vector<double> tiled, repeated, padded;
      for (int rep = 0; rep < 2; ++rep)
        for (int64_t i = 0; i < r; ++i)
          for (int rep2 = 0; rep2 < 2; ++rep2)
            for (int64_t j = 0; j < c; ++j) tiled.push_back(at(X, i, j));
      for (int64_t i = 0; i < r; ++i)
        for (int64_t j = 0; j < c; ++j)
          for (int k = 0; k < 3; ++k) repeated.push_back(at(X, i, j));
      const double value = round_to(dtype, 1.0);
      for (int64_t i = -1; i < r + 1; ++i)
        for (int64_t j = -2; j < c; ++j) padded.push_back(i < 0 || i >= r || j < 0 ? value : at(X, i, j));
      cases.push_back({tile(x, {2, 2}), tiled});
      cases.push_back({repeat(x, 3, -1), repeated});
      cases.push_back({pad(x, {{1, 1}, {2, 0}}, 1.0), padded});
    }
    {  // sort and argsort along each axis (stable: ties keep their order)
      std::vector<double> sorted_rows(static_cast<size_t>(r * c)), order_rows(static_cast<size_t>(r * c));
      std::vector<double> sorted_cols(static_cast<size_t>(r * c));
      for (int64_t i = 0; i < r; ++i) {
        std::vector<int64_t> order(static_cast<size_t>(c));
        std::iota(order.begin(), order.end(), int64_t{0});
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return at(X, i, a) < at(X, i, b); });
        for (int64_t j = 0; j < c; ++j) {
          sorted_rows[i * c + j] = at(X, i, order[j]);
          order_rows[i * c + j] = static_cast<double>(order[j]);
        }
      }
      for (int64_t j = 0; j < c; ++j) {
        std::vector<double> column;
        for (int64_t i = 0; i < r; ++i) column.push_back(at(X, i, j));
        std::stable_sort(column.begin(), column.end());
        for (int64_t i = 0; i < r; ++i) sorted_cols[i * c + j] = column[i];
      }
      cases.push_back({sort(x), sorted_rows});
      cases.push_back({argsort(x, 1), order_rows});
      cases.push_back({sort(x, 0), sorted_cols});
    }
    if (is_integer(dtype)) {  // one_hot of the values shifted into [0, 11), negative ones counting from the end
      std::vector<double> hot;
      for (double v : X)
        for (int64_t k = 0; k < 11; ++k) hot.push_back(k == (static_cast<int64_t>(v) + 11) % 11 ? 1.0 : 0.0);
      cases.push_back({one_hot(x, 11, f64), hot});
    }
    cases.push_back({zeros_like(x), std::vector<double>(static_cast<size_t>(r * c), 0.0)});
    cases.push_back({ones_like(x), std::vector<double>(static_cast<size_t>(r * c), 1.0)});
    cases.push_back({shape_of(x), {4, 6}});
    for (const auto& [expr, want] : cases)
      for (const Mode& mode : sweep_modes()) {
        Function f = function({x, y}, {expr}, {.mode = mode, .allow_unused_inputs = true});
        for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
          const std::string what = std::string(dtype_name(dtype)) + " " + expr.get()->label() + " " + layout_name(layout) + " " + mode.name();
          combinations += run_everywhere(f, {laid_out(xv, layout), laid_out(yv, layout)}, [&](const std::vector<Tensor>& o, const std::string& where) {
            const auto g = o[0].to_vector<double>();
            ASSERT_EQ(g.size(), want.size()) << what;
            for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], want[i]) << what << " " << where << ", element " << i;
          });
        }
      }
  }
  std::cout << "shape and indexing sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 2000);
}

TEST(OracleSweep, NeuralNetworkOpsEveryFloatDtypeAxisLayoutModeThreadCountAndInstructionSet) {
  int combinations = 0;
  for (DType dtype : {f32, f64})
    for (int64_t cols : {5, 20000}) {  // a long row runs on every thread (issue 9, item 16)
      const int64_t rows = 3;
      Var x = matrix("x", dtype), t = matrix("t", dtype), labels = vector("labels", i32);
      const Tensor xv = random_tensor({rows, cols}, dtype, -30, 30, 21);
      Tensor tv = random_tensor({rows, cols}, dtype, 0, 1, 22);
      const Tensor lv = Tensor::from(std::vector<int32_t>{0, static_cast<int32_t>(cols - 1), 2});
      const auto X = xv.to_vector<double>(), T = tv.to_vector<double>();
      std::vector<double> softmax1, log_softmax1, softmax0, lse1, ce_labels, ce_dist, bce;
      for (int64_t i = 0; i < rows; ++i) {
        double mx = -INFINITY, s = 0, d = 0;
        for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, X[i * cols + j]);
        for (int64_t j = 0; j < cols; ++j) s += std::exp(X[i * cols + j] - mx);
        for (int64_t j = 0; j < cols; ++j) {
          softmax1.push_back(std::exp(X[i * cols + j] - mx) / s);
          log_softmax1.push_back(X[i * cols + j] - mx - std::log(s));
          d -= T[i * cols + j] * log_softmax1.back();
        }
        lse1.push_back(mx + std::log(s));
        const int64_t label = lv.to_vector<int64_t>()[static_cast<size_t>(i)];
        ce_labels.push_back(mx + std::log(s) - X[i * cols + label]);
        ce_dist.push_back(d);
      }
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < cols; ++j) {
          double mx = -INFINITY, s = 0;
          for (int64_t q = 0; q < rows; ++q) mx = std::max(mx, X[q * cols + j]);
          for (int64_t q = 0; q < rows; ++q) s += std::exp(X[q * cols + j] - mx);
          softmax0.push_back(std::exp(X[i * cols + j] - mx) / s);
        }
      for (size_t i = 0; i < X.size(); ++i) bce.push_back(T[i] * stable_softplus(-X[i]) + (1 - T[i]) * stable_softplus(X[i]));
      const std::vector<std::pair<Var, std::vector<double>>> cases{
          {softmax(x), softmax1}, {log_softmax(x), log_softmax1}, {softmax(x, 0), softmax0},
          {logsumexp(x, {1}), lse1}, {categorical_crossentropy(softmax(x), labels), ce_labels},
          {categorical_crossentropy(softmax(x), t), ce_dist}, {binary_crossentropy(sigmoid(x), t), bce}};
      for (const auto& [expr, want] : cases)
        for (const Mode& mode : sweep_modes()) {
          if (cols > 5 && mode.name() == "debug") continue;
          Function f = function({x, t, labels}, {expr}, {.mode = mode, .allow_unused_inputs = true});
          for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::strided}) {
            if (cols > 5 && layout == Layout::strided) continue;
            const std::string what = std::string(dtype_name(dtype)) + " " + expr.get()->owner->op->name() + " " +
                                     std::to_string(cols) + " " + layout_name(layout) + " " + mode.name();
            combinations += run_everywhere(f, {laid_out(xv, layout), tv, lv}, [&](const std::vector<Tensor>& o, const std::string& where) {
              const auto g = o[0].to_vector<double>();
              ASSERT_EQ(g.size(), want.size()) << what;
              for (size_t i = 0; i < g.size(); ++i)
                ASSERT_NEAR(g[i], want[i], (dtype == f32 ? 2e-5 : 1e-11) * std::max(1.0, std::fabs(want[i])))
                    << what << " " << where << ", element " << i;
            });
          }
        }
    }
  std::cout << "neural-network sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 300);
}

TEST(OracleSweep, ConvolutionsEveryFloatDtypeLayoutModeThreadCountAndInstructionSet) {
  int combinations = 0;
  struct Case {
    Shape x, w;
    Conv2dOptions options;
    int64_t pad_top, pad_left, out_h, out_w;
  };
  const std::vector<Case> cases{{{3, 2, 9, 8}, {4, 2, 3, 3}, {}, 0, 0, 7, 6},
                                {{2, 4, 7, 7}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding = Padding::same, .groups = 2}, 1, 0, 4, 7},
                                {{1, 3, 8, 6}, {2, 3, 2, 3}, {.padding = Padding::full, .dilation = {2, 1}}, 2, 2, 10, 8}};
  for (DType dtype : {f32, f64})
    for (const Case& c : cases) {
      Var x = tensor4("x", dtype), w = tensor4("w", dtype);
      Var y = conv2d(x, w, c.options) * 2.0;
      for (const Mode& mode : sweep_modes()) {
        Function f = function({x, w}, {y}, {.mode = mode});
        const Tensor xv = values_of(c.x, dtype, 41, false), wv = values_of(c.w, dtype, 42, false);
        std::vector<double> want = direct_conv(xv, wv, c.options.stride, c.options.dilation, c.options.groups, c.pad_top,
                                               c.pad_left, c.out_h, c.out_w);
        for (double& v : want) v *= 2;
        // The input contiguous, and as a view of an N x H x W x C array (channels last).
        Var nhwc = tensor4("nhwc", dtype);
        const Tensor channels_last = eval1({nhwc}, dimshuffle(nhwc, {0, 2, 3, 1}) + 0.0, {xv});
        const Tensor xs = channels_last.view(xv.shape(), {channels_last.strides()[0], 1, channels_last.strides()[1], channels_last.strides()[2]}, 0);
        for (const Tensor& xa : {xv, xs}) {
          const std::string what = std::string(dtype_name(dtype)) + " " + shape_str(c.x) + " * " + shape_str(c.w) + " " + mode.name() +
                                   (xa.is_contiguous() ? " contiguous" : " channels last");
          combinations += run_everywhere(f, {xa, wv}, [&](const std::vector<Tensor>& o, const std::string& where) {
            const auto got = o[0].to_vector<double>();
            ASSERT_EQ(got.size(), want.size()) << what;
            for (size_t i = 0; i < got.size(); ++i)
              ASSERT_NEAR(got[i], want[i], (dtype == f32 ? 1e-5 : 1e-12) * std::max(1.0, std::fabs(want[i]))) << what << " " << where;
          });
        }
      }
    }
  std::cout << "convolution sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 100);
}

TEST(OracleSweep, PoolingEveryFloatDtypeOptionLayoutModeThreadCountAndInstructionSet) {
  int combinations = 0;
  const std::vector<Pool2dOptions> options{
      {},
      {.window = {3, 3}, .stride = std::array<int64_t, 2>{2, 2}, .padding = {1, 1}, .ignore_border = false, .count_include_pad = false}};
  for (DType dtype : {f32, f64})
    for (const Shape& shape : {Shape{2, 3, 6, 7}, Shape{4, 20, 24, 24}})  // the larger one runs on every thread
      for (bool channels_last : {false, true}) {
        const int64_t N = shape[0], C = shape[1], H = shape[2], W = shape[3];
        const Tensor xv = random_tensor(shape, dtype, -3, 3, 31);
        // Channels last: an N x H x W x C argument, pooled through a dimshuffled view of it.
        const Tensor argument = channels_last ? xv.view({N, H, W, C}, {C * H * W, W, 1, H * W}, 0).clone() : xv;
        Var x = tensor4("x", dtype);
        const Var input = channels_last ? dimshuffle(x, {0, 3, 1, 2}) : x;
        for (const Pool2dOptions& o : options)
          for (bool max : {true, false}) {
            const std::vector<double> want = reference_pool(max, xv.to_vector<double>(), shape, o).values;
            const Var expr = max ? max_pool2d(input, o) : avg_pool2d(input, o);
            for (const Mode& mode : sweep_modes()) {
              if (H > 8 && mode.name() == "debug") continue;
              const Function f = function({x}, {expr}, {.mode = mode});
              const std::string what = std::string(dtype_name(dtype)) + " " + expr.get()->owner->op->name() + " " + shape_str(shape) +
                                       (channels_last ? " channels last " : " contiguous ") + mode.name();
              combinations += run_everywhere(f, {argument}, [&](const std::vector<Tensor>& out, const std::string& where) {
                expect_close(out[0], want, dtype, what + " " + where);
              });
            }
          }
      }
  std::cout << "pooling sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 300);
}

TEST(OracleSweep, IfElseEveryDtypeBranchAndMode) {
  int combinations = 0;
  for (DType dtype : kDtypes) {
    Var c = scalar("c", b8), x = matrix("x", dtype), y = matrix("y", dtype);
    const Tensor xv = values_of({3, 4}, dtype, 31, false), yv = values_of({3, 4}, dtype, 32, false);
    for (const Mode& mode : sweep_modes()) {
      Function f = function({c, x, y}, {ifelse(c, x, y), ifelse(c, transpose(y), transpose(x))}, {.mode = mode});
      for (bool cond : {true, false})
        combinations += run_everywhere(f, {Tensor::scalar(cond), xv, laid_out(yv, Layout::transposed)},
                                       [&](const std::vector<Tensor>& o, const std::string& where) {
          EXPECT_EQ(o[0].to_vector<double>(), (cond ? xv : yv).to_vector<double>()) << dtype_name(dtype) << " " << where;
          EXPECT_EQ(o[1].to_vector<double>(), transpose_values(cond ? yv : xv)) << dtype_name(dtype) << " " << where;
        });
    }
  }
  std::cout << "ifelse sweep: " << combinations << " combinations run\n";
  EXPECT_GT(combinations, 100);
}

namespace {
struct GradientCase {
  std::string name;
  std::function<Var(std::vector<Var>)> fn;
  std::vector<Tensor> at;
  VerifyOptions options = {};  // f32 inside an f64 function: a step above f32's rounding
};

Tensor away_from_zero(const Shape& shape, uint64_t seed) {  // |x| in [0.5, 2]: no kink, no pole
  std::vector<double> v = random_tensor(shape, f64, 0.5, 2, seed).to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) v[i] *= (i % 2) ? -1 : 1;
  return Tensor::from(v, shape);
}
}  // namespace

TEST(OracleSweep, EveryDifferentiableOpPassesVerifyGradAndVerifyRopInF64) {
  const Tensor m = random_tensor({3, 4}, f64, -2, 2, 1), m2 = random_tensor({3, 4}, f64, -2, 2, 2);
  const Tensor row = random_tensor({1, 4}, f64, -2, 2, 3), pos = random_tensor({3, 4}, f64, 0.5, 3, 4);
  const Tensor nz = away_from_zero({3, 4}, 5), vec = random_tensor({4}, f64, -2, 2, 6);
  const Tensor big = Tensor::from({-1e4, -3e3, -1e3, 0.5, 1e3, 3e3, 1e4, -0.25, 2e3, -2e3, 7e3, -7e3}, {3, 4});
  const Tensor bigger_rows = Tensor::from({1e4, -1e4, 0.0, 5e3, 3e3, -3e3, 1e3, 2e3, -1e3, -5e3, 0.5, 9e3}, {3, 4});
  const Tensor dist = random_tensor({3, 4}, f64, 0, 1, 7), prob = random_tensor({3, 4}, f64, 0.05, 0.95, 8);
  const Tensor image = random_tensor({2, 4, 5, 6}, f64, -1, 1, 9), filters = random_tensor({3, 4, 3, 2}, f64, -1, 1, 10);
  const Tensor filters_of_groups = random_tensor({4, 2, 2, 3}, f64, -1, 1, 11);
  // Sparse matrices of a fixed pattern whose data is the variable (their structured gradients).
  auto masked = [](const Tensor& t) {
    std::vector<double> v = t.to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i)
      if (i % 3 == 1) v[i] = 0;
    return Tensor::from(v, t.shape());
  };
  const SparseTensor csr_value = sparse_from_dense(masked(m), SparseFormat::csr), csc_value = sparse_from_dense(masked(m2), SparseFormat::csc);
  const SparseTensor csr_square = sparse_from_dense(masked(random_tensor({4, 4}, f64, -2, 2, 12)), SparseFormat::csr);
  const Tensor row_major_4x3 = random_tensor({4, 3}, f64, -2, 2, 13), two_by_3 = random_tensor({2, 3}, f64, -2, 2, 14);
  const Tensor four_by_4 = random_tensor({4, 4}, f64, -2, 2, 15);
  auto on = [](const Var& data, const SparseTensor& value) {
    return SparseVar(value.format(), data, constant(value.indices()), constant(value.indptr()),
                     constant(Tensor::from(std::vector<int64_t>{value.shape()[0], value.shape()[1]})));
  };
  const Var labels = constant(Tensor::from(std::vector<int64_t>{0, 3, 1}));
  const Tensor images = distinct_values({2, 2, 5, 4}, 10);  // distinct window maxima: finite differences keep them
  using V = std::vector<Var>;
  const std::vector<GradientCase> cases{
      {"neg", [](V v) { return -v[0]; }, {m}},
      {"exp", [](V v) { return exp(v[0]); }, {m}},
      {"log", [](V v) { return log(v[0]); }, {pos}},
      {"log1p", [](V v) { return log1p(v[0]); }, {pos}},
      {"expm1", [](V v) { return expm1(v[0]); }, {m}},
      {"sqrt", [](V v) { return sqrt(v[0]); }, {pos}},
      {"sqr", [](V v) { return sqr(v[0]); }, {m}},
      {"tanh", [](V v) { return tanh(v[0]); }, {m}},
      {"sigmoid", [](V v) { return sigmoid(v[0]); }, {m}},
      {"softplus", [](V v) { return softplus(v[0]); }, {m}},
      {"relu", [](V v) { return relu(v[0]); }, {nz}},
      {"abs", [](V v) { return abs(v[0]); }, {nz}},
      {"sin", [](V v) { return sin(v[0]); }, {m}},
      {"cos", [](V v) { return cos(v[0]); }, {m}},
      {"add broadcast", [](V v) { return v[0] + v[1]; }, {m, row}},
      {"sub broadcast", [](V v) { return v[0] - v[1]; }, {m, row}},
      {"mul broadcast", [](V v) { return v[0] * v[1]; }, {m, row}},
      {"div", [](V v) { return v[0] / v[1]; }, {m, nz}},
      {"pow", [](V v) { return pow(v[0], v[1]); }, {pos, m}},
      {"maximum", [](V v) { return maximum(v[0], v[1]); }, {m, m2}},
      {"minimum", [](V v) { return minimum(v[0], v[1]); }, {m, m2}},
      {"where", [](V v) { return where(v[0] > v[1], v[0], v[1] * 2.0); }, {m, m2}},
      {"square", [](V v) { return square(v[0]); }, {m}},
      {"floor", [](V v) { return floor(v[0]) * v[0]; }, {m}},
      {"ceil", [](V v) { return ceil(v[0]) * v[0]; }, {m}},
      {"round", [](V v) { return round(v[0]) * v[0]; }, {m}},
      {"erf", [](V v) { return erf(v[0]); }, {m}},
      {"mod", [](V v) { return v[0] % v[1]; }, {m, nz}},
      {"clip numbers", [](V v) { return clip(v[0], -1.0, 1.0); }, {m}},
      {"clip values", [](V v) { return clip(v[0], v[1], v[1] + 1.0); }, {m, m2}},
      {"cast through f32", [](V v) { return cast(cast(v[0], f32) * 2.0f, f64); }, {m}, {.eps = 1e-3, .abs_tol = 1e-3, .rel_tol = 1e-3}},
      {"sum", [](V v) { return sum(v[0], {1}); }, {m}},
      {"mean", [](V v) { return mean(v[0], {0}, true); }, {m}},
      {"max", [](V v) { return max(v[0], {1}); }, {m}},
      {"min", [](V v) { return min(v[0]); }, {m}},
      {"prod", [](V v) { return prod(v[0], {1}); }, {nz}},
      {"prod with zeros", [](V v) { return prod(v[0], {1}); }, {Tensor::from({0.0, 1.5, -2.0, 0.5, 0.0, 0.0, 3.0, 1.0, 2.0, -1.0, 0.5, 0.75}, {3, 4})}},
      {"logsumexp", [](V v) { return logsumexp(v[0], {1}); }, {m}},
      {"var", [](V v) { return var(v[0], {1}); }, {m}},
      {"var ddof 1 all", [](V v) { return var(v[0], {}, false, 1); }, {m}},
      {"std", [](V v) { return kiln::std(v[0], {0}, true); }, {m}},
      {"cumsum", [](V v) { return cumsum(v[0], 1); }, {m}},
      {"cumsum axis 0", [](V v) { return cumsum(v[0], 0); }, {m}},
      {"cumsum flattened", [](V v) { return cumsum(v[0]); }, {m}},
      {"tile", [](V v) { return tile(v[0], {2, 1, 3}); }, {m}},
      {"repeat", [](V v) { return repeat(v[0], 3, 1); }, {m}},
      {"repeat flattened", [](V v) { return repeat(v[0], 2); }, {m}},
      {"pad", [](V v) { return pad(v[0], {{1, 2}, {0, 3}}, 0.5); }, {m}},
      {"sort", [](V v) { return sort(v[0]); }, {m}},
      {"sort axis 0", [](V v) { return sort(v[0], 0); }, {m}},
      {"dot matrix", [](V v) { return dot(v[0], transpose(v[1])); }, {m, m2}},
      {"dot matrix vector", [](V v) { return dot(v[0], v[1]); }, {m, vec}},
      {"dot vector vector", [](V v) { return dot(v[0], v[0] * 0.5); }, {vec}},
      {"matmul batched", [](V v) { return matmul(reshape(v[0], {3, 2, 2}), reshape(v[1], {3, 2, 2})); }, {m, m2}},
      {"conv2d", [](V v) { return conv2d(v[0], v[1]); }, {image, filters}},
      {"conv2d same stride groups dilation", [](V v) { return conv2d(v[0], v[1], {.stride = {2, 1}, .padding = Padding::same, .dilation = {1, 2}, .groups = 2}); },
       {image, filters_of_groups}},
      {"conv2d full", [](V v) { return tanh(conv2d(v[0], v[1], {.padding = Padding::full})); }, {image, filters}},
      {"sparse dot dense", [=](V v) { return dot(on(v[0], csr_value), v[1]); }, {csr_value.data(), row_major_4x3}},
      {"dense dot sparse csc", [=](V v) { return dot(v[1], on(v[0], csc_value)); }, {csc_value.data(), two_by_3}},
      {"sparse dot sparse", [=](V v) { return dense(dot(on(v[0], csr_value), on(v[1], csr_square))); }, {csr_value.data(), csr_square.data()}},
      {"sparse + dense", [=](V v) { return tanh(on(v[0], csc_value) + v[1]); }, {csc_value.data(), m}},
      {"sampling_dot", [=](V v) { return dense(sampling_dot(v[1], v[2], on(v[0], csr_value))); }, {csr_value.data(), m, four_by_4}},
      {"structured exp", [=](V v) { return dense(structured(on(v[0], csr_value), exp)); }, {csr_value.data()}},
      {"sparse sums", [=](V v) { return sum(on(v[0], csc_value), 0) * sum(on(v[0], csc_value), 1)[1]; }, {csc_value.data()}},
      {"transpose", [](V v) { return transpose(v[0]) * 2.0; }, {m}},
      {"dimshuffle", [](V v) { return dimshuffle(v[0], {1, -1, 0}) * 2.0; }, {m}},
      {"reshape", [](V v) { return reshape(v[0], {2, 6}) * 3.0; }, {m}},
      {"flatten", [](V v) { return flatten(v[0]) * v[0][0][0]; }, {m}},
      {"concatenate", [](V v) { return concatenate({v[0], v[1] * 2.0}, 1); }, {m, m2}},
      {"stack", [](V v) { return stack({v[0], v[1]}) * 2.0; }, {m, m2}},
      {"slice", [](V v) { return slice(v[0], 1, 3, 0, -2) * 2.0; }, {m}},
      {"index", [](V v) { return v[0][-1] * 2.0; }, {m}},
      {"take", [](V v) { return take(v[0], constant(Tensor::from(std::vector<int64_t>{2, 0, 2}))) * 2.0; }, {m}},
      {"set_subtensor", [](V v) { return set_subtensor(slice(v[0], 0, 1, 3), v[1][0] * 2.0) * 1.5; }, {m, m2}},
      {"inc_subtensor take", [](V v) { return inc_subtensor(take(v[0], constant(Tensor::from(std::vector<int64_t>{1, 1}))), slice(v[1], 0, 0, 2)); }, {m, m2}},
      {"softmax", [](V v) { return softmax(v[0]); }, {m}},
      {"softmax axis 0", [](V v) { return softmax(v[0], 0); }, {m}},
      {"log_softmax", [](V v) { return log_softmax(v[0]); }, {m}},
      {"crossentropy labels", [labels](V v) { return categorical_crossentropy(softmax(v[0]), labels); }, {m}},
      {"crossentropy probabilities", [labels](V v) { return categorical_crossentropy(v[0], labels); }, {prob}},
      {"crossentropy distribution", [dist](V v) { return categorical_crossentropy(softmax(v[0]), constant(dist)); }, {m}},
      {"binary_crossentropy", [dist](V v) { return binary_crossentropy(v[0], constant(dist)); }, {prob}},
      {"max_pool2d", [](V v) { return max_pool2d(v[0], {.window = {2, 2}, .stride = std::array<int64_t, 2>{1, 1}}); }, {images}},
      {"max_pool2d padded, partial windows", [](V v) { return max_pool2d(v[0], {.window = {3, 3}, .stride = std::array<int64_t, 2>{2, 2}, .padding = {1, 1}, .ignore_border = false}); }, {images}},
      {"avg_pool2d", [](V v) { return avg_pool2d(v[0]); }, {images}},
      {"avg_pool2d padded, partial windows, padding not counted", [](V v) { return avg_pool2d(v[0], {.window = {3, 2}, .stride = std::array<int64_t, 2>{2, 1}, .padding = {1, 1}, .ignore_border = false, .count_include_pad = false}); }, {images}},
      // Compiled, one fused node writes both operands of the product: two outputs of one pass.
      {"fused node with two outputs", [](V v) {
         Var a = tanh(v[0] * v[1]);
         return dot(a * v[0] + 1.0, transpose(a));
       }, {m, m2}},
      {"ifelse then", [](V v) { return ifelse(constant(Tensor::scalar(true)), v[0] * 2.0, v[1]); }, {m, m2}},
      {"ifelse else", [](V v) { return ifelse(sum(v[0]) > 1e9, v[0] * 2.0, v[1] * v[0]); }, {m, m2}},
      // Stabilized ops at 10^3 to 10^4.
      {"softplus large", [](V v) { return softplus(v[0]); }, {big}},
      {"log(1 + exp) large", [](V v) { return log(1.0 + exp(v[0])); }, {big}},
      {"log(sigmoid) large", [](V v) { return log(sigmoid(v[0])); }, {big}},
      {"log(1 - sigmoid) large", [](V v) { return log(1.0 - sigmoid(v[0])); }, {big}},
      {"sigmoid large", [](V v) { return sigmoid(v[0]); }, {big}},
      {"tanh large", [](V v) { return tanh(v[0]); }, {big}},
      {"log_softmax large", [](V v) { return log_softmax(v[0]); }, {bigger_rows}},
      {"log(softmax) large", [](V v) { return log(softmax(v[0])); }, {bigger_rows}},
      {"logsumexp large", [](V v) { return logsumexp(v[0], {1}); }, {bigger_rows}},
      {"log(sum(exp)) large", [](V v) { return log(sum(exp(v[0]), {1})); }, {bigger_rows}},
      {"crossentropy labels large", [labels](V v) { return categorical_crossentropy(softmax(v[0]), labels); }, {bigger_rows}},
      {"crossentropy distribution large", [dist](V v) { return categorical_crossentropy(softmax(v[0]), constant(dist)); }, {bigger_rows}},
      {"binary_crossentropy of sigmoid large", [dist](V v) { return binary_crossentropy(sigmoid(v[0]), constant(dist)); }, {big}},
  };
  int checked = 0;
  for (const GradientCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_NO_THROW(verify_grad(c.fn, c.at, c.options)) << c.name;
    EXPECT_NO_THROW(verify_rop(c.fn, c.at, c.options)) << c.name;
    ++checked;
  }
  std::cout << "gradient sweep: " << checked << " ops checked with verify_grad and verify_rop in f64\n";
}
