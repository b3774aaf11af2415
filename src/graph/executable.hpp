#pragma once
#include <functional>
#include <memory>
#include <shared_mutex>
#include <span>
#include <typeindex>
#include <unordered_map>
#include <vector>

#include "graph/node.hpp"

namespace kiln {

// How one node runs on one backend: made once per node when a function is compiled (exec/), it
// may hold what it chose then (a matrix kernel, an inner program). run() is const: calls of one
// function on several threads share it.
class Executable {
 public:
  virtual ~Executable() = default;

  // The bytes of working memory run() needs for inputs and outputs of these shapes. The planner
  // places them in the call's arena for the one instruction; they hold nothing from one run to
  // the next.
  virtual int64_t scratch_bytes(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
    (void)inputs, (void)outputs;
    return 0;
  }

  // Computes the outputs. Each output arrives allocated with its inferred shape, except those the
  // op declares as views (Op::view_map), which run() sets: an output that still holds the view it
  // set last time, of the same bytes, may be left as it is (set_view does that). No run allocates:
  // what it needs beyond its outputs is `scratch`, at least scratch_bytes() long, 64-byte aligned.
  virtual void run(std::span<const Tensor> inputs, std::span<Tensor> outputs, std::span<std::byte> scratch) const = 0;
};

// out = a view of base with this geometry; out is left as it is (no allocation) when it already is
// exactly that view.
void set_view(Tensor& out, const Tensor& base, std::span<const int64_t> shape, std::span<const int64_t> strides,
              int64_t offset);

// One backend's executables by op class: each op family adds its own (ops/*.cpp, add_*_kernels).
class KernelTable {
 public:
  using Make = std::function<std::unique_ptr<Executable>(const Node&)>;

  // make(std::shared_ptr<const OpClass>, const Node&) -> std::unique_ptr<Executable>
  template <class OpClass, class MakeFn> void add(MakeFn make) {
    set(std::type_index(typeid(OpClass)), [make](const Node& node) {
      return make(std::static_pointer_cast<const OpClass>(node.op), node);
    });
  }
  // A Kernel constructed from the op and the node.
  template <class OpClass, class Kernel> void add() {
    add<OpClass>([](std::shared_ptr<const OpClass> op, const Node& node) { return std::make_unique<Kernel>(std::move(op), node); });
  }
  void set(std::type_index op_class, Make make);
  // The node's executable; Error naming the op when this backend has none for its class.
  std::unique_ptr<Executable> make(const Node& node) const;

 private:
  mutable std::shared_mutex mutex_;
  std::unordered_map<std::type_index, Make> makers_;
};

// An executable that keeps its op (and so the op's parameters) alive and knows its node's output
// dtypes.
template <class OpClass> class KernelOf : public Executable {
 public:
  KernelOf(std::shared_ptr<const OpClass> op, const Node& node) : op_(std::move(op)) {
    for (const auto& out : node.outputs) output_dtypes_.push_back(out->type.dtype);
  }

 protected:
  const OpClass& op() const { return *op_; }
  DType output_dtype(size_t i) const { return output_dtypes_[i]; }

 private:
  std::shared_ptr<const OpClass> op_;
  std::vector<DType> output_dtypes_;
};

}  // namespace kiln
