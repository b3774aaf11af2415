#pragma once
#include <atomic>
#include <optional>
#include <string>
#include <type_traits>
#include <typeindex>
#include <utility>
#include <vector>

#include "graph/node.hpp"
#include "kiln/errors.hpp"

namespace kiln {

class Op;

// A graph inside an op (a scan's body): its own inputs (placeholders) and its outputs.
struct InnerGraph {
  std::vector<Var> inputs, outputs;
};

// An op's parameters, written in order by Op::params. Two ops are equal when they are of one
// class and write the same parameters: a fused composite writes its whole program, its wiring
// and its dtypes, so ops that print alike are not merged unless they compute alike.
class OpParams {
 public:
  template <class T>
    requires(std::is_integral_v<T> || std::is_enum_v<T>)
  OpParams& operator<<(T v) {
    words_.push_back(static_cast<int64_t>(v));
    return *this;
  }
  template <class T> OpParams& operator<<(const std::vector<T>& values) {
    *this << values.size();
    for (const auto& v : values) *this << v;
    return *this;
  }
  template <class T> OpParams& operator<<(const std::optional<T>& value) {
    *this << value.has_value();
    if (value) *this << *value;
    return *this;
  }
  OpParams& operator<<(const Type& type) { return *this << type.dtype << type.broadcastable; }
  OpParams& operator<<(const Op& inner);  // an op held as a parameter: its class and parameters
  bool operator==(const OpParams&) const = default;
  size_t hash() const;

 private:
  std::vector<int64_t> words_;
  std::vector<std::type_index> classes_;
};

// What an op means, for every op (ARCHITECTURE.md): types, shapes, L_op, views and in-place
// declarations, equality from parameters. How it runs is a backend's executable (graph/executable.hpp).
class Op {
 public:
  virtual ~Op() = default;
  virtual std::string name() const = 0;

  // Output types from input types; refuses bad input with TypeError naming the op and the types.
  virtual std::vector<Type> infer_types(const std::vector<Type>& inputs) const = 0;

  // Output shapes from input shapes. values[i] is the input's value when known (null otherwise);
  // only ops listed by needs_input_values() read them.
  virtual std::vector<Shape> infer_shapes(const std::vector<Shape>& inputs,
                                          const std::vector<const Tensor*>& values) const = 0;
  virtual std::vector<int> needs_input_values() const { return {}; }
  // True when infer_shapes may also be asked without those values (null pointers), answering when
  // the shapes do not depend on them (ifelse whose branches agree) and raising ShapeError else.
  virtual bool infers_shapes_without_values() const { return false; }

  // Vector-Jacobian product: symbolic gradients of the inputs given the outputs' gradients
  // (undefined Var for an output without gradient). An undefined result means "no gradient".
  virtual std::vector<Var> L_op(const Node& node, const std::vector<Var>& output_grads) const;
  // Jacobian-vector product: the outputs' tangents given the inputs' (undefined Var: zero; an
  // undefined result: zero). std::nullopt, the default, asks the autodiff layer to build it from
  // L_op (the transpose of the vector-Jacobian product); an op overrides it where a direct form
  // is cheaper.
  virtual std::optional<std::vector<Var>> R_op(const Node& node, const std::vector<Var>& input_tangents) const {
    (void)node, (void)input_tangents;
    return std::nullopt;
  }

  // {output, input}: that output is a view of that input (the executable sets it).
  virtual std::vector<std::pair<int, int>> view_map() const { return {}; }
  // {output, input}: that output may be written into that input's buffer; the planner decides.
  virtual std::vector<std::pair<int, int>> inplace_options() const { return {}; }
  // Inputs read for their shape alone (fill(x, v): v shaped like x): the planner may reuse their
  // buffers before this op runs, which then sees their shapes, never their elements.
  virtual std::vector<int> shape_only_inputs() const { return {}; }

  // For inputs and outputs of these shapes, the input that output 0 is unchanged, if any
  // (sum_to_shape of a value that already has the target shape): the planner then hands that
  // input on instead of running the op. Ops that never do return nothing.
  virtual std::optional<int> forwards_input(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
    (void)inputs, (void)outputs;
    return std::nullopt;
  }

  // The outputs' values where they follow from the inputs whose values are known (the others
  // null) although not all are: an ifelse whose branches' values are known and equal gives them,
  // whichever branch its condition takes. Empty where they do not follow.
  virtual std::vector<Tensor> values_from_known_inputs(const std::vector<const Tensor*>& values) const {
    (void)values;
    return {};
  }

  // Whether running it may reject its inputs' values and not only their shapes (an index or a label
  // out of range), which planning cannot rule out. The planner writes a shared variable in place
  // only after the last such op, so a call that fails leaves every shared variable as it was.
  virtual bool may_fail_on_values() const { return true; }
  // Whether every check on values happens before the op writes its output: then, as the last op
  // that may fail, it may still write a shared variable in place (a failure leaves it untouched).
  virtual bool checks_values_before_writing() const { return false; }

  // A stateful op (a random draw): {input, output}, where the input is a shared variable that a
  // function updates to that output after every call, unless the function's own updates name it.
  virtual std::optional<std::pair<int, int>> state_update() const { return std::nullopt; }

  // The graph the op runs inside it (a scan's body), for printing; null for most ops.
  virtual const InnerGraph* inner_graph() const { return nullptr; }

  // Writes every parameter that distinguishes this op from another of its class (never its name).
  virtual void params(OpParams& out) const = 0;
  bool equals(const Op& other) const;
  size_t hash() const;  // computed once: an op never changes after it is made

 private:
  mutable std::atomic<size_t> hash_{0};  // 0: not computed yet
};

}  // namespace kiln
