#include "ops/composite.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "ops/composite_jit.hpp"
#include "tensor/copy.hpp"
#include "tensor/dispatch.hpp"
#include "tensor/same_dims.hpp"
#include "tensor/small_vector.hpp"
#include "tensor/isa.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

namespace {


// dst and src 64-byte aligned, bytes a multiple of 64 except possibly at the very end; the widest
// stores this CPU has.
[[gnu::target(KILN_TARGET_AVX512)]] size_t stream_copy_avx512(std::byte* dst, const std::byte* src, size_t bytes) {
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64)
    _mm512_stream_si512(reinterpret_cast<__m512i*>(dst + i), _mm512_load_si512(reinterpret_cast<const void*>(src + i)));
  return i;
}
[[gnu::target(KILN_TARGET_AVX2)]] size_t stream_copy_avx2(std::byte* dst, const std::byte* src, size_t bytes) {
  size_t i = 0;
  for (; i + 32 <= bytes; i += 32)
    _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_load_si256(reinterpret_cast<const __m256i*>(src + i)));
  return i;
}
size_t stream_copy_sse2(std::byte* dst, const std::byte* src, size_t bytes) {
  size_t i = 0;
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), _mm_load_si128(reinterpret_cast<const __m128i*>(src + i)));
  return i;
}
void stream_copy(std::byte* dst, const std::byte* src, size_t bytes) {
  const Isa isa = active_isa();
  const size_t done = isa == Isa::avx512 ? stream_copy_avx512(dst, src, bytes)
                      : isa == Isa::avx2 ? stream_copy_avx2(dst, src, bytes)
                                         : stream_copy_sse2(dst, src, bytes);
  std::memcpy(dst + done, src + done, bytes - done);
}

// How a block of one input is obtained.
enum class Feed { direct, splat, gather };

struct InputPlan {
  Feed feed;
  const std::byte* base;
  // For gather: the result's shape as this input is read, axes of size 1 dropped and neighbours
  // that step as one merged, and its strides there (0 on stretched axes).
  const int64_t* dims;
  const int64_t* strides;
  int64_t nd;
};

// An operand of a fused instruction: a block of n values, or one value that stands for all of
// them (a broadcast number, read as a scalar so the loop multiplies by a register, not memory).
struct Operand {
  const void* data;
  bool scalar;
};

// One fused instruction over a block of n values: resolved once per run to the loop for its op,
// dtypes and instruction set, so running a block costs one indirect call per instruction.
using BlockLoop = void (*)(int64_t n, void* dst, const Operand* args, size_t n_args);

template <Isa isa, class Body> void compiled_for(Body body) {
  if constexpr (isa == Isa::avx512) run_compiled_for_avx512(body);
  else if constexpr (isa == Isa::avx2) run_compiled_for_avx2(body);
  else run_compiled_for_baseline(body);
}

// Every access is at index i, and a destination never partly overlaps a source (it is another
// register's block, or exactly the buffer of an input it overwrites in place), so the loops
// vectorize without alias checks.
template <Isa isa, class T, class F> void unary_loop(int64_t n, void* dst, const Operand* args, size_t) {
  compiled_for<isa>([n, dst, args] {
    const F f{};
    const T* a = static_cast<const T*>(args[0].data);
    T* o = static_cast<T*>(dst);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
  });
}

// o[i] = f(a[i], b[i]) with either side possibly one value; add and mul fold further operands in.
template <Isa isa, class T, class F> void binary_loop(int64_t n, void* dst, const Operand* args, size_t n_args) {
  compiled_for<isa>([n, dst, args, n_args] {
    const F f{};
    using R = decltype(f(T{}, T{}));
    R* o = static_cast<R*>(dst);
    auto apply = [&](Operand a, Operand b) {
      const T* x = static_cast<const T*>(a.data);
      const T* y = static_cast<const T*>(b.data);
      if (!a.scalar && !b.scalar) {
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], y[i]);
      } else if (!a.scalar) {
        const T yv = *y;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = f(x[i], yv);
      } else if (!b.scalar) {
        const T xv = *x;
#pragma omp simd
        for (int64_t i = 0; i < n; ++i) o[i] = f(xv, y[i]);
      } else {
        std::fill_n(o, n, f(*x, *y));
      }
    };
    apply(args[0], args[1]);
    if constexpr (std::is_same_v<R, T>)
      for (size_t k = 2; k < n_args; ++k) apply({o, false}, args[k]);
  });
}

template <Isa isa, class O, class I> void cast_loop(int64_t n, void* dst, const Operand* args, size_t) {
  compiled_for<isa>([n, dst, args] {
    const I* a = static_cast<const I*>(args[0].data);
    O* o = static_cast<O*>(dst);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(a[i]);
  });
}

template <Isa isa, class T> void where_loop(int64_t n, void* dst, const Operand* args, size_t) {
  compiled_for<isa>([n, dst, args] {
    const bool* c = static_cast<const bool*>(args[0].data);
    const T *a = static_cast<const T*>(args[1].data), *b = static_cast<const T*>(args[2].data);
    T* o = static_cast<T*>(dst);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
  });
}

template <class T> void fill_loop(int64_t n, void* dst, const Operand* args, size_t) {
  std::memcpy(dst, args[1].data, static_cast<size_t>(n) * sizeof(T));
}

// The loop of one instruction: unary ops, cast, where and fill read blocks; binary ops also take
// scalars.
template <Isa isa> BlockLoop loop_for(const ScalarInstruction& ins, std::span<const DType> arg_dtypes) {
  if (ins.op == ScalarOp::fill) return dispatch_dtype(ins.dtype, [](auto tag) -> BlockLoop { return &fill_loop<decltype(tag)>; });
  if (ins.op == ScalarOp::cast)
    return dispatch_dtype(ins.dtype, [&](auto out_tag) {
      return dispatch_dtype(arg_dtypes[0], [](auto in_tag) -> BlockLoop {
        return &cast_loop<isa, decltype(out_tag), decltype(in_tag)>;
      });
    });
  if (ins.op == ScalarOp::where)
    return dispatch_dtype(ins.dtype, [](auto tag) -> BlockLoop { return &where_loop<isa, decltype(tag)>; });
  const DType in_dtype = arg_dtypes.back();
  return dispatch_dtype(in_dtype, [&](auto tag) {
    using T = decltype(tag);
    BlockLoop loop = nullptr;
    if (arg_dtypes.size() == 1)
      visit_unary<T>(ins.op, [&](auto f, bool) { loop = &unary_loop<isa, T, decltype(f)>; });
    else
      visit_binary<T>(ins.op, [&](auto f, bool) { loop = &binary_loop<isa, T, decltype(f)>; });
    if (!loop) throw TypeError(std::string("composite: ") + scalar_op_name(ins.op) + " has no kernel for " + dtype_name(in_dtype));
    return loop;
  });
}


// n copies of the element at src.
void splat_element(std::byte* dst, const std::byte* src, int64_t n, size_t elem) {
  auto fill = [&](auto tag) {
    using T = decltype(tag);
    T value;
    std::memcpy(&value, src, sizeof(T));
    std::fill_n(reinterpret_cast<T*>(dst), n, value);
  };
  if (elem == 8) fill(uint64_t{});
  else if (elem == 4) fill(uint32_t{});
  else if (elem == 2) fill(uint16_t{});
  else if (elem == 1) std::memset(dst, static_cast<int>(*src), static_cast<size_t>(n));
  else
    for (int64_t k = 0; k < n; ++k) std::memcpy(dst + k * static_cast<int64_t>(elem), src, elem);
}

// Copies block [start, start+n) of a broadcast input (row-major order of the result) into dst, a
// run along the last of its plan's axes at a time: a row spread over a batch (a bias) copies whole
// runs, a value stretched along the last axis (a per-channel bias of an image) fills them.
void gather(const InputPlan& in, int64_t start, int64_t n, size_t elem, std::byte* dst) {
  const int64_t nd = in.nd;
  if (nd == 0) return splat_element(dst, in.base, n, elem);
  Dims index(nd, 0);
  int64_t rest = start, offset = 0;
  for (int64_t d = nd - 1; d >= 0; --d) {
    index[d] = rest % in.dims[d];
    rest /= in.dims[d];
    offset += index[d] * in.strides[d];
  }
  const int64_t last = nd - 1, inner = in.dims[last], step = in.strides[last], es = static_cast<int64_t>(elem);
  for (int64_t i = 0; i < n;) {
    const int64_t run = std::min(inner - index[last], n - i);
    std::byte* out = dst + i * es;
    const std::byte* src = in.base + offset * es;
    if (step == 1) std::memcpy(out, src, static_cast<size_t>(run * es));
    else if (step == 0) splat_element(out, src, run, elem);
    else
      for (int64_t k = 0; k < run; ++k) std::memcpy(out + k * es, src + k * step * es, elem);
    i += run;
    offset += run * step;
    if ((index[last] += run) < inner) continue;
    offset -= inner * step;
    index[last] = 0;
    for (int64_t d = last - 1; d >= 0; --d) {
      offset += in.strides[d];
      if (++index[d] < in.dims[d]) break;
      offset -= in.strides[d] * in.dims[d];
      index[d] = 0;
    }
  }
}

// Broadcasts s into out (NumPy's rule, aligned at the last axis; out has at least s's axes): the
// axis where they conflict, or -1.
template <class Out> int64_t broadcast_one(Out& out, const Shape& s) {
  for (size_t d = 0; d < s.size(); ++d) {
    auto& o = out[d + out.size() - s.size()];
    if (s[d] == o || s[d] == 1) continue;
    if (o != 1) return static_cast<int64_t>(d + out.size() - s.size());
    o = s[d];
  }
  return -1;
}

// The broadcast shape of values (shapes or tensors) into out; the error names the op.
template <class Out, class Values, class ShapeOf>
void broadcast_into(Out& out, const Values& in, ShapeOf shape_of, const Composite& op) {
  size_t nd = 0;
  for (const auto& v : in) nd = std::max(nd, shape_of(v).size());
  out.assign(nd, 1);
  for (const auto& v : in) {
    if (const int64_t axis = broadcast_one(out, shape_of(v)); axis >= 0) {  // out[axis] as it was
      const Shape& s = shape_of(v);
      std::vector<Shape> shapes;
      for (const auto& each : in) shapes.push_back(shape_of(each));
      throw ShapeError(op.name() + ": input shapes cannot be broadcast together (dimension " + std::to_string(axis) + " is " +
                       std::to_string(out[static_cast<size_t>(axis)]) + " vs " +
                       std::to_string(s[static_cast<size_t>(axis) + s.size() - nd]) + ")" + op.where_broadcast_fails(shapes));
    }
  }
}

}  // namespace

std::string Composite::where_broadcast_fails(const std::vector<Shape>& inputs) const {
  std::vector<Shape> shapes(inputs);
  for (const ScalarInstruction& ins : program_) {
    size_t nd = 0;
    for (int a : ins.args) nd = std::max(nd, shapes[static_cast<size_t>(a)].size());
    Shape out(nd, 1);
    for (int a : ins.args)
      if (broadcast_one(out, shapes[static_cast<size_t>(a)]) >= 0) {
        std::string operands;
        for (int b : ins.args) operands += (operands.empty() ? "" : " and ") + shape_str(shapes[static_cast<size_t>(b)]);
        return "; in " + std::string(scalar_op_name(ins.op)) + (ins.origin.empty() ? "" : ", " + ins.origin) + ", of " + operands;
      }
    shapes.push_back(std::move(out));
  }
  return "";
}

bool Composite::fusable_axes(const std::vector<int64_t>& axes, int64_t ndim) {
  if (axes.empty()) return false;
  bool leading = true, trailing = true;
  for (size_t i = 0; i < axes.size(); ++i) {
    leading = leading && axes[i] == static_cast<int64_t>(i);
    trailing = trailing && axes[i] == ndim - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i);
  }
  return leading || trailing;
}

Composite::Composite(int n_inputs, std::vector<ScalarInstruction> program, Type result,
                     std::optional<FusedReduction> reduction, std::vector<int> extra_outputs)
    : n_inputs_(n_inputs),
      program_(std::move(program)),
      result_(std::move(result)),
      reduction_(std::move(reduction)),
      extra_outputs_(std::move(extra_outputs)) {
  const int last = n_inputs_ + static_cast<int>(program_.size()) - 1;
  for (size_t o = 0; o < extra_outputs_.size(); ++o) {
    const int r = extra_outputs_[o];
    const bool repeated = std::find(extra_outputs_.begin(), extra_outputs_.begin() + static_cast<int64_t>(o), r) !=
                          extra_outputs_.begin() + static_cast<int64_t>(o);
    if (reduction_ || r < n_inputs_ || r >= last || repeated)
      throw TypeError("composite: output register " + std::to_string(r) + " must be another instruction's than the last (" +
                       std::to_string(last) + "), once, and without a reduction");
    std::vector<bool> read(static_cast<size_t>(r) + 1, false);
    read[static_cast<size_t>(r)] = true;
    for (int reg = r; reg >= n_inputs_; --reg)
      if (read[static_cast<size_t>(reg)])
        for (int a : program_[static_cast<size_t>(reg - n_inputs_)].args) read[static_cast<size_t>(a)] = true;
    std::vector<int>& inputs = extra_inputs_.emplace_back();
    for (int i = 0; i < n_inputs_; ++i)
      if (read[static_cast<size_t>(i)]) inputs.push_back(i);
  }
}

void Composite::params(OpParams& out) const {
  out << n_inputs_ << result_ << program_.size();
  for (const ScalarInstruction& ins : program_) out << ins.op << ins.dtype << ins.args;
  out << extra_outputs_;
  out << reduction_.has_value();
  if (reduction_) out << reduction_->kind << reduction_->axes << reduction_->keepdims;
}

// Each extra output is marked at the instruction that computes it: "add[out1]".
std::string Composite::name() const {
  std::string s = "composite{";
  for (size_t i = 0; i < program_.size(); ++i) {
    s += (i ? "," : "") + std::string(scalar_op_name(program_[i].op));
    const auto extra = std::find(extra_outputs_.begin(), extra_outputs_.end(), n_inputs_ + static_cast<int>(i));
    if (extra != extra_outputs_.end()) s += "[out" + std::to_string(extra - extra_outputs_.begin() + 1) + "]";
  }
  if (reduction_) s += reduction_->kind == ReduceKind::mean ? "|mean" : "|sum";
  return s + "}";
}

std::vector<Type> Composite::infer_types(const std::vector<Type>& in) const {
  if (static_cast<int>(in.size()) != n_inputs_)
    throw TypeError(name() + ": takes " + std::to_string(n_inputs_) + " inputs, got " + std::to_string(in.size()));
  std::vector<Type> types{result_};
  for (int r : extra_outputs_) types.push_back({program_[static_cast<size_t>(r - n_inputs_)].dtype, result_.broadcastable});
  return types;
}

std::vector<Shape> Composite::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape full;
  broadcast_into(full, in, [](const Shape& s) -> const Shape& { return s; }, *this);
  if (!reduction_) {
    std::vector<Shape> shapes{full};
    for (const std::vector<int>& inputs : extra_inputs_) {
      Shape& own = shapes.emplace_back(full.size(), 1);
      for (int i : inputs) broadcast_one(own, in[static_cast<size_t>(i)]);  // no conflict: checked above
    }
    return shapes;
  }
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(full.size()); ++d) {
    const bool reduced = std::find(reduction_->axes.begin(), reduction_->axes.end(), d) != reduction_->axes.end();
    if (!reduced) out.push_back(full[d]);
    else if (reduction_->keepdims) out.push_back(1);
  }
  return {out};
}

namespace {

// Runs the fused program block by block. A register is a block of values in the scratch the
// planner gives it (per thread), and registers share blocks by liveness, so the blocks one thread
// touches stay in L1 and temporaries never reach main memory; a reduction's partial sums follow
// them. No run allocates.
class CompositeKernel final : public KernelOf<Composite> {
 public:
  CompositeKernel(std::shared_ptr<const Composite> op, const Node& node) : KernelOf(std::move(op), node) {
    for (const Var& in : node.inputs) reg_dtype_.push_back(in.dtype());
    for (const ScalarInstruction& ins : this->op().program()) reg_dtype_.push_back(ins.dtype);
    assign_blocks(static_cast<int>(node.inputs.size()));
    // An input whose every axis is broadcastable is one value whatever the shapes: the compiled
    // loop holds it in a register.
    std::vector<DType> input_dtypes(reg_dtype_.begin(), reg_dtype_.begin() + static_cast<int64_t>(node.inputs.size()));
    for (const Var& in : node.inputs)
      scalar_input_.push_back(std::ranges::all_of(in.type().broadcastable, [](bool b) { return b; }));
    compiled_ = CompiledProgram::compile(this->op().program(), input_dtypes, scalar_input_, active_isa(), this->op().extra_outputs());
    in_place_ready_ = compiled_ && !this->op().reduction();
    for (const ScalarInstruction& ins : this->op().program()) {
      std::vector<DType> arg_dtypes;
      for (int a : ins.args) arg_dtypes.push_back(reg_dtype_[static_cast<size_t>(a)]);
      loops_[static_cast<size_t>(Isa::baseline)].push_back(loop_for<Isa::baseline>(ins, arg_dtypes));
      loops_[static_cast<size_t>(Isa::avx2)].push_back(loop_for<Isa::avx2>(ins, arg_dtypes));
      loops_[static_cast<size_t>(Isa::avx512)].push_back(loop_for<Isa::avx512>(ins, arg_dtypes));
      first_arg_.push_back(static_cast<uint32_t>(n_args_));
      n_args_ += ins.args.size();
    }
    first_arg_.push_back(static_cast<uint32_t>(n_args_));
  }

  // Per thread, the register blocks and the partial sums of a reduction; as many threads as a run
  // of this size uses.
  int64_t scratch_bytes(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override {
    Dims shape;
    broadcast_into(shape, inputs, [](const Shape& s) -> const Shape& { return s; }, op());
    const int64_t total = shape_numel(Shape(shape.begin(), shape.end()));  // ShapeError past 2^63
    const int threads = total >= kParallelElements ? std::max(omp_get_max_threads(), 1) : 1;
    int64_t widened = 0;
    for (size_t e = 0; e + 1 < outputs.size(); ++e)
      if (!std::ranges::equal(outputs[e + 1], shape)) widened += widened_bytes(e, total);
    return static_cast<int64_t>(thread_bytes(block_of(total), op().reduction() ? shape_numel(outputs[0]) : 0)) * threads + widened;
  }

  void run(InputValues in, OutputValues out, std::span<std::byte> scratch) const override;

 private:
  // The room for extra output e computed in the result's shape of `total` elements.
  int64_t widened_bytes(size_t e, int64_t total) const {
    const int64_t bytes = total * static_cast<int64_t>(dtype_size(reg_dtype_[static_cast<size_t>(op().extra_outputs()[e])]));
    return (bytes + 63) / 64 * 64;
  }
  // An extra output smaller than the result (a dimension 1 at run time that the result broadcasts):
  // the pass writes it in the result's shape into scratch, then its own rows are copied out.
  void run_widened(InputValues in, OutputValues out, const Dims& shape, int64_t total, std::span<std::byte> scratch) const;
  // Extra output e when the result is empty along an axis where e is 1: a pass of its own shape,
  // the inputs it does not read standing as zeros, the other outputs discarded. The buffers of this
  // rare case are allocated as it runs.
  void run_alone(InputValues in, OutputValues out, size_t e) const;

  // Each input has a block of its own (filled when it is broadcast); each computed register takes
  // a block that no later instruction reads, never one of its own operands (the loops then never
  // see a destination that overlaps a source), and an extra output's block is kept until the
  // block's program ran. The block length keeps all blocks within kL1Bytes.
  void assign_blocks(int n_inputs) {
    const auto& program = op().program();
    std::vector<int> last_read(reg_dtype_.size(), -1);
    for (size_t k = 0; k < program.size(); ++k)
      for (int a : program[k].args) last_read[static_cast<size_t>(a)] = static_cast<int>(k);
    for (int r : op().extra_outputs()) last_read[static_cast<size_t>(r)] = static_cast<int>(program.size());
    block_of_reg_.assign(reg_dtype_.size(), -1);
    for (int i = 0; i < n_inputs; ++i) block_of_reg_[static_cast<size_t>(i)] = i;
    n_blocks_ = n_inputs;
    std::vector<int> free_blocks;
    for (size_t k = 0; k < program.size(); ++k) {
      const size_t r = static_cast<size_t>(n_inputs) + k;
      if (free_blocks.empty()) {
        block_of_reg_[r] = n_blocks_++;
      } else {
        block_of_reg_[r] = free_blocks.back();
        free_blocks.pop_back();
      }
      for (int a : program[k].args)
        if (a >= n_inputs && last_read[static_cast<size_t>(a)] == static_cast<int>(k) &&
            std::find(free_blocks.begin(), free_blocks.end(), block_of_reg_[static_cast<size_t>(a)]) == free_blocks.end())
          free_blocks.push_back(block_of_reg_[static_cast<size_t>(a)]);
    }
    element_bytes_ = 1;
    for (DType d : reg_dtype_) element_bytes_ = std::max(element_bytes_, dtype_size(d));
    const size_t fit = kL1Bytes / (static_cast<size_t>(n_blocks_) * element_bytes_);
    block_ = kMinBlock;
    while (block_ * 2 <= kMaxBlock && static_cast<size_t>(block_ * 2) <= fit) block_ *= 2;
  }
  int64_t block_of(int64_t total) const { return std::min(block_, std::max<int64_t>(total, 1)); }
  bool operands_in_place(InputValues in, OutputValues out) const {
    const Shape& shape = out[0].shape();
    for (const Tensor& o : out)
      if (!same_dims(o.shape(), shape) || !o.is_contiguous()) return false;
    for (size_t i = 0; i < in.size(); ++i)
      if (!scalar_input_[i] && (!same_dims(in[i].shape(), shape) || !in[i].is_contiguous())) return false;
    return true;
  }
  // Where block b starts in a thread's scratch: 64-byte aligned and, for full blocks, skewed by
  // 192 bytes so that no two start at the same offset within a 4 KiB page (loads and stores 4 KiB
  // apart stall on false address dependencies).
  size_t block_stride(int64_t block) const {
    return (static_cast<size_t>(block) * element_bytes_ + 63) / 64 * 64 + (block == block_ ? 192 : 0);
  }
  size_t blocks_bytes(int64_t block) const { return block_stride(block) * static_cast<size_t>(n_blocks_); }
  size_t thread_bytes(int64_t block, int64_t n_out) const {
    return blocks_bytes(block) + (static_cast<size_t>(n_out) * sizeof(double) + 63) / 64 * 64;
  }

  // The blocks of all registers a thread touches stay within this many bytes: half of the
  // smallest L1 data cache seen (32 KiB).
  static constexpr size_t kL1Bytes = 16 << 10;
  static constexpr int64_t kMinBlock = 256, kMaxBlock = 2048;
  // What every run reads first, together: the program as machine code for the instruction set
  // active when the node was compiled (the interpreter runs it under any other), whether it may
  // run over operands in place (no reduction), and which inputs are one value.
  std::shared_ptr<const CompiledProgram> compiled_;
  bool in_place_ready_ = false;
  SmallVector<bool, 16> scalar_input_;
  std::vector<DType> reg_dtype_;
  // Per instruction set, each instruction's loop for the interpreter; where each one's operands
  // start in the flat operand list.
  std::array<std::vector<BlockLoop>, 3> loops_;
  std::vector<uint32_t> first_arg_;
  size_t n_args_ = 0;
  std::vector<int> block_of_reg_;
  int n_blocks_ = 0;
  size_t element_bytes_ = 1;
  int64_t block_ = kMinBlock;
};

void CompositeKernel::run_widened(InputValues in, OutputValues out, const Dims& shape, int64_t total,
                                  std::span<std::byte> scratch) const {
  const Shape full(shape.begin(), shape.end());
  std::vector<Tensor> outputs(out.begin(), out.end());
  size_t end = scratch.size();
  for (size_t e = 1; e < outputs.size(); ++e) {
    if (std::ranges::equal(outputs[e].shape(), shape)) continue;
    end -= static_cast<size_t>(widened_bytes(e - 1, total));
    const DType dtype = outputs[e].dtype();
    outputs[e] = Tensor::view_of(Storage::borrow(scratch.data() + end, static_cast<size_t>(total) * dtype_size(dtype)), dtype, full,
                                 contiguous_strides(full), 0);
  }
  run(in, OutputValues(outputs), scratch.first(end));
  for (size_t e = 1; e < outputs.size(); ++e) {
    Tensor& own = out[e];
    if (std::ranges::equal(own.shape(), shape)) continue;
    if (total == 0) {
      if (own.numel() > 0) run_alone(in, out, e);
      continue;
    }
    // Its own rows: the first along each axis the result widened.
    copy_broadcast(own, outputs[e].view(own.shape(), outputs[e].strides(), 0));
  }
}

void CompositeKernel::run_alone(InputValues in, OutputValues out, size_t e) const {
  const std::vector<int>& reads = op().inputs_of_extra_output(e - 1);
  std::vector<Tensor> inputs;
  for (size_t i = 0; i < in.size(); ++i)
    inputs.push_back(std::binary_search(reads.begin(), reads.end(), static_cast<int>(i)) ? in[i] : Tensor::zeros({}, in[i].dtype()));
  const Shape& own = out[e].shape();
  std::vector<Tensor> outputs;
  std::vector<Shape> input_shapes, output_shapes;
  for (size_t o = 0; o < out.size(); ++o) {
    outputs.push_back(o == e ? out[e] : Tensor::empty(own, out[o].dtype()));
    output_shapes.push_back(own);
  }
  for (const Tensor& t : inputs) input_shapes.push_back(t.shape());
  std::vector<std::byte> scratch(static_cast<size_t>(scratch_bytes(input_shapes, output_shapes)));
  run(inputs, OutputValues(outputs), scratch);
}

void CompositeKernel::run(InputValues in, OutputValues out, std::span<std::byte> scratch) const {
  const Composite& composite = op();
  // The common case first: every input that is not one value has the outputs' shape, and they all
  // lie contiguous, so the compiled loop runs over them in place with nothing to work out.
  if (in_place_ready_ && compiled_->isa() == active_isa() && operands_in_place(in, out))
    return run_in_place(*compiled_, in, scalar_input_, out);
  const auto& program = composite.program();
  const auto& reduction = composite.reduction();
  const int n_inputs = static_cast<int>(in.size());
  Dims shape;
  broadcast_into(shape, in, [](const Tensor& t) -> const Shape& { return t.shape(); }, composite);
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  for (size_t e = 1; e < out.size(); ++e)
    if (!std::ranges::equal(out[e].shape(), shape)) return run_widened(in, out, shape, total, scratch);
  Tensor& o = out[0];

  const int result_reg = static_cast<int>(reg_dtype_.size()) - 1;
  const DType result_dtype = reg_dtype_[result_reg];

  SmallVector<InputPlan, 16> plans;
  // Room for 24 inputs of 4 dimensions without a heap allocation (a convolution's training step
  // fuses a dozen 4-D operands).
  SmallVector<int64_t, 96> gather_strides(static_cast<size_t>(n_inputs * nd), 0), gather_dims(static_cast<size_t>(n_inputs * nd), 0);
  for (int i = 0; i < n_inputs; ++i) {
    const Tensor& t = in[i];
    const bool direct = same_dims(t.shape(), shape) && t.is_contiguous();
    const Feed feed = direct ? Feed::direct : t.numel() == 1 ? Feed::splat : Feed::gather;
    int64_t* strides = gather_strides.data() + i * nd;
    int64_t* dims = gather_dims.data() + i * nd;
    int64_t kept = 0;
    if (feed == Feed::gather) {
      for (int64_t d = 0; d < t.ndim(); ++d) strides[d + nd - t.ndim()] = t.shape()[d] == 1 ? 0 : t.strides()[d];
      // Runs as long as the layout allows ([N,120,1,1] read with a [1,120,1,1] bias: runs of 120).
      for (int64_t d = 0; d < nd; ++d) {
        if (shape[d] == 1) continue;
        const int64_t stride = strides[d];
        if (kept > 0 && strides[kept - 1] == stride * shape[d]) {
          dims[kept - 1] *= shape[d];
          strides[kept - 1] = stride;
        } else {
          dims[kept] = shape[d];
          strides[kept] = stride;
          ++kept;
        }
      }
    }
    plans.push_back({feed, t.raw_data(), dims, strides, kept});
  }
  const std::vector<int>& extra_outputs = composite.extra_outputs();
  const bool reducing = reduction.has_value();
  bool streaming = !reducing && streams(static_cast<int64_t>(o.nbytes()), o.numel());
  for (const Tensor& t : out) streaming = streaming && reinterpret_cast<uintptr_t>(t.raw_data()) % 64 == 0;
  const CompiledProgram* compiled = compiled_ && compiled_->isa() == active_isa() ? compiled_.get() : nullptr;
  bool whole_ranges = compiled && !reducing;
  for (int i = 0; i < n_inputs; ++i) whole_ranges = whole_ranges && (plans[i].feed == Feed::direct || scalar_input_[i]);
  if (whole_ranges) return run_in_place(*compiled, in, scalar_input_, out);

  // Per instruction, its operands, laid out once per run (a block only moves the operands that
  // read inputs in place and the destination that is the output itself), and its loop.
  const BlockLoop* loops = loops_[static_cast<size_t>(active_isa())].data();
  SmallVector<Operand, 64> operands;
  for (const ScalarInstruction& ins : program) {
    const bool binary = ins.args.size() >= 2 && ins.op != ScalarOp::fill && ins.op != ScalarOp::where;
    for (int a : ins.args) operands.push_back({nullptr, binary && a < n_inputs && plans[a].feed == Feed::splat});
  }
  const uint32_t* first_arg = first_arg_.data();

  // Reduction bookkeeping: each element of a block adds to out[index / inner] (trailing axes) or
  // out[index % outer] (leading axes); all axes is the trailing case with one output.
  int64_t reduce_divisor = 0, reduce_modulus = 0;
  if (reduction) {
    const auto& axes = reduction->axes;
    int64_t reduced_count = 1;
    for (int64_t a : axes) reduced_count *= shape[a];
    const bool leading = axes.front() == 0 && static_cast<int64_t>(axes.size()) < nd;
    if (leading) reduce_modulus = total / std::max<int64_t>(reduced_count, 1);
    else reduce_divisor = std::max<int64_t>(reduced_count, 1);
  }
  const int64_t n_out = reducing ? o.numel() : 0;
  const int64_t block = block_of(total);
  const size_t per_thread = thread_bytes(block, n_out);
  const size_t stride = block_stride(block);

  // The compiled loop writes the output itself (with streaming stores where the interpreter would
  // stream a block), so only the interpreter without it stages the result in a block.
  const bool stage_result = reducing || (streaming && !compiled);
  const size_t result_es = dtype_size(result_dtype);

  auto run_blocks = [&](std::byte* base, int64_t first_block, int64_t last_block, double* partial) {
    const size_t n_regs = reg_dtype_.size();
    SmallVector<const void*, 32> reg(n_regs, nullptr);
    auto block_ptr = [&](size_t r) { return base + static_cast<size_t>(block_of_reg_[r]) * stride; };
    for (int i = 0; i < n_inputs; ++i)
      if (plans[i].feed == Feed::splat) splat_element(block_ptr(static_cast<size_t>(i)), plans[i].base, block, dtype_size(reg_dtype_[i]));
    SmallVector<Operand, 64> args = operands;
    SmallVector<void*, 32> dsts;
    for (size_t k = 0; k < program.size(); ++k) dsts.push_back(block_ptr(static_cast<size_t>(n_inputs) + k));
    SmallVector<const void*, 16> compiled_inputs(static_cast<size_t>(n_inputs), nullptr);
    SmallVector<void*, 16> compiled_outputs(out.size(), nullptr);
    // Elements [start, start + n) of everything, n at most one block: the inputs fed, the program
    // run (compiled, or instruction by instruction over blocks), the result in place (or staged in
    // its block, which reg then names); the interpreter copies extra outputs out of their blocks
    // once the program ran.
    auto run_range = [&](int64_t start, int64_t n) {
      for (int i = 0; i < n_inputs; ++i) {
        const size_t es = dtype_size(reg_dtype_[i]);
        if (plans[i].feed == Feed::direct) {
          reg[i] = plans[i].base + start * static_cast<int64_t>(es);
        } else {
          if (plans[i].feed == Feed::gather) gather(plans[i], start, n, es, block_ptr(static_cast<size_t>(i)));
          reg[i] = block_ptr(static_cast<size_t>(i));
        }
      }
      std::byte* result = stage_result ? block_ptr(static_cast<size_t>(result_reg))
                                       : o.raw_data() + start * static_cast<int64_t>(result_es);
      if (compiled) {
        for (int i = 0; i < n_inputs; ++i) compiled_inputs[i] = scalar_input_[i] ? plans[i].base : reg[i];
        compiled_outputs[0] = result;
        for (size_t e = 0; e < extra_outputs.size(); ++e)
          compiled_outputs[e + 1] = out[e + 1].raw_data() + start * static_cast<int64_t>(dtype_size(out[e + 1].dtype()));
        compiled->run(n, compiled_outputs.data(), compiled_inputs.data(), streaming);
      } else {
        dsts.back() = result;
        for (size_t k = 0; k < program.size(); ++k) {
          const uint32_t first = first_arg[k], count = first_arg[k + 1] - first;
          for (uint32_t j = 0; j < count; ++j) args[first + j].data = reg[program[k].args[j]];
          loops[k](n, dsts[k], args.data() + first, count);
          reg[static_cast<size_t>(n_inputs) + k] = dsts[k];
        }
        for (size_t e = 0; e < extra_outputs.size(); ++e) {
          const size_t es = dtype_size(out[e + 1].dtype());
          std::byte* dst = out[e + 1].raw_data() + start * static_cast<int64_t>(es);
          const auto* src = static_cast<const std::byte*>(reg[static_cast<size_t>(extra_outputs[e])]);
          if (streaming) stream_copy(dst, src, static_cast<size_t>(n) * es);
          else std::memcpy(dst, src, static_cast<size_t>(n) * es);
        }
      }
      reg[result_reg] = result;
    };
    for (int64_t b = first_block; b < last_block; ++b) {
      const int64_t start = b * block, n = std::min(block, total - start);
      // Hardware prefetchers stop at page boundaries and a block is about a page: fetch the next
      // block of each input read in place while this one is computed.
      if (b + 1 < last_block)
        for (int i = 0; i < n_inputs; ++i)
          if (plans[i].feed == Feed::direct) {
            const size_t es = dtype_size(reg_dtype_[i]);
            const std::byte* next = plans[i].base + (start + block) * static_cast<int64_t>(es);
            const int64_t next_bytes = std::min(block, total - start - block) * static_cast<int64_t>(es);
            for (int64_t off = 0; off < next_bytes; off += 64) _mm_prefetch(reinterpret_cast<const char*>(next + off), _MM_HINT_T0);
          }
      run_range(start, n);
      if (streaming && stage_result) {
        stream_copy(o.raw_data() + start * static_cast<int64_t>(result_es), static_cast<const std::byte*>(reg[result_reg]),
                    static_cast<size_t>(n) * result_es);
      }
      if (!reducing) continue;
      dispatch_float(result_dtype, "composite reduction", [&](auto tag) {
        using T = decltype(tag);
        const T* v = static_cast<const T*>(reg[result_reg]);
        if (reduce_modulus) {
          for (int64_t i = 0; i < n; ++i) partial[(start + i) % reduce_modulus] += v[i];
        } else if (reduce_divisor >= total) {
          double acc = 0;
#pragma omp simd reduction(+ : acc)
          for (int64_t i = 0; i < n; ++i) acc += v[i];
          partial[0] += acc;
        } else {
          for (int64_t i = 0; i < n; ++i) partial[(start + i) / reduce_divisor] += v[i];
        }
      });
    }
  };

  const int64_t n_blocks = (total + block - 1) / block;
  // As many threads as the scratch planned for (the thread count may have grown since).
  const int threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(std::max(omp_get_max_threads(), 1)),
                                                        scratch.size() / per_thread));
  // Parallel over blocks when there is enough work; a reduction over everything combines
  // per-thread partial sums, other reductions run on one thread (their outputs interleave).
  const bool parallel = threads > 1 && total >= kParallelElements && !omp_in_parallel() &&
                        (!reducing || reduce_divisor >= total);
  const int used = parallel ? threads : 1;
  const size_t registers_bytes = blocks_bytes(block);
  auto thread_base = [&](int t) { return scratch.data() + static_cast<size_t>(t) * per_thread; };
  auto partial_of = [&](int t) { return reinterpret_cast<double*>(thread_base(t) + registers_bytes); };
  if (reducing)
    for (int t = 0; t < used; ++t) std::fill_n(partial_of(t), n_out, 0.0);
  if (parallel) {
    parallel_region(threads, [&](int t, int nt) {
      for_this_cpu([&] { run_blocks(thread_base(t), n_blocks * t / nt, n_blocks * (t + 1) / nt, partial_of(t)); });
      if (streaming) _mm_sfence();
    });
  } else {
    for_this_cpu([&] { run_blocks(thread_base(0), 0, n_blocks, partial_of(0)); });
    if (streaming) _mm_sfence();
  }
  if (!reducing) return;
  double* sums = partial_of(0);
  for (int t = 1; t < used; ++t)
    for (int64_t i = 0; i < n_out; ++i) sums[i] += partial_of(t)[i];
  // A mean divides by its count (not multiplies by 1/count): the mean of equal values is exact.
  const bool mean = reduction->kind == ReduceKind::mean;
  const double count = n_out ? static_cast<double>(total) / static_cast<double>(n_out) : 0.0;
  dispatch_float(o.dtype(), "composite reduction", [&](auto tag) {
    using T = decltype(tag);
    T* p = o.data<T>();
    for (int64_t i = 0; i < n_out; ++i) p[i] = static_cast<T>(mean ? sums[i] / count : sums[i]);
  });
}

}  // namespace

void add_composite_kernels(KernelTable& table) { table.add<Composite, CompositeKernel>(); }

std::vector<int> Composite::shape_only_inputs() const {
  std::vector<bool> for_values(static_cast<size_t>(n_inputs_), false), read(static_cast<size_t>(n_inputs_), false);
  for (const ScalarInstruction& ins : program_)
    for (size_t a = 0; a < ins.args.size(); ++a)
      if (const int r = ins.args[a]; r < n_inputs_) {
        read[static_cast<size_t>(r)] = true;
        if (!(ins.op == ScalarOp::fill && a == 0)) for_values[static_cast<size_t>(r)] = true;
      }
  std::vector<int> inputs;
  for (int i = 0; i < n_inputs_; ++i)
    if (read[static_cast<size_t>(i)] && !for_values[static_cast<size_t>(i)]) inputs.push_back(i);
  return inputs;
}

std::vector<std::pair<int, int>> Composite::inplace_options() const {
  // The last instruction writes the result's block directly; an n-ary one (a * b * c) writes its
  // first pair before it reads the third operand onwards, which therefore may not be overwritten.
  // Extra outputs are copied out of their blocks once the block's whole program ran.
  const ScalarInstruction& last = program_.back();
  std::vector<bool> read_late(static_cast<size_t>(n_inputs_), false);
  if (last.op != ScalarOp::where)
    for (size_t a = 2; a < last.args.size(); ++a)
      if (last.args[a] < n_inputs_) read_late[static_cast<size_t>(last.args[a])] = true;
  std::vector<std::pair<int, int>> options;
  for (int i = 0; i < n_inputs_; ++i)
    if (!read_late[static_cast<size_t>(i)]) options.push_back({0, i});
  for (size_t o = 1; o <= extra_outputs_.size(); ++o)
    for (int i = 0; i < n_inputs_; ++i) options.push_back({static_cast<int>(o), i});
  return options;
}

std::vector<Var> Composite::L_op(const Node& node, const std::vector<Var>&) const {
  throw GradError(name() + " is a fused op made while compiling (" + node.origin() +
                  "); differentiate the graph before compiling it");
}

}  // namespace kiln
