#pragma once
#include <utility>
#include <vector>

#include "kiln/graph.hpp"

namespace kiln {

// The graph that computes `outputs`, with each replacements[i].first standing for a batch of its
// values, replacements[i].second: the same dtype and one more leading axis, of one length B for all
// of them (broadcasting cannot tell a batch of 1 from a mismatch, so that is the caller's to keep).
// Every value that depends on a replaced one is computed for the whole batch at once and gains the
// leading axis (PyTensor's vectorize_graph). Each op family with a rule rewrites its node on the
// batched inputs directly (elementwise, reductions, shape ops, indexing, matrix products, softmax,
// sum_to_shape); a node of any other op runs once per batch element in a scan. Nodes that read no
// replaced value are kept as they are, and an output that reads none comes back as it was, with its
// own number of dimensions. Throws TypeError when a replacement's type does not fit.
std::vector<Var> vectorize_graph(const std::vector<Var>& outputs, const std::vector<std::pair<Var, Var>>& replacements);

}  // namespace kiln
