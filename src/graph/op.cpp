#include "graph/op.hpp"

namespace kiln {

std::vector<Var> Op::L_op(const Node& node, const std::vector<Var>&) const {
  throw GradError(name() + " is not differentiable (node " + node.origin() + ")");
}

OpParams& OpParams::operator<<(const Op& inner) {
  classes_.push_back(std::type_index(typeid(inner)));
  words_.push_back(-1);  // marks where the inner op's parameters begin
  inner.params(*this);
  return *this;
}

size_t OpParams::hash() const {
  size_t h = words_.size();
  for (int64_t w : words_) h = h * 1000003u ^ std::hash<int64_t>()(w);
  for (const auto& c : classes_) h = h * 1000003u ^ c.hash_code();
  return h;
}

bool Op::equals(const Op& other) const {
  if (this == &other) return true;
  if (typeid(*this) != typeid(other)) return false;
  OpParams a, b;
  params(a);
  other.params(b);
  return a == b;
}

size_t Op::hash() const {
  if (const size_t known = hash_.load(std::memory_order_relaxed)) return known;
  OpParams p;
  params(p);
  const size_t h = (std::type_index(typeid(*this)).hash_code() ^ p.hash()) | 1;  // never 0
  hash_.store(h, std::memory_order_relaxed);
  return h;
}

}  // namespace kiln
