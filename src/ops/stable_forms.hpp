#pragma once
#include <optional>
#include <vector>

#include "graph/node.hpp"

namespace kiln {

// An expression that loses precision or overflows, rewritten into one that does not:
// log(1 + x) -> log1p(x); log(1 + exp(x)), log1p(exp(x)) -> softplus(x);
// log(sigmoid(x)) -> -softplus(-x); log(1 - sigmoid(x)) -> -softplus(x);
// log(softmax(x)) -> log_softmax(x); log(sum(exp(x))) -> logsumexp(x); exp(x) - 1 -> expm1(x);
// categorical_crossentropy(softmax(x), labels) -> crossentropy_softmax(x, labels).
// The stabilize rewrites put `value` in the node's place; grad differentiates `value` instead of
// the chain it stands for, so that gradients are as stable as values, whatever the mode.
struct StableForm {
  Var value;                            // equal to the node's output, computed stably
  std::vector<Var> reads;               // the values of the original graph that `value` is built on
  std::vector<const Variable*> skipped; // the intermediate values of the chain it no longer reads
};

// The stable form of n's output, when n ends one of the chains above.
std::optional<StableForm> stable_form(const Node& n);

// v's stable form, or v: kiln's own functions (binary_crossentropy, ...) are stable in every mode.
Var stabilized(const Var& v);

}  // namespace kiln
