#include <algorithm>

#include "kiln/data.hpp"
#include "tensor/handles.hpp"
#include "tensor/tensor_book.hpp"

namespace kiln {

NamedTensors::NamedTensors(std::initializer_list<std::pair<std::string, Tensor>> fields) {
  for (const auto& [name, value] : fields) set(name, value);
}

const Tensor& NamedTensors::operator[](std::string_view name) const {
  for (const auto& [field, value] : fields_)
    if (field == name) return value;
  throw Error("no tensor named '" + std::string(name) + "': the fields are " + (fields_.empty() ? "none" : names()));
}

void NamedTensors::set(std::string name, Tensor value) {
  for (auto& [field, held] : fields_)
    if (field == name) {
      held = std::move(value);
      return;
    }
  fields_.emplace_back(std::move(name), std::move(value));
}

bool NamedTensors::contains(std::string_view name) const {
  return std::ranges::any_of(fields_, [&](const auto& field) { return field.first == name; });
}

std::string NamedTensors::names() const {
  std::string out;
  for (const auto& [field, value] : fields_) out += (out.empty() ? "" : ", ") + field;
  return out;
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

NamedTensors TensorDataset::get(int64_t index) {
  if (index < 0 || index >= rows_)
    throw Error("TensorDataset::get: index " + std::to_string(index) + " is out of range for " + std::to_string(rows_) +
                " examples");
  NamedTensors example;
  for (const auto& [name, whole] : fields_) {
    const std::span<const int64_t> shape(whole.shape()), strides(whole.strides());
    example.set(name, TensorHandles::make(whole.storage(), whole.dtype(), shape.subspan(1), strides.subspan(1),
                                          whole.offset() + index * strides[0], Loc::current()));
  }
  return example;
}

}  // namespace kiln
