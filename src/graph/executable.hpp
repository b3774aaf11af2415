#pragma once
#include <functional>
#include <memory>
#include <new>
#include <shared_mutex>
#include <span>
#include <typeindex>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "graph/node.hpp"
#include "graph/op.hpp"

namespace kiln {

// The tensors a node runs on, read where they are: the run loop's slots, picked by an
// instruction's slot numbers, or any contiguous array. Running a node copies no tensor handle (with
// kiln's threads about, each copy is two atomic operations).
template <class T> class Values {
 public:
  Values() = default;
  Values(std::span<T> values) : base_(values.data()), size_(values.size()) {}  // NOLINT: any array of tensors
  Values(std::vector<std::remove_const_t<T>>& values) : base_(values.data()), size_(values.size()) {}  // NOLINT
  Values(const std::vector<std::remove_const_t<T>>& values)  // NOLINT
    requires std::is_const_v<T>
      : base_(values.data()), size_(values.size()) {}
  Values(T* slots, std::span<const int> picks) : base_(slots), picks_(picks.data()), size_(picks.size()) {}

  T& operator[](size_t i) const { return picks_ ? base_[picks_[i]] : base_[i]; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  class iterator {
   public:
    using value_type = std::remove_const_t<T>;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const Values* v, size_t i) : v_(v), i_(i) {}
    T& operator*() const { return (*v_)[i_]; }
    iterator& operator++() { return ++i_, *this; }
    iterator operator++(int) { return {v_, i_++}; }
    bool operator==(const iterator& o) const { return i_ == o.i_; }

   private:
    const Values* v_ = nullptr;
    size_t i_ = 0;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size_}; }

 private:
  T* base_ = nullptr;
  const int* picks_ = nullptr;  // null: contiguous
  size_t size_ = 0;
};
using InputValues = Values<const Tensor>;
using OutputValues = Values<Tensor>;

// How one node runs on one backend: made once per node when a function is compiled (exec/), it
// may hold what it chose then (a matrix kernel, an inner program). run() is const: calls of one
// function on several threads share it.
class Executable {
 public:
  virtual ~Executable() = default;
  // From the PageSlab where it fits: a steady call reads every node's executable, and together
  // they stay on few pages.
  static void* operator new(size_t bytes);
  static void operator delete(void* p, size_t bytes);
  static void* operator new(size_t bytes, std::align_val_t align) { return ::operator new(bytes, align); }
  static void operator delete(void* p, size_t bytes, std::align_val_t align) { ::operator delete(p, bytes, align); }

  // The bytes of working memory run() needs for inputs and outputs of these shapes. The planner
  // places them in the call's arena for the one instruction; they hold nothing from one run to
  // the next.
  virtual int64_t scratch_bytes(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const {
    (void)inputs, (void)outputs;
    return 0;
  }

  // Whether the working memory depends on the inputs' values and not only their shapes (a sparse
  // product's row accumulator is as long as the second matrix's columns, which its shape value
  // tells): the planner then leaves it to the run, which sizes it with scratch_bytes_of.
  virtual bool scratch_depends_on_values() const { return false; }
  virtual int64_t scratch_bytes_of(InputValues inputs) const {
    (void)inputs;
    return 0;
  }

  // Computes the outputs. Each output arrives allocated with its inferred shape, except those the
  // op declares as views (Op::view_map), which run() sets: an output that still holds the view it
  // set last time, of the same bytes, may be left as it is (set_view does that). No run allocates:
  // what it needs beyond its outputs is `scratch`, at least scratch_bytes() long, 64-byte aligned.
  virtual void run(InputValues inputs, OutputValues outputs, std::span<std::byte> scratch) const = 0;

  // The shapes of the node's outputs for inputs of these shapes (and the values of the inputs its
  // op reads, null where unknown): the op's inference, unless the executable knows more (a scan's
  // compiled body knows the shapes its steps compute, shape arithmetic included).
  virtual std::vector<Shape> infer_shapes(const Node& node, const std::vector<Shape>& inputs,
                                          const std::vector<const Tensor*>& values) const;

  // Memory run() reads besides the executable itself (its op's parameters), which the run loop asks
  // the cache for a few instructions ahead.
  const void* also_reads() const { return also_reads_; }

 protected:
  const void* also_reads_ = nullptr;
};

// One run of an inner program, prepared for inputs of one set of shapes: its slots and memory are
// kept from step to step, so a step allocates nothing.
class InnerRun {
 public:
  virtual ~InnerRun() = default;
  // The tensor inner input i reads: the caller points it at this step's values (in place).
  virtual Tensor& input(size_t i) = 0;
  // Where inner output o ends up: the caller points it at its destination (a row of a stacked
  // output) before a step, and step() writes the output's values there.
  virtual Tensor& destination(size_t o) = 0;
  virtual void step() = 0;
};

// An inner graph compiled once, run step after step.
class InnerProgram {
 public:
  virtual ~InnerProgram() = default;
  // The bytes of working memory a run on inputs of these shapes needs (the outer plan places them
  // in the node's scratch).
  virtual int64_t arena_bytes(const std::vector<Shape>& input_shapes) const = 0;
  // The shapes of its outputs for inputs of these shapes; ShapeError where one is known only
  // while it runs.
  virtual std::vector<Shape> output_shapes(const std::vector<Shape>& input_shapes) const = 0;
  // A run on inputs of these shapes, its working memory in `arena` (at least arena_bytes long).
  virtual std::unique_ptr<InnerRun> start(const std::vector<Shape>& input_shapes, std::span<std::byte> arena) const = 0;
};

// Compiles inner graphs the way the function around them is compiled (its mode's rewrites, its
// planner): implemented by compile/, which sits above the executables, and handed to them when
// they are made.
class InnerCompiler {
 public:
  virtual ~InnerCompiler() = default;
  virtual std::unique_ptr<InnerProgram> compile(const InnerGraph& graph) const = 0;
};

// What making an executable may use beyond its node.
struct MakeContext {
  const InnerCompiler* inner = nullptr;  // null where nobody compiles inner graphs (constant folding)
};

// out = a view of base with this geometry; out is left as it is (no allocation) when it already is
// exactly that view.
void set_view(Tensor& out, const Tensor& base, std::span<const int64_t> shape, std::span<const int64_t> strides,
              int64_t offset);

// One backend's executables by op class: each op family adds its own (ops/*.cpp, add_*_kernels).
class KernelTable {
 public:
  using Make = std::function<std::unique_ptr<Executable>(const Node&, const MakeContext&)>;

  // make(std::shared_ptr<const OpClass>, const Node&[, const MakeContext&]) -> std::unique_ptr<Executable>
  template <class OpClass, class MakeFn> void add(MakeFn make) {
    set(std::type_index(typeid(OpClass)), [make](const Node& node, const MakeContext& context) -> std::unique_ptr<Executable> {
      auto op = std::static_pointer_cast<const OpClass>(node.op);
      if constexpr (std::is_invocable_v<MakeFn, std::shared_ptr<const OpClass>, const Node&, const MakeContext&>)
        return make(std::move(op), node, context);
      else
        return make(std::move(op), node);
    });
  }
  // A Kernel constructed from the op and the node (and the context, when it takes one).
  template <class OpClass, class Kernel> void add() {
    add<OpClass>([](std::shared_ptr<const OpClass> op, const Node& node, const MakeContext& context) -> std::unique_ptr<Executable> {
      if constexpr (std::is_constructible_v<Kernel, std::shared_ptr<const OpClass>, const Node&, const MakeContext&>)
        return std::make_unique<Kernel>(std::move(op), node, context);
      else
        return std::make_unique<Kernel>(std::move(op), node);
    });
  }
  void set(std::type_index op_class, Make make);
  // The node's executable; Error naming the op when this backend has none for its class.
  std::unique_ptr<Executable> make(const Node& node, const MakeContext& context = {}) const;

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
    also_reads_ = op_.get();
  }

 protected:
  const OpClass& op() const { return *op_; }
  DType output_dtype(size_t i) const { return output_dtypes_[i]; }

 private:
  std::shared_ptr<const OpClass> op_;
  std::vector<DType> output_dtypes_;
};

}  // namespace kiln
