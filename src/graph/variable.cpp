#include <sstream>

#include "graph/node.hpp"
#include "graph/op.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {

std::string Variable::label() const {
  if (!name.empty()) return name;
  if (constant) {
    if (constant->numel() == 1) {
      std::ostringstream s;
      s << constant->item_as_double(0);
      return s.str();
    }
    return "constant " + constant->str();
  }
  return "v" + std::to_string(id);
}

Node::~Node() {
  // Inputs whose node dies with them hand their own inputs over first, so that each nested
  // destructor finds nothing left to release.
  std::vector<Var> pending = std::move(inputs);
  while (!pending.empty()) {
    Var v = std::move(pending.back());
    pending.pop_back();
    if (v.get() && v.get()->owner && v.ptr().use_count() == 1) {
      auto& upstream = v.get()->owner->inputs;
      for (Var& in : upstream) pending.push_back(std::move(in));
      upstream.clear();
    }
  }
}

Var Node::output(size_t i) const {
  // Aliasing constructor: the Var keeps the whole node (and so its inputs) alive.
  return Var(std::shared_ptr<Variable>(shared_from_this(), outputs.at(i).get()));
}

namespace {
thread_local const DerivedFrom* innermost_derivation = nullptr;
}  // namespace

DerivedFrom::DerivedFrom(const Node& from, Derivation how)
    : outer_(innermost_derivation), loc_(from.loc), how_(from.derivation == Derivation::built ? how : from.derivation) {
  innermost_derivation = this;
}

DerivedFrom::~DerivedFrom() { innermost_derivation = outer_; }

std::string Node::where() const {
  switch (derivation) {
    case Derivation::built: return loc_str(loc);
    case Derivation::gradient: return loc_str(loc) + " (gradient)";
    case Derivation::rewrite: return loc_str(loc) + " (rewritten)";
  }
  return loc_str(loc);
}

std::string Node::origin() const {
  switch (derivation) {
    case Derivation::built: return "built at " + loc_str(loc);
    case Derivation::gradient: return "in the gradient of the node built at " + loc_str(loc);
    case Derivation::rewrite: return "made by a rewrite of the node built at " + loc_str(loc);
  }
  return "built at " + loc_str(loc);
}

std::string types_str(const std::vector<Var>& vars) {
  std::string s;
  for (size_t i = 0; i < vars.size(); ++i) s += (i ? ", " : "") + vars[i].type().str();
  return s;
}

std::vector<Var> apply(std::shared_ptr<const Op> op, std::vector<Var> inputs, const std::source_location& loc) {
  std::vector<Type> in_types;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined())
      throw TypeError(op->name() + ": input " + std::to_string(i) + " is an empty Var (at " + loc_str(loc) + ")");
    in_types.push_back(inputs[i].type());
  }
  std::vector<Type> out_types;
  try {
    out_types = op->infer_types(in_types);
  } catch (const Error& e) {
    e.rethrow_with(std::string(e.what()) + " (at " + loc_str(loc) + ")");
  }
  auto node = std::allocate_shared<Node>(SlabAllocator<Node>{});
  node->op = std::move(op);
  node->inputs = std::move(inputs);
  node->loc = loc;
  if (const DerivedFrom* d = innermost_derivation) {
    node->loc = d->loc_;
    node->derivation = d->how_;
  }
  std::vector<Var> outs;
  for (size_t i = 0; i < out_types.size(); ++i) {
    auto v = std::make_unique<Variable>();
    v->type = out_types[i];
    v->owner = node.get();
    v->index = static_cast<int>(i);
    node->outputs.push_back(std::move(v));
  }
  for (size_t i = 0; i < out_types.size(); ++i) outs.push_back(node->output(i));
  return outs;
}

Var apply1(std::shared_ptr<const Op> op, std::vector<Var> inputs, const std::source_location& loc) {
  return apply(std::move(op), std::move(inputs), loc).at(0);
}

Var::Var(double value) {
  const InternalTensors internal;
  v_ = std::allocate_shared<Variable>(SlabAllocator<Variable>{});
  v_->type = Type{DType::f64, {}};
  v_->constant = Tensor::scalar(value);
  v_->weak = true;
}

Var::Var(int value) : Var(static_cast<int64_t>(value)) {}

Var::Var(int64_t value) {
  const InternalTensors internal;
  v_ = std::allocate_shared<Variable>(SlabAllocator<Variable>{});
  v_->type = Type{DType::i64, {}};
  v_->constant = Tensor::scalar(value);
  v_->weak = true;
}

const Type& Var::type() const {
  if (!v_) throw TypeError("Var: this Var is empty (default-constructed); build it with matrix(), scalar(), ... first");
  return v_->type;
}

const std::string& Var::name() const {
  if (!v_) throw TypeError("Var: this Var is empty (default-constructed); build it with matrix(), scalar(), ... first");
  return v_->name;
}

Var tensor(DType dtype, std::vector<bool> broadcastable, std::string name) {
  auto v = std::allocate_shared<Variable>(SlabAllocator<Variable>{});
  v->type = Type{dtype, std::move(broadcastable)};
  v->name = std::move(name);
  return Var(std::move(v));
}

Var scalar(std::string name, DType dtype) { return tensor(dtype, {}, std::move(name)); }
Var vector(std::string name, DType dtype) { return tensor(dtype, {false}, std::move(name)); }
Var matrix(std::string name, DType dtype) { return tensor(dtype, {false, false}, std::move(name)); }
Var tensor3(std::string name, DType dtype) { return tensor(dtype, {false, false, false}, std::move(name)); }
Var tensor4(std::string name, DType dtype) { return tensor(dtype, {false, false, false, false}, std::move(name)); }

Var constant(const Tensor& value, std::string name) {
  auto v = std::allocate_shared<Variable>(SlabAllocator<Variable>{});
  std::vector<bool> bc;
  for (int64_t d : value.shape()) bc.push_back(d == 1);
  v->type = Type{value.dtype(), bc};
  // A builder's temporary becomes the constant itself; the user's own tensor is copied.
  if (TensorBook::take_over(value)) {
    v->constant = value;
  } else {
    const InternalTensors internal;
    v->constant = value.clone();
  }
  v->name = std::move(name);
  return Var(std::move(v));
}

}  // namespace kiln
