#pragma once
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <source_location>
#include <string>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {


// The static type of a symbolic value: dtype, number of dimensions, and which dimensions are
// known to have size 1 (broadcastable), as in Theano.
struct Type {
  DType dtype = DType::f32;
  std::vector<bool> broadcastable;
  int64_t ndim() const { return static_cast<int64_t>(broadcastable.size()); }
  std::string str() const;  // "f32[?,1]"
  bool operator==(const Type&) const = default;
};

class Variable;  // internal: src/graph/node.hpp
class Node;

// A handle on a symbolic value in a graph. Converts implicitly from a number (a constant).
class Var {
 public:
  Var() = default;
  Var(double value);  // NOLINT: numbers mix with Var anywhere (a weak f64 constant)
  Var(int value);     // NOLINT: a weak i64 constant
  Var(int64_t value);  // NOLINT
  explicit Var(std::shared_ptr<Variable> variable) : v_(std::move(variable)) {}

  const Type& type() const;
  DType dtype() const { return type().dtype; }
  int64_t ndim() const { return type().ndim(); }
  const std::string& name() const;
  bool defined() const { return v_ != nullptr; }
  Variable* get() const { return v_.get(); }
  const std::shared_ptr<Variable>& ptr() const { return v_; }
  bool same(const Var& o) const { return v_ == o.v_; }

  // x[i]: index axis 0 (drops it); i may be a number or an integer scalar Var.
  Var operator[](const struct VarIndex& index) const;

 private:
  std::shared_ptr<Variable> v_;
};

struct VarIndex {
  VarIndex(int64_t i, Loc loc = Loc::current()) : number(i), loc(loc) {}  // NOLINT
  VarIndex(int i, Loc loc = Loc::current()) : number(i), loc(loc) {}  // NOLINT
  VarIndex(const Var& v, Loc loc = Loc::current()) : symbolic(v), loc(loc) {}  // NOLINT
  int64_t number = 0;
  Var symbolic;  // defined for a symbolic index
  Loc loc;
};

struct SharedOptions { bool borrow = false; };
struct GetValueOptions { bool borrow = false; bool return_internal_type = false; };
struct SetValueOptions { bool borrow = false; };

// A symbolic variable with a value that persists between calls (kiln's memory space).
class Shared : public Var {
 public:
  Shared() = default;
  explicit Shared(std::shared_ptr<Variable> v) : Var(std::move(v)) {}
  Tensor get_value(GetValueOptions options = {}, Loc loc = Loc::current()) const;
  void set_value(const Tensor& value, SetValueOptions options = {});
};

Shared shared(const Tensor& value, std::string name = "", SharedOptions options = {});

// Symbolic inputs.
Var scalar(std::string name = "", DType dtype = DType::f32);
Var vector(std::string name = "", DType dtype = DType::f32);
Var matrix(std::string name = "", DType dtype = DType::f32);
Var tensor3(std::string name = "", DType dtype = DType::f32);
Var tensor4(std::string name = "", DType dtype = DType::f32);
Var tensor(DType dtype, std::vector<bool> broadcastable, std::string name = "");
Var constant(const Tensor& value, std::string name = "");

// Printing: a text tree with types and the source line of each node, and Graphviz.
void debugprint(const Var& v, std::ostream& os);
void debugprint(const std::vector<Var>& vs, std::ostream& os);
std::string to_dot(const Var& v);
std::string to_dot(const std::vector<Var>& vs);

}  // namespace kiln
