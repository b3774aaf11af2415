#pragma once
#include <cstddef>

#include "kiln/tensor.hpp"

namespace kiln {

// a == b, inline: a kernel's check that its operands line up runs on every call, and the library
// memcmp that vector equality calls costs more than comparing the few dimensions.
inline bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (a[d] != b[d]) return false;
  return true;
}

}  // namespace kiln
