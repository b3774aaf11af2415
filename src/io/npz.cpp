#include "io/npz.hpp"

#include "io/npy.hpp"
#include "io/zip.hpp"
#include "kiln/io.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

constexpr std::string_view kNpySuffix = ".npy";

}  // namespace

void write_npz(const std::string& path, const NamedTensors& tensors, bool compressed, const std::string& who) {
  const InternalTensors internal;
  for (const auto& [key, value] : tensors)
    if (key.empty()) throw IOError(who + ": " + path + ": a tensor has an empty name; every entry of an .npz needs one");
  // Every value is read before the file is touched: a disposed tensor is named with its key.
  std::vector<NpyBytes> values;
  for (const auto& [key, value] : tensors) {
    try {
      values.emplace_back(value);
    } catch (const Error& e) {
      e.rethrow_with(who + ": " + path + ", entry '" + key + "': " + e.what());
    }
  }
  ZipWriter archive(path, who);
  size_t i = 0;
  for (const auto& [key, value] : tensors) archive.add(key + std::string(kNpySuffix), values[i++].pieces(), compressed);
  archive.finish();
}

NamedTensors read_npz(const std::string& path, const std::string& who) {
  const InternalTensors internal;
  const MappedFile file(path, who);
  const ZipReader archive(file.bytes(), who + ": " + path);
  NamedTensors tensors;
  std::vector<std::byte> inflated;
  for (const ZipReader::Entry& entry : archive.entries()) {
    const std::string key = entry.name.ends_with(kNpySuffix) ? entry.name.substr(0, entry.name.size() - kNpySuffix.size()) : entry.name;
    if (tensors.contains(key))
      throw IOError(who + ": " + path + ": the entries '" + key + "' and '" + key + std::string(kNpySuffix) +
                    "' both give the key '" + key + "'");
    tensors.set(key, parse_npy(archive.contents(entry, inflated), who + ": " + path + ", entry '" + entry.name + "'"));
  }
  return tensors;
}

void save_npz(const std::string& path, const NamedTensors& tensors, SaveNpzOptions options) {
  write_npz(path, tensors, options.compressed, "save_npz");
}

NamedTensors load_npz(const std::string& path, Loc loc) {
  NamedTensors handed;
  for (const auto& [key, value] : read_npz(path, "load_npz")) handed.set(key, TensorBook::handed_over(value, loc));
  return handed;
}

}  // namespace kiln
