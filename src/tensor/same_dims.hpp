#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

namespace kiln {

// Equal shapes (or strides), compared inline: a kernel's check that its operands line up runs on
// every call, and the library memcmp that vector equality calls costs more than the few
// dimensions do.
inline bool same_dims(std::span<const int64_t> a, std::span<const int64_t> b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (a[d] != b[d]) return false;
  return true;
}

}  // namespace kiln
