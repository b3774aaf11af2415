// Shared variables saved by name in an .npz: a model's checkpoint.
#include <algorithm>

#include "graph/node.hpp"
#include "io/npz.hpp"
#include "kiln/io.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

// The names that key the variables in the file: each non-empty and different from the others.
void check_names(const std::vector<Shared>& variables, const std::string& who) {
  for (size_t i = 0; i < variables.size(); ++i) {
    const std::string& name = variables[i].name();
    if (name.empty())
      throw Error(who + ": shared variable " + std::to_string(i) + " of " + std::to_string(variables.size()) + " (" +
                  variables[i].type().str() + ") has no name; the file keys variables by name: shared(value, \"W\")");
    for (size_t j = 0; j < i; ++j)
      if (variables[j].name() == name)
        throw Error(who + ": shared variables " + std::to_string(j) + " and " + std::to_string(i) + " are both named '" +
                    name + "'; the file keys variables by name, so each needs a name of its own");
  }
}

}  // namespace

void save_shared(const std::string& path, const std::vector<Shared>& variables, SaveNpzOptions options) {
  check_names(variables, "save_shared");
  const InternalTensors internal;
  // The values at one moment, as a call reads them: a function updating them meanwhile leaves
  // a checkpoint of one step, never a mix of two.
  const std::vector<Tensor> now = get_values_together(variables, {.borrow = true});
  NamedTensors values;
  for (size_t i = 0; i < variables.size(); ++i) values.set(variables[i].name(), now[i]);
  write_npz(path, values, options.compressed, "save_shared");
}

void load_shared(const std::string& path, const std::vector<Shared>& variables, LoadSharedOptions options) {
  check_names(variables, "load_shared");
  const InternalTensors internal;
  const NamedTensors values = read_npz(path, "load_shared");
  const std::string nothing_loaded = "; no variable was changed";
  for (const Shared& variable : variables) {
    const std::string& name = variable.name();
    if (!values.contains(name))
      throw IOError("load_shared: " + path + " has no entry '" + name + "' (it holds " +
                    (values.size() ? values.names() : std::string("none")) + ")" + nothing_loaded);
    const Tensor& value = values[name];
    const Tensor current = variable.get_value({.borrow = true});
    if (value.dtype() != variable.dtype() || value.shape() != current.shape())
      throw IOError("load_shared: " + path + ", entry '" + name + "' is " + value.str() + " but shared variable '" + name +
                    "' is " + current.str() + "; load into a model built with the dtypes and sizes of the one saved" +
                    nothing_loaded);
  }
  if (!options.allow_extra_entries)
    for (const auto& [key, value] : values)
      if (std::ranges::none_of(variables, [&](const Shared& v) { return v.name() == key; }))
        throw IOError("load_shared: " + path + " holds the entry '" + key +
                      "', which no variable given is named; pass that variable too, or "
                      "{.allow_extra_entries = true} to load part of the file" + nothing_loaded);
  std::vector<Tensor> loaded;
  for (const Shared& variable : variables) loaded.push_back(values[variable.name()]);
  set_values_together(variables, loaded, {.borrow = true});  // a call sees the old model or the new one
}

}  // namespace kiln
