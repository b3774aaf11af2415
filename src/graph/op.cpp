#include "graph/op.hpp"

namespace kiln {

std::vector<Var> Op::L_op(const Node& node, const std::vector<Var>&) const {
  throw GradError(name() + " is not differentiable (node built at " + node.where() + ")");
}

}  // namespace kiln
