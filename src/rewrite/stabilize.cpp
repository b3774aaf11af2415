// stabilize: rewrite expressions that lose precision or overflow into their stable forms.
#include "ops/nnet.hpp"
#include "ops/patterns.hpp"
#include "ops/stable_forms.hpp"
#include "rewrite/catalogue.hpp"

namespace kiln {

namespace {

using pattern::op_of;

// A node's stable form in its place (ops/stable_forms.hpp): the same chains grad differentiates
// in their stable form.
std::vector<Var> stable(FunctionGraph&, Node& n) {
  auto f = stable_form(n);
  return f ? std::vector<Var>{f->value} : std::vector<Var>{};
}

// Its gradient as the chain rule built it, softmax_grad(crossentropy_grad(g, softmax(x), labels),
// softmax(x)) -> g * (softmax(x) - onehot(labels)) in one op
std::vector<Var> crossentropy_softmax_grad(FunctionGraph&, Node& n) {
  const auto& sg = static_cast<const SoftmaxGrad&>(*n.op);
  const Var &gy = n.inputs[0], &y = n.inputs[1];
  const auto* sm = op_of<Softmax>(y);
  if (sg.axis() != 1 || !sm || sm->is_log() || !op_of<CrossEntropyGrad>(gy)) return {};
  const Node& ce = *gy.get()->owner;
  if (!ce.inputs[1].same(y)) return {};
  return {apply1(std::make_shared<CrossEntropySoftmaxGrad>(), {ce.inputs[0], y.get()->owner->inputs[0], ce.inputs[2]}, n.loc)};
}

}  // namespace

RewriteGroup stabilize_group() {
  return {"stabilize",
          {},
          {{"stable_forms", {op_class<Elemwise>(), op_class<CrossEntropy>()}, stable},
           {"crossentropy_softmax_grad", {op_class<SoftmaxGrad>()}, crossentropy_softmax_grad}}};
}

}  // namespace kiln
