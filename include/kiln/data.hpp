#pragma once
#include <cstdint>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln {

// Tensors by name: one example of a dataset, or one batch of a DataLoader.
class NamedTensors {
 public:
  NamedTensors() = default;
  NamedTensors(std::initializer_list<std::pair<std::string, Tensor>> fields);
  // Error naming the fields there are when name is not one of them.
  const Tensor& operator[](std::string_view name) const;
  void set(std::string name, Tensor value);  // adds the field or replaces its tensor
  bool contains(std::string_view name) const;
  size_t size() const { return fields_.size(); }
  auto begin() const { return fields_.begin(); }
  auto end() const { return fields_.end(); }
  std::string names() const;  // "image, label"

 private:
  size_t position(std::string_view name) const;  // size() when there is no such field
  struct NameHash {
    using is_transparent = void;
    size_t operator()(std::string_view name) const { return std::hash<std::string_view>()(name); }
  };
  std::vector<std::pair<std::string, Tensor>> fields_;
  // Positions in fields_ by name once there are many (an .npz file of 100k entries); a batch's few
  // fields are searched in order.
  std::unordered_map<std::string, size_t, NameHash, std::equal_to<>> index_;
};

// A dataset: a number of examples, each a set of named tensors (TorchSharp's Dataset and
// GetTensor). A DataLoader calls get inside a dispose scope of its own: every tensor made in get
// is disposed once the batch is collated (docs/data.md says how a dataset keeps one).
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual NamedTensors get(int64_t index) = 0;
  // The examples at indices collated: each field the stack of the examples' tensors. By default
  // get for each index, then a stack per field, after checking that every example gives each field
  // one shape and dtype (an error names the field, both examples and both shapes); a dataset that
  // can gather a batch at once overrides it (TensorDataset does).
  virtual NamedTensors get_batch(std::span<const int64_t> indices);
};

// Examples that are the rows of whole tensors: example i of field f is f's tensor at [i] (a
// view). Every field has the same number of rows. The dataset keeps its own handles on the
// tensors, so disposing the caller's handles takes nothing from it.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(const NamedTensors& fields);
  TensorDataset(std::initializer_list<std::pair<std::string, Tensor>> fields);
  int64_t size() const override { return rows_; }
  NamedTensors get(int64_t index) override;
  NamedTensors get_batch(std::span<const int64_t> indices) override;  // one gather per field
  const Tensor& field(std::string_view name) const { return fields_[name]; }  // the whole tensor

 private:
  void check_index(int64_t index) const;
  NamedTensors fields_;
  int64_t rows_ = 0;
};

enum class Split { train, test };

// Fashion-MNIST read from its IDX files (train-images-idx3-ubyte.gz and the others, or the same
// names without .gz, gzip-compressed or not): "image", f32 [784] in [0, 1]
// (the 28 x 28 pixels row by row), and "label", an i64 scalar in 0..9. Debian installs the files
// with the package dataset-fashion-mnist. IOError names the file and what is wrong with it.
class FashionMnist : public TensorDataset {
 public:
  static constexpr const char* kDefaultDirectory = "/usr/share/datasets/fashion-mnist";
  explicit FashionMnist(Split split = Split::train, const std::string& directory = kDefaultDirectory);
};

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  uint64_t seed = 0;       // the shuffled order of epoch e follows from (seed, e) alone
  bool drop_last = false;  // drop the last batch when it is short
  // On: a batch is disposed when the next one is fetched, when the epoch ends, or when its
  // iterator goes away (a break). Off: batches are the caller's to dispose. In both, batches are
  // detached from every dispose scope.
  bool dispose_batch = true;
  // Collate the next batch on a background thread while this one is used. The dataset's get then
  // runs on that thread (one call at a time).
  bool prefetch = false;
};

// Batches of a dataset: each loop over the loader is an epoch; a batch has the dataset's fields,
// each the stack of the examples' tensors (a new first dimension of batch_size).
class DataLoader {
 public:
  DataLoader(Dataset& dataset, DataLoaderOptions options = {});
  DataLoader(Dataset&& dataset, DataLoaderOptions options = {}) = delete;  // the loader keeps a reference
  int64_t size() const;  // batches in an epoch
  const DataLoaderOptions& options() const { return options_; }

  class Epoch;
  class Iterator {
   public:
    Iterator(Iterator&&) noexcept;
    Iterator& operator=(Iterator&&) noexcept;
    ~Iterator();
    const NamedTensors& operator*() const;
    const NamedTensors* operator->() const { return &**this; }
    Iterator& operator++();
    bool operator==(std::default_sentinel_t) const;

   private:
    friend class DataLoader;
    explicit Iterator(std::unique_ptr<Epoch> epoch);
    Epoch& epoch() const;
    std::unique_ptr<Epoch> epoch_;
  };
  // Begins an epoch. Batches are reported made (and, with dispose_batch, disposed) at loop: a
  // range-for's line.
  Iterator begin(Loc loop = Loc::current());
  std::default_sentinel_t end() const { return {}; }

 private:
  Dataset& dataset_;
  DataLoaderOptions options_;
  uint64_t epochs_begun_ = 0;
};

}  // namespace kiln
