#pragma once
#include <string>
#include <vector>

#include "kiln/data.hpp"
#include "kiln/graph.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

// Tensors to and from NumPy's files: a .npy holds one array, a .npz is a zip archive of .npy files
// named after their keys (np.save, np.savez, np.savez_compressed, np.load read and write both).
// Every save writes a temporary file beside the target and renames it over the target once the
// file is complete and synced, so a crash or an error leaves the old file, or none, never half a
// file. Every problem with a file (missing, truncated, corrupt, a dtype kiln lacks) is an IOError
// naming the file and the entry.

void save_npy(const std::string& path, const Tensor& value);
Tensor load_npy(const std::string& path, Loc loc = Loc::current());

struct SaveNpzOptions {
  bool compressed = false;  // deflate each entry, as np.savez_compressed does
};
// The keys must be non-empty; each becomes the entry "<key>.npy".
void save_npz(const std::string& path, const NamedTensors& tensors, SaveNpzOptions options = {});
// The tensors in the archive's order, keyed as np.load keys them (the entry names without ".npy").
NamedTensors load_npz(const std::string& path, Loc loc = Loc::current());

// Shared variables by name, as an .npz: a checkpoint of a model. Every variable needs a name of
// its own (shared(value, "W")): an empty or repeated name is an Error before anything is written.
void save_shared(const std::string& path, const std::vector<Shared>& variables, SaveNpzOptions options = {});

struct LoadSharedOptions {
  bool allow_extra_entries = false;  // entries no variable names (e.g. loading part of a model)
};
// Loads each variable's entry into it (set_value). Every entry is read and checked first: present,
// the variable's dtype and the shape of its current value. Any problem is an IOError and leaves
// every variable as it was.
void load_shared(const std::string& path, const std::vector<Shared>& variables, LoadSharedOptions options = {});

}  // namespace kiln
