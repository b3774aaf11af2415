#include <sstream>

#include "kiln/graph.hpp"

namespace kiln {

std::string Type::str() const {
  std::ostringstream s;
  s << dtype_name(dtype) << '[';
  for (size_t i = 0; i < broadcastable.size(); ++i) s << (i ? "," : "") << (broadcastable[i] ? "1" : "?");
  s << ']';
  return s.str();
}

}  // namespace kiln
