#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

// A tensor as the bytes of a .npy file (format 1.0, little-endian, C order): the header, then the
// elements, which are the tensor's own bytes when it is contiguous (no copy).
class NpyBytes {
 public:
  explicit NpyBytes(const Tensor& value);
  std::vector<std::span<const std::byte>> pieces() const;

 private:
  std::string header_;
  Tensor elements_;
};

// The array a .npy file's bytes hold, as a fresh C-order tensor. IOError, prefixed with `what`
// (where the bytes came from: "load_npz: m.npz, entry 'W'"), when the bytes are not a .npy of a
// dtype kiln has.
Tensor parse_npy(std::span<const std::byte> bytes, const std::string& what);

}  // namespace kiln
