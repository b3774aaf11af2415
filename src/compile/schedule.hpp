#pragma once
#include <string>
#include <vector>

#include "graph/function_graph.hpp"

namespace kiln {

// Orders in which a graph's nodes may run. Which one needs the least memory depends on the sizes
// of the values, known only per call signature: the planner plans each and keeps the one with
// the lowest peak (as XLA's scheduler does). The first is depth-first from the results.
struct Schedule {
  std::string name;
  std::vector<Node*> order;
};
std::vector<Schedule> candidate_orders(const std::vector<Var>& results);

}  // namespace kiln
