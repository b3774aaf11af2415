#pragma once
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <span>
#include <vector>

#include "kiln/graph.hpp"
#include "kiln/sparse_var.hpp"

namespace kiln {

struct InOptions { bool borrow = false; };
// A function input. With borrow, the caller's buffer may be used without a copy and overwritten.
struct In {
  In(const Var& v, InOptions o = {}) : variable(v), borrow(o.borrow) {}  // NOLINT
  // A sparse matrix input: four inputs, its parts in order (data, indices, indptr, shape), given a
  // SparseTensor in a call (f(x_value, ...)) or its sparse_parts() in a list of tensors.
  In(const SparseVar& x, InOptions o = {})  // NOLINT
      : variable(x.data()), sparse_parts{x.indices(), x.indptr(), x.shape()}, sparse_format(x.format()), borrow(o.borrow) {}
  Var variable;
  std::vector<Var> sparse_parts;  // after `variable`, for a sparse input; an unused one is no error
  std::optional<SparseFormat> sparse_format;  // of a sparse input: f(value, ...) checks the value's
  bool borrow = false;
};

struct OutOptions { bool borrow = false; };
// A function output. With borrow, the returned tensor may be the same buffer on the next call.
struct Out {
  Out(const Var& v, OutOptions o = {}) : variable(v), borrow(o.borrow) {}  // NOLINT
  Var variable;
  bool borrow = false;
};

using Updates = std::vector<std::pair<Shared, Var>>;
using Givens = std::vector<std::pair<Var, Var>>;

// A mode is an ordered list of named rewrite groups run on the function's graph before it is
// compiled (docs/rewrites.md lists the catalogue).
// What Mode::debug() checks on every call (slow: for finding bugs, not for production).
struct DebugChecks {
  bool rewrites = true;    // every rewrite's replacement equals what it replaced, on the call's inputs
  bool ops = true;         // no op modifies an input or returns an alias of one it did not declare
  bool nan_guard = false;  // raise at the first op that produces a NaN or an infinity
};

class Mode {
 public:
  // Any ordered list of groups: Mode("plain", {}) compiles the graph as built.
  Mode(std::string name, std::vector<std::string> groups, std::optional<DebugChecks> checks = std::nullopt)
      : name_(std::move(name)), groups_(std::move(groups)), checks_(checks) {}
  static Mode fast_run();
  static Mode fast_compile();
  static Mode debug(DebugChecks checks = {});  // fast_run's groups, checked
  const std::string& name() const { return name_; }
  const std::vector<std::string>& groups() const { return groups_; }
  const std::optional<DebugChecks>& checks() const { return checks_; }

 private:
  std::string name_;
  std::vector<std::string> groups_;
  std::optional<DebugChecks> checks_;
};

struct FunctionOptions {
  Updates updates;
  Givens givens;
  Mode mode = Mode::fast_run();
  bool keep_buffers = false;
  bool allow_unused_inputs = false;  // otherwise an input no output depends on is an error
  bool profile = false;              // time every op of every call (read with f.profile())
};

// Per op (by name), over every call since the function was compiled.
struct OpProfile {
  std::string op;
  int64_t calls = 0;
  double seconds = 0;
  int64_t bytes = 0;  // of the outputs it wrote
};
struct Profile {
  std::vector<OpProfile> ops;  // most time first
  int64_t calls = 0;           // calls of the function
  std::string str() const;     // a table
};

struct MemoryReport {
  int64_t planned_peak_bytes = 0;  // most bytes of intermediates alive at once in the schedule
  int64_t naive_bytes = 0;         // one buffer per computed value and per node's scratch
  int64_t lower_bound_bytes = 0;   // the largest total of values live at one time in the schedule
  int64_t persistent_bytes = 0;    // shared variables
  int64_t result_bytes = 0;        // of planned_peak_bytes: the values handed back in buffers of their own
  std::vector<std::string> unplanned;  // values whose size depends on data (known only at run time)
  std::string schedule;                // the order of the nodes chosen: the lowest planned peak among
  std::vector<std::pair<std::string, int64_t>> schedules;  // the orders tried, each with its planned peak
};

// How often each rewrite fired while compiling, and the time it took.
struct RewriteStat {
  std::string group;
  std::string name;
  int64_t fired = 0;
  double seconds = 0;
};
// The time of one stage of function(...), in the order they ran.
struct StageTime {
  std::string stage;
  double seconds = 0;
};
struct CompileReport {
  std::vector<RewriteStat> rewrites;
  std::vector<StageTime> stages;
  double seconds = 0;     // the whole of function(...)
  int64_t nodes_before = 0;
  int64_t nodes_after = 0;
  std::string str() const;  // a table
};

struct FunctionImpl;

// A handle on one compiled function: copies name the same function, as copies of a Tensor name
// the same tensor. They share its settings (trust_input), its plans, the arena each thread keeps
// (keep_buffers: a borrowed output may be overwritten by a call through any copy) and its profile.
// Compile again for an independent one.
class Function {
 public:
  // Outputs are fresh handles made for the caller (in the caller's dispose scope, if any); f(a, b)
  // records function.hpp as the line that made them, f({a, b}) and call() the caller's line.
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs, Loc loc = Loc::current()) const;
  template <class... Ts>
    requires((std::is_convertible_v<Ts, Tensor> || std::is_same_v<Ts, SparseTensor>) && ...)
  std::vector<Tensor> operator()(const Ts&... inputs) const {
    std::vector<Tensor> arguments;
    (append_argument(arguments, inputs), ...);
    return (*this)(arguments);
  }
  // The same call writing the outputs into `outputs` (resized to their number): with
  // keep_buffers and Out(borrow) outputs, a steady loop of calls allocates nothing.
  void call(std::span<const Tensor> inputs, std::vector<Tensor>& outputs, Loc loc = Loc::current()) const;
  // Skip the checks and conversions of inputs (the caller promises exact dtypes and shapes).
  Function& trust_input(bool trust);
  // n calls of a function without explicit inputs in one C++ loop; returns the last outputs.
  std::vector<Tensor> run_n(int64_t n) const;
  MemoryReport memory_report() const;  // for the last call's input shapes
  MemoryReport memory_report(const std::vector<Shape>& input_shapes) const;
  std::string graph_text() const;
  const CompileReport& compile_report() const;
  Profile profile() const;  // needs FunctionOptions{.profile = true}
  const FunctionImpl& impl() const;  // throws for a default-constructed Function

 private:
  void run_call(std::span<const Tensor> inputs, std::vector<Tensor>& outputs) const;
  // The next argument of f(a, b, ...): a tensor for a dense input, a SparseTensor of the input's
  // format for a sparse one (its four parts); anything else is a TypeError naming the input.
  void append_argument(std::vector<Tensor>& arguments, const Tensor& value) const;
  void append_argument(std::vector<Tensor>& arguments, const SparseTensor& value) const;
  friend Function function(std::vector<In>, std::vector<Out>, FunctionOptions);
  std::shared_ptr<FunctionImpl> impl_;
};

Function function(std::vector<In> inputs, std::vector<Out> outputs, FunctionOptions options = {});

// Printing: a text tree with types and source lines, and Graphviz.
void debugprint(const Function& f, std::ostream& os);
std::string to_dot(const Function& f);

}  // namespace kiln
