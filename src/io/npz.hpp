#pragma once
#include <string>

#include "kiln/data.hpp"

namespace kiln {

// NumPy's .npz: a zip archive holding each key's array as the .npy entry "<key>.npy". who is the
// user's call, for errors ("save_shared"). The tensors read are kiln's own (InternalTensors).
void write_npz(const std::string& path, const NamedTensors& tensors, bool compressed, const std::string& who);
NamedTensors read_npz(const std::string& path, const std::string& who);

}  // namespace kiln
