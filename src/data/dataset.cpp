#include <algorithm>

#include "kiln/data.hpp"
#include "kiln/eager.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {
namespace {

void check_collatable(const NamedTensors& first, int64_t first_index, const NamedTensors& example, int64_t index) {
  const auto example_str = [](int64_t i) { return "example " + std::to_string(i); };
  if (example.size() != first.size() ||
      !std::ranges::all_of(first, [&](const auto& field) { return example.contains(field.first); }))
    throw Error("collating a batch: " + example_str(index) + " has the fields {" + example.names() + "} but " +
                example_str(first_index) + " has {" + first.names() + "}; every example must have the same fields");
  for (const auto& [name, value] : first) {
    const Tensor& other = example[name];
    if (other.shape() != value.shape() || other.dtype() != value.dtype())
      throw ShapeError("collating a batch: field '" + name + "' of " + example_str(index) + " is " + other.str() + " but " +
                       example_str(first_index) + " gives " + value.str() +
                       "; a batch stacks each field, so every example must give it one shape and dtype");
  }
}


}  // namespace

NamedTensors::NamedTensors(std::initializer_list<std::pair<std::string, Tensor>> fields) {
  for (const auto& [name, value] : fields) set(name, value);
}

namespace {
constexpr size_t kSearchedInOrder = 16;
}  // namespace

size_t NamedTensors::position(std::string_view name) const {
  if (!index_.empty()) {
    const auto it = index_.find(name);
    return it == index_.end() ? fields_.size() : it->second;
  }
  for (size_t i = 0; i < fields_.size(); ++i)
    if (fields_[i].first == name) return i;
  return fields_.size();
}

const Tensor& NamedTensors::operator[](std::string_view name) const {
  if (const size_t i = position(name); i < fields_.size()) return fields_[i].second;
  throw Error("no tensor named '" + std::string(name) + "': the fields are " + (fields_.empty() ? "none" : names()));
}

void NamedTensors::set(std::string name, Tensor value) {
  if (const size_t i = position(name); i < fields_.size()) {
    fields_[i].second = std::move(value);
    return;
  }
  fields_.emplace_back(std::move(name), std::move(value));
  if (fields_.size() > kSearchedInOrder) {
    if (index_.empty())
      for (size_t i = 0; i < fields_.size(); ++i) index_.emplace(fields_[i].first, i);
    else
      index_.emplace(fields_.back().first, fields_.size() - 1);
  }
}

bool NamedTensors::contains(std::string_view name) const { return position(name) < fields_.size(); }

std::string NamedTensors::names() const {
  std::string out;
  for (const auto& [field, value] : fields_) out += (out.empty() ? "" : ", ") + field;
  return out;
}

NamedTensors Dataset::get_batch(std::span<const int64_t> indices) {
  if (indices.empty()) throw Error("Dataset::get_batch: no indices");
  std::vector<NamedTensors> examples;
  examples.reserve(indices.size());
  for (int64_t index : indices) {
    examples.push_back(get(index));
    check_collatable(examples.front(), indices.front(), examples.back(), index);
  }
  NamedTensors batch;
  std::vector<Tensor> parts(examples.size());
  for (const auto& [name, value] : examples.front()) {
    for (size_t i = 0; i < examples.size(); ++i) parts[i] = examples[i][name];
    batch.set(name, stack(parts));
  }
  return batch;
}

TensorDataset::TensorDataset(std::initializer_list<std::pair<std::string, Tensor>> fields)
    : TensorDataset(NamedTensors(fields)) {}

TensorDataset::TensorDataset(const NamedTensors& fields) {
  if (fields.size() == 0) throw Error("TensorDataset: give it at least one named tensor");
  const InternalTensors internal;  // the dataset's handles are its own, not the caller's
  for (const auto& [name, value] : fields) {
    if (value.ndim() == 0)
      throw ShapeError("TensorDataset: field '" + name + "' is a scalar " + value.str() +
                       "; each field needs a first dimension that counts the examples");
    const int64_t rows = value.shape()[0];
    if (fields_.size() > 0 && rows != rows_)
      throw ShapeError("TensorDataset: field '" + name + "' " + value.str() + " has " + std::to_string(rows) +
                       " rows but '" + fields_.begin()->first + "' has " + std::to_string(rows_) +
                       "; every field needs one row per example");
    rows_ = rows;
    fields_.set(name, value.alias());
  }
}

void TensorDataset::check_index(int64_t index) const {
  if (index < 0 || index >= rows_)
    throw Error("TensorDataset: index " + std::to_string(index) + " is out of range for " + std::to_string(rows_) +
                " examples");
}

NamedTensors TensorDataset::get(int64_t index) {
  check_index(index);
  NamedTensors example;
  for (const auto& [name, whole] : fields_) example.set(name, whole[index]);
  return example;
}

NamedTensors TensorDataset::get_batch(std::span<const int64_t> indices) {
  Tensor rows = Tensor::empty({static_cast<int64_t>(indices.size())}, i64);
  std::ranges::copy(indices, rows.data<int64_t>());
  for (int64_t index : indices) check_index(index);
  NamedTensors batch;
  for (const auto& [name, whole] : fields_) batch.set(name, take(whole, rows, 0));
  return batch;
}

}  // namespace kiln
