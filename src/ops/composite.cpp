#include "ops/composite.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>

#include "tensor/dispatch.hpp"
#include "tensor/small_vector.hpp"
#include "tensor/isa.hpp"
#include "tensor/parallel.hpp"

namespace kiln {

namespace {

constexpr int64_t kBlock = 1024;
constexpr int64_t kParallelElements = 1 << 15;
// Outputs larger than the caches are written with non-temporal stores, like a large memcpy: the
// lines are not read first (ordinary stores read each line before writing it: 50% more traffic).
constexpr int64_t kStreamingBytes = int64_t{8} << 20;

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
  const int64_t* strides;  // broadcast strides (0 on stretched axes), for gather
};

void run_instruction(const ScalarInstruction& ins, int64_t n, void* dst, std::span<const void* const> args,
                     std::span<const DType> arg_dtypes) {
  const DType in_dtype = arg_dtypes.empty() ? ins.dtype : arg_dtypes.back();
  if (ins.op == ScalarOp::fill) {
    std::memcpy(dst, args[1], static_cast<size_t>(n) * dtype_size(ins.dtype));
    return;
  }
  if (ins.op == ScalarOp::cast) {
    dispatch_dtype(ins.dtype, [&](auto out_tag) {
      using O = decltype(out_tag);
      dispatch_dtype(arg_dtypes[0], [&](auto in_tag) {
        using I = decltype(in_tag);
        const I* a = static_cast<const I*>(args[0]);
        O* o = static_cast<O*>(dst);
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<O>(a[i]);
      });
    });
    return;
  }
  if (ins.op == ScalarOp::where) {
    dispatch_dtype(ins.dtype, [&](auto tag) {
      using T = decltype(tag);
      const bool* c = static_cast<const bool*>(args[0]);
      const T *a = static_cast<const T*>(args[1]), *b = static_cast<const T*>(args[2]);
      T* o = static_cast<T*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = c[i] ? a[i] : b[i];
    });
    return;
  }
  dispatch_dtype(in_dtype, [&](auto tag) {
    using T = decltype(tag);
    bool found;
    if (args.size() == 1) {
      found = visit_unary<T>(ins.op, [&](auto f, bool) {
        const T* a = static_cast<const T*>(args[0]);
        T* o = static_cast<T*>(dst);
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);
      });
    } else {
      found = visit_binary<T>(ins.op, [&](auto f, bool) {
        using R = decltype(f(T{}, T{}));
        R* o = static_cast<R*>(dst);
        const T *a = static_cast<const T*>(args[0]), *b = static_cast<const T*>(args[1]);
        for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
        if constexpr (std::is_same_v<R, T>)
          for (size_t k = 2; k < args.size(); ++k) {
            const T* c = static_cast<const T*>(args[k]);
            for (int64_t i = 0; i < n; ++i) o[i] = f(o[i], c[i]);
          }
      });
    }
    if (!found) throw TypeError(std::string("composite: ") + scalar_op_name(ins.op) + " has no kernel for " + dtype_name(in_dtype));
  });
}

// Copies block [start, start+n) of a broadcast input (row-major order of `shape`) into dst.
void gather(const InputPlan& in, std::span<const int64_t> shape, int64_t start, int64_t n, size_t elem, std::byte* dst) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  Dims index(nd, 0);
  int64_t rest = start, offset = 0;
  for (int64_t d = nd - 1; d >= 0; --d) {
    index[d] = rest % shape[d];
    rest /= shape[d];
    offset += index[d] * in.strides[d];
  }
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + i * elem, in.base + offset * static_cast<int64_t>(elem), elem);
    for (int64_t d = nd - 1; d >= 0; --d) {
      offset += in.strides[d];
      if (++index[d] < shape[d]) break;
      offset -= in.strides[d] * shape[d];
      index[d] = 0;
    }
  }
}

// The broadcast shape of values (shapes or tensors) into out; the error names the op.
template <class Out, class Values, class ShapeOf>
void broadcast_into(Out& out, const Values& in, ShapeOf shape_of, const Composite& op) {
  size_t nd = 0;
  for (const auto& v : in) nd = std::max(nd, shape_of(v).size());
  out.assign(nd, 1);
  for (const auto& v : in) {
    const Shape& s = shape_of(v);
    for (size_t d = 0; d < s.size(); ++d) {
      const size_t od = d + nd - s.size();
      if (s[d] == out[od] || s[d] == 1) continue;
      if (out[od] != 1)
        throw ShapeError(op.name() + ": input shapes cannot be broadcast together (dimension " + std::to_string(od) + " is " +
                         std::to_string(out[od]) + " vs " + std::to_string(s[d]) + ")");
      out[od] = s[d];
    }
  }
}

}  // namespace

bool Composite::fusable_axes(const std::vector<int64_t>& axes, int64_t ndim) {
  if (axes.empty()) return false;
  bool leading = true, trailing = true;
  for (size_t i = 0; i < axes.size(); ++i) {
    leading = leading && axes[i] == static_cast<int64_t>(i);
    trailing = trailing && axes[i] == ndim - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i);
  }
  return leading || trailing;
}

void Composite::params(OpParams& out) const {
  out << n_inputs_ << result_ << program_.size();
  for (const ScalarInstruction& ins : program_) out << ins.op << ins.dtype << ins.args;
  out << reduction_.has_value();
  if (reduction_) out << reduction_->kind << reduction_->axes << reduction_->keepdims;
}

std::string Composite::name() const {
  std::string s = "composite{";
  for (size_t i = 0; i < program_.size(); ++i) s += (i ? "," : "") + std::string(scalar_op_name(program_[i].op));
  if (reduction_) s += reduction_->kind == ReduceKind::mean ? "|mean" : "|sum";
  return s + "}";
}

std::vector<Type> Composite::infer_types(const std::vector<Type>& in) const {
  if (static_cast<int>(in.size()) != n_inputs_)
    throw TypeError(name() + ": takes " + std::to_string(n_inputs_) + " inputs, got " + std::to_string(in.size()));
  return {result_};
}

std::vector<Shape> Composite::infer_shapes(const std::vector<Shape>& in, const std::vector<const Tensor*>&) const {
  Shape full;
  broadcast_into(full, in, [](const Shape& s) -> const Shape& { return s; }, *this);
  if (!reduction_) return {full};
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(full.size()); ++d) {
    const bool reduced = std::find(reduction_->axes.begin(), reduction_->axes.end(), d) != reduction_->axes.end();
    if (!reduced) out.push_back(full[d]);
    else if (reduction_->keepdims) out.push_back(1);
  }
  return {out};
}

namespace {

// Runs the fused program block by block. Its registers (a block of each, per thread) and the
// partial sums of a reduction (per thread) live in the scratch the planner gives it: no run
// allocates.
class CompositeKernel final : public KernelOf<Composite> {
 public:
  CompositeKernel(std::shared_ptr<const Composite> op, const Node& node) : KernelOf(std::move(op), node) {
    for (const Var& in : node.inputs) reg_dtype_.push_back(in.dtype());
    for (const ScalarInstruction& ins : this->op().program()) reg_dtype_.push_back(ins.dtype);
  }

  // Per thread, a block of each register and the partial sums of a reduction; as many threads as
  // a run of this size uses.
  int64_t scratch_bytes(const std::vector<Shape>& inputs, const std::vector<Shape>& outputs) const override {
    Dims shape;
    broadcast_into(shape, inputs, [](const Shape& s) -> const Shape& { return s; }, op());
    int64_t total = 1;
    for (int64_t d : shape) total *= d;
    const int threads = total >= kParallelElements ? std::max(omp_get_max_threads(), 1) : 1;
    return static_cast<int64_t>(thread_bytes(block_of(total), op().reduction() ? shape_numel(outputs[0]) : 0)) * threads;
  }

  void run(std::span<const Tensor> in, std::span<Tensor> out, std::span<std::byte> scratch) const override;

 private:
  static int64_t block_of(int64_t total) { return std::min(kBlock, std::max<int64_t>(total, 1)); }
  // Where each register's block starts in a thread's scratch: 64-byte aligned and, for full
  // blocks, skewed by 192 bytes so that no two start at the same offset within a 4 KiB page (loads
  // and stores 4 KiB apart stall on false address dependencies). Returns the bytes of all of them.
  template <class Visit> size_t lay_out_registers(int64_t block, Visit visit) const {
    const size_t skew = block == kBlock ? 192 : 0;
    size_t bytes = 0;
    for (size_t r = 0; r < reg_dtype_.size(); ++r) {
      visit(r, bytes);
      bytes += (static_cast<size_t>(block) * dtype_size(reg_dtype_[r]) + 63) / 64 * 64 + skew;
    }
    return (bytes + 63) / 64 * 64;
  }
  size_t thread_bytes(int64_t block, int64_t n_out) const {
    return lay_out_registers(block, [](size_t, size_t) {}) + (static_cast<size_t>(n_out) * sizeof(double) + 63) / 64 * 64;
  }

  std::vector<DType> reg_dtype_;
};

void CompositeKernel::run(std::span<const Tensor> in, std::span<Tensor> out, std::span<std::byte> scratch) const {
  const Composite& composite = op();
  const auto& program = composite.program();
  const auto& reduction = composite.reduction();
  const int n_inputs = static_cast<int>(in.size());
  Dims shape;
  broadcast_into(shape, in, [](const Tensor& t) -> const Shape& { return t.shape(); }, composite);
  const int64_t nd = static_cast<int64_t>(shape.size());
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  Tensor& o = out[0];

  const int result_reg = static_cast<int>(reg_dtype_.size()) - 1;
  const DType result_dtype = reg_dtype_[result_reg];

  SmallVector<InputPlan, 16> plans;
  Dims gather_strides(static_cast<size_t>(n_inputs * nd), 0);
  for (int i = 0; i < n_inputs; ++i) {
    const Tensor& t = in[i];
    const bool direct = std::ranges::equal(t.shape(), shape) && t.is_contiguous();
    const Feed feed = direct ? Feed::direct : t.numel() == 1 ? Feed::splat : Feed::gather;
    int64_t* strides = gather_strides.data() + i * nd;
    if (feed == Feed::gather)
      for (int64_t d = 0; d < t.ndim(); ++d) strides[d + nd - t.ndim()] = t.shape()[d] == 1 ? 0 : t.strides()[d];
    plans.push_back({feed, t.raw_data(), strides});
  }

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
  const bool reducing = reduction.has_value();
  const bool streaming = !reducing && static_cast<int64_t>(o.nbytes()) >= kStreamingBytes &&
                         reinterpret_cast<uintptr_t>(o.raw_data()) % 64 == 0;
  const int64_t n_out = reducing ? o.numel() : 0;
  const int64_t block = block_of(total);
  const size_t per_thread = thread_bytes(block, n_out);
  SmallVector<size_t, 32> reg_offset(reg_dtype_.size(), 0);
  const size_t reg_bytes = lay_out_registers(block, [&](size_t r, size_t offset) { reg_offset[r] = offset; });

  auto run_blocks = [&](std::byte* base, int64_t first_block, int64_t last_block, double* partial) {
    const size_t n_regs = reg_dtype_.size();
    SmallVector<const void*, 32> reg(n_regs, nullptr);
    auto block_of = [&](size_t r) { return base + reg_offset[r]; };
    for (int i = 0; i < n_inputs; ++i)
      if (plans[i].feed == Feed::splat) {
        const size_t es = dtype_size(reg_dtype_[i]);
        std::byte* dst = block_of(i);
        for (int64_t k = 0; k < block; ++k) std::memcpy(dst + k * es, plans[i].base, es);
      }
    SmallVector<const void*, 8> args;
    SmallVector<DType, 8> arg_dtypes;
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
      for (int i = 0; i < n_inputs; ++i) {
        const size_t es = dtype_size(reg_dtype_[i]);
        if (plans[i].feed == Feed::direct) reg[i] = plans[i].base + start * static_cast<int64_t>(es);
        else if (plans[i].feed == Feed::splat) reg[i] = block_of(i);
        else {
          gather(plans[i], shape, start, n, es, block_of(i));
          reg[i] = block_of(i);
        }
      }
      for (size_t k = 0; k < program.size(); ++k) {
        const int r = n_inputs + static_cast<int>(k);
        void* dst = (!reducing && !streaming && r == result_reg)
                        ? static_cast<void*>(o.raw_data() + start * static_cast<int64_t>(dtype_size(result_dtype)))
                        : static_cast<void*>(block_of(r));
        args.clear();
        arg_dtypes.clear();
        for (int a : program[k].args) {
          args.push_back(reg[a]);
          arg_dtypes.push_back(reg_dtype_[a]);
        }
        run_instruction(program[k], n, dst, args, arg_dtypes);
        reg[r] = dst;
      }
      if (streaming) {
        const size_t es = dtype_size(result_dtype);
        stream_copy(o.raw_data() + start * static_cast<int64_t>(es), static_cast<const std::byte*>(reg[result_reg]),
                    static_cast<size_t>(n) * es);
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
  auto thread_base = [&](int t) { return scratch.data() + static_cast<size_t>(t) * per_thread; };
  auto partial_of = [&](int t) { return reinterpret_cast<double*>(thread_base(t) + reg_bytes); };
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

std::vector<std::pair<int, int>> Composite::inplace_options() const {
  // The last instruction writes the result's block directly; an n-ary one (a * b * c) writes its
  // first pair before it reads the third operand onwards, which therefore may not be overwritten.
  const ScalarInstruction& last = program_.back();
  std::vector<bool> read_late(static_cast<size_t>(n_inputs_), false);
  if (last.op != ScalarOp::where)
    for (size_t a = 2; a < last.args.size(); ++a)
      if (last.args[a] < n_inputs_) read_late[static_cast<size_t>(last.args[a])] = true;
  std::vector<std::pair<int, int>> options;
  for (int i = 0; i < n_inputs_; ++i)
    if (!read_late[static_cast<size_t>(i)]) options.push_back({0, i});
  return options;
}

std::vector<Var> Composite::L_op(const Node& node, const std::vector<Var>&) const {
  throw GradError(name() + " is a fused op made while compiling (" + node.origin() +
                  "); differentiate the graph before compiling it");
}

}  // namespace kiln
