#include "ops/composite_jit.hpp"

#include <immintrin.h>
#include <omp.h>
#include <xbyak/xbyak.h>

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <unordered_map>

#include "ops/composite.hpp"
#include "tensor/parallel.hpp"
#include "tensor/small_vector.hpp"

namespace kiln {

namespace {

// Emission gives up on a program (the interpreter runs it) with one of these.
struct OutOfRegisters {};
struct Unsupported {};

// vcmpps predicates, as C++ compares: false when an operand is NaN, except unordered and
// not-greater (!(a > b)), true then.
constexpr uint8_t kLess = 0x11, kGreater = 0x1E, kUnordered = 0x03, kNotGreater = 0x1A;

// Emits the loop of one program for one instruction set and unroll factor. The function made is
// void(int64_t n, void* const* outs, const void* const* inputs, int nontemporal) in the System V
// ABI.
class ProgramEmitter : public Xbyak::CodeGenerator {
 public:
  ProgramEmitter(const std::vector<ScalarInstruction>& program, std::span<const DType> input_dtypes,
                 std::span<const bool> scalar_input, std::span<const int> extra_outputs, Isa isa, int unroll)
      : Xbyak::CodeGenerator(4096, Xbyak::AutoGrow),
        program_(program),
        n_inputs_(static_cast<int>(input_dtypes.size())),
        scalar_input_(scalar_input.begin(), scalar_input.end()),
        isa_(isa),
        unroll_(unroll) {
    output_regs_.push_back(n_inputs_ + static_cast<int>(program.size()) - 1);
    output_regs_.insert(output_regs_.end(), extra_outputs.begin(), extra_outputs.end());
    const DType dtype = input_dtypes.empty() ? program.back().dtype : input_dtypes[0];
    if (dtype != DType::f32 && dtype != DType::f64) throw Unsupported{};
    for (DType d : input_dtypes)
      if (d != dtype) throw Unsupported{};
    for (const ScalarInstruction& ins : program)
      if (ins.dtype != dtype) throw Unsupported{};
    f64_ = dtype == DType::f64;
    element_bytes_ = f64_ ? 8 : 4;
    vector_bytes_ = isa == Isa::avx512 ? 64 : 32;
    n_vregs_ = isa == Isa::avx512 ? 32 : 16;
    free_.assign(static_cast<size_t>(n_vregs_), true);
    last_read_.assign(static_cast<size_t>(n_inputs_) + program.size(), -1);
    for (size_t k = 0; k < program.size(); ++k)
      for (int a : program[k].args) last_read_[static_cast<size_t>(a)] = static_cast<int>(k);
    // The outputs: stored after the last instruction.
    for (int r : output_regs_) last_read_[static_cast<size_t>(r)] = static_cast<int>(program.size());
    emit_function();
    ready(Xbyak::CodeArray::PROTECT_RE);
  }

 private:
  using Xmm = Xbyak::Xmm;

  Xmm vreg(int i) const { return isa_ == Isa::avx512 ? Xmm(Xbyak::Zmm(i)) : Xmm(Xbyak::Ymm(i)); }
  int take() {
    for (int i = 0; i < n_vregs_; ++i)
      if (free_[static_cast<size_t>(i)]) {
        free_[static_cast<size_t>(i)] = false;
        return i;
      }
    throw OutOfRegisters{};
  }
  Xmm temp() { return vreg(take()); }
  void release(const Xmm& r) { free_[static_cast<size_t>(r.getIdx())] = true; }

  // A vector of `bits` repeated, in the constant pool after the code.
  Xbyak::Address pooled(uint64_t bits, int bytes) {
    auto [it, fresh] = pool_offset_.try_emplace({bits, bytes}, pool_.size());
    if (fresh)
      for (int i = 0; i < vector_bytes_; i += bytes)
        for (int b = 0; b < bytes; ++b) pool_.push_back(static_cast<uint8_t>(bits >> (8 * b)));
    return ptr[rip + pool_label_ + static_cast<int64_t>(it->second)];
  }
  Xbyak::Address constant(double v) {
    return f64_ ? pooled(std::bit_cast<uint64_t>(v), 8) : pooled(std::bit_cast<uint32_t>(static_cast<float>(v)), 4);
  }
  Xbyak::Address int32_constant(int32_t v) { return pooled(static_cast<uint32_t>(v), 4); }
  Xbyak::Address sign_bit() { return f64_ ? pooled(uint64_t{1} << 63, 8) : pooled(uint32_t{1} << 31, 4); }
  Xbyak::Address magnitude_bits() { return f64_ ? pooled(~(uint64_t{1} << 63), 8) : pooled(~(uint32_t{1} << 31), 4); }

  void fadd(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vaddpd(d, a, b) : vaddps(d, a, b); }
  void fsub(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vsubpd(d, a, b) : vsubps(d, a, b); }
  void fmul(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vmulpd(d, a, b) : vmulps(d, a, b); }
  void fdiv(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vdivpd(d, a, b) : vdivps(d, a, b); }
  // x86's max and min: a > b ? a : b and a < b ? a : b (so b when either is NaN).
  void fmax(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vmaxpd(d, a, b) : vmaxps(d, a, b); }
  void fmin(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vminpd(d, a, b) : vminps(d, a, b); }
  void fxor(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vxorpd(d, a, b) : vxorps(d, a, b); }
  void fand(const Xmm& d, const Xmm& a, const Xbyak::Operand& b) { f64_ ? vandpd(d, a, b) : vandps(d, a, b); }
  void load(const Xmm& d, const Xbyak::Address& a) { f64_ ? vmovupd(d, a) : vmovups(d, a); }
  void copy(const Xmm& d, const Xmm& a) {
    if (d.getIdx() != a.getIdx()) f64_ ? vmovapd(d, a) : vmovaps(d, a);
  }

  // d = (a pred b) ? t : d.
  void select(const Xmm& d, const Xmm& a, const Xbyak::Operand& b, uint8_t pred, const Xbyak::Operand& t) {
    if (isa_ == Isa::avx512) {
      f64_ ? vcmppd(k1, a, b, pred) : vcmpps(k1, a, b, pred);
      f64_ ? vblendmpd(d | k1, d, t) : vblendmps(d | k1, d, t);
    } else {
      const Xmm m = temp();
      f64_ ? vcmppd(m, a, b, pred) : vcmpps(m, a, b, pred);
      f64_ ? vblendvpd(d, d, t, m) : vblendvps(d, d, t, m);
      release(m);
    }
  }
  // d = (a pred b) ? value : 0.
  void mask_of(const Xmm& d, const Xmm& a, const Xbyak::Operand& b, uint8_t pred, const Xbyak::Address& value) {
    if (isa_ == Isa::avx512) {
      f64_ ? vcmppd(k1, a, b, pred) : vcmpps(k1, a, b, pred);
      f64_ ? vmovupd(d | k1 | T_z, value) : vmovups(d | k1 | T_z, value);
    } else {
      f64_ ? vcmppd(d, a, b, pred) : vcmpps(d, a, b, pred);
      fand(d, d, value);
    }
  }

  // fastmath::exp_f32_in_range, operation for operation (fused multiply-adds where it has
  // std::fma); d and v differ.
  void emit_exp_in_range(const Xmm& d, const Xmm& v) {
    const Xmm n = temp(), r = temp(), u = temp();
    vmovups(n, constant(12582912.0f));
    vfmadd231ps(n, v, constant(1.44269504088896341f));
    vsubps(n, n, constant(12582912.0f));
    copy(r, v);
    vfnmadd231ps(r, n, constant(0.693359375f));
    vfmadd231ps(r, n, constant(2.12194440e-4f));
    vmovups(d, constant(1.9875691500e-4f));
    for (float coefficient : {1.3981999507e-3f, 8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f})
      vfmadd213ps(d, r, constant(coefficient));
    vmulps(d, d, r);
    vfmadd213ps(d, r, r);
    vaddps(d, d, constant(1.0f));
    vcvttps2dq(n, n);
    vpsrad(u, n, 1);
    vpsubd(n, n, u);
    vpaddd(u, u, int32_constant(127));
    vpslld(u, u, 23);
    vpaddd(n, n, int32_constant(127));
    vpslld(n, n, 23);
    vmulps(d, d, u);
    vmulps(d, d, n);
    release(n), release(r), release(u);
  }

  // fastmath::exp_f32; d and x differ.
  void emit_exp(const Xmm& d, const Xmm& x) {
    constexpr float kLogMax = 88.72283905f, kLogMin = -87.33654475f;
    const Xmm c = temp();
    vmaxps(c, x, constant(kLogMin));  // NaN gives kLogMin here; the result is x then (below)
    vminps(c, c, constant(kLogMax));
    emit_exp_in_range(d, c);
    release(c);
    select(d, x, constant(kLogMax), kGreater, constant(std::numeric_limits<float>::infinity()));
    select(d, x, constant(kLogMin), kLess, constant(0.0f));
    select(d, x, x, kUnordered, x);
  }

  // fastmath::tanh_f32.
  void emit_tanh(const Xmm& d, const Xmm& x) {
    const Xmm ax = temp(), z = temp(), small = temp();
    fand(ax, x, magnitude_bits());
    vmulps(z, x, x);
    vmovups(small, constant(-5.70498872745e-3f));
    for (float coefficient : {2.06390887954e-2f, -5.37397155531e-2f, 1.33314422036e-1f, -3.33332819422e-1f})
      vfmadd213ps(small, z, constant(coefficient));
    vmulps(small, small, z);
    vfmadd213ps(small, x, x);
    release(z);
    const Xmm m = temp(), e = temp();
    vminps(m, ax, constant(20.0f));  // ax < 20 ? ax : 20
    vmulps(m, m, constant(2.0f));
    emit_exp_in_range(e, m);
    vaddps(e, e, constant(1.0f));
    vmovups(m, constant(2.0f));
    vdivps(m, m, e);
    vmovups(e, constant(1.0f));
    vsubps(e, e, m);  // the magnitude
    release(m);
    fxor(d, e, sign_bit());
    select(e, x, constant(0.0f), kLess, d);  // x < 0 ? -magnitude : magnitude
    copy(d, e);
    release(e);
    select(d, ax, constant(0.625f), kLess, small);
    release(small);
    select(d, ax, constant(0.0f), kNotGreater, x);  // NaN, and -0 (the polynomial gives +0 there)
    release(ax);
  }

  // fastmath::sigmoid_f32: 1 / (1 + exp(-x)).
  void emit_sigmoid(const Xmm& d, const Xmm& x) {
    const Xmm negated = temp(), e = temp();
    fxor(negated, x, sign_bit());
    emit_exp(e, negated);
    release(negated);
    vaddps(e, e, constant(1.0f));
    vmovups(d, constant(1.0f));
    vdivps(d, d, e);
    release(e);
  }

  // vroundps / vrndscaleps with the rounding mode in imm (NaN stays NaN, -0.0 stays -0.0).
  void round_to_integer(const Xmm& d, const Xmm& x, uint8_t imm) {
    if (isa_ == Isa::avx512) f64_ ? vrndscalepd(d, x, imm) : vrndscaleps(d, x, imm);
    else f64_ ? vroundpd(d, x, imm) : vroundps(d, x, imm);
  }

  // One instruction: d is a fresh register, distinct from every operand.
  void emit_instruction(const ScalarInstruction& ins, const Xmm& d, const std::vector<Xmm>& a) {
    auto float_only = [&] {
      if (f64_) throw Unsupported{};  // f64 transcendental functions are libm's: the interpreter runs them
    };
    switch (ins.op) {
      case ScalarOp::add: case ScalarOp::mul:
        (ins.op == ScalarOp::add ? fadd(d, a[0], a[1]) : fmul(d, a[0], a[1]));
        for (size_t k = 2; k < a.size(); ++k) ins.op == ScalarOp::add ? fadd(d, d, a[k]) : fmul(d, d, a[k]);
        return;
      case ScalarOp::sub: return fsub(d, a[0], a[1]);
      case ScalarOp::div: return fdiv(d, a[0], a[1]);
      case ScalarOp::maximum:  // x != x ? x : (x > y ? x : y)
        fmax(d, a[0], a[1]);
        return select(d, a[0], a[0], kUnordered, a[0]);
      case ScalarOp::minimum:  // x != x ? x : (x < y ? x : y)
        fmin(d, a[0], a[1]);
        return select(d, a[0], a[0], kUnordered, a[0]);
      case ScalarOp::neg: return fxor(d, a[0], sign_bit());
      case ScalarOp::sqr: return fmul(d, a[0], a[0]);
      case ScalarOp::relu:  // x > 0 || x != x ? x : 0
        fmax(d, a[0], constant(0.0));
        return select(d, a[0], a[0], kUnordered, a[0]);
      case ScalarOp::abs: return fand(d, a[0], magnitude_bits());  // fabs: the sign bit cleared
      case ScalarOp::sign: {  // x != x ? x : (0 < x) - (x < 0)
        const Xmm t = temp();
        mask_of(d, a[0], constant(0.0), kGreater, constant(1.0));
        mask_of(t, a[0], constant(0.0), kLess, constant(1.0));
        fsub(d, d, t);
        release(t);
        return select(d, a[0], a[0], kUnordered, a[0]);
      }
      case ScalarOp::sqrt: return f64_ ? vsqrtpd(d, a[0]) : vsqrtps(d, a[0]);
      // std::floor, std::ceil and std::nearbyint (to the even neighbour), exceptions suppressed (bit 3).
      case ScalarOp::floor: return round_to_integer(d, a[0], 0x09);
      case ScalarOp::ceil: return round_to_integer(d, a[0], 0x0A);
      case ScalarOp::round: return round_to_integer(d, a[0], 0x08);
      case ScalarOp::fill: return copy(d, a[1]);
      case ScalarOp::exp: float_only(); return emit_exp(d, a[0]);
      case ScalarOp::tanh: float_only(); return emit_tanh(d, a[0]);
      case ScalarOp::sigmoid: float_only(); return emit_sigmoid(d, a[0]);
      default: throw Unsupported{};
    }
  }

  // How the body reads and writes memory: whole vectors (plain or streaming stores), or the
  // lanes of the tail's mask (AVX-512: k2; AVX2: the vector register tail_mask_), which also
  // keeps the loads from touching memory past the end.
  enum class Access { whole, streaming, masked };

  void load_input(const Xmm& d, const Xbyak::Address& at, Access access) {
    if (access != Access::masked) return load(d, at);
    if (isa_ == Isa::avx512) f64_ ? vmovupd(d | k2 | T_z, at) : vmovups(d | k2 | T_z, at);
    else f64_ ? vmaskmovpd(d, vreg(tail_mask_), at) : vmaskmovps(d, vreg(tail_mask_), at);
  }
  void store_result(const Xbyak::Address& at, const Xmm& r, Access access) {
    if (access == Access::streaming) f64_ ? vmovntpd(at, r) : vmovntps(at, r);
    else if (access == Access::whole) f64_ ? vmovupd(at, r) : vmovups(at, r);
    else if (isa_ == Isa::avx512) f64_ ? vmovupd(at | k2, r) : vmovups(at | k2, r);
    else f64_ ? vmaskmovpd(at, vreg(tail_mask_), r) : vmaskmovps(at, vreg(tail_mask_), r);
  }

  // One pass of the loop body: `copies` copies of the program over consecutive vectors,
  // instruction by instruction (the copies are independent, so their latencies overlap), then the
  // stores of every output (after every load, so an output may overwrite an input).
  void emit_body(int copies, Access access) {
    const size_t n_regs = static_cast<size_t>(n_inputs_) + program_.size();
    std::vector<std::vector<int>> value(static_cast<size_t>(copies), std::vector<int>(n_regs, -1));
    for (int i = 0; i < n_inputs_; ++i)
      if (scalar_input_[static_cast<size_t>(i)])
        for (auto& copy_values : value) copy_values[static_cast<size_t>(i)] = scalar_reg_[static_cast<size_t>(i)];
    for (size_t k = 0; k < program_.size(); ++k) {
      const ScalarInstruction& ins = program_[k];
      for (int u = 0; u < copies; ++u) {
        std::vector<int>& v = value[static_cast<size_t>(u)];
        std::vector<Xmm> args;
        for (int a : ins.args) {
          int& r = v[static_cast<size_t>(a)];
          if (r < 0) {  // an input read in place, loaded at its first use
            r = take();
            load_input(vreg(r), ptr[input_ptr_[static_cast<size_t>(a)] + rdx + u * vector_bytes_], access);
          }
          args.push_back(vreg(r));
        }
        const int out = take();
        emit_instruction(ins, vreg(out), args);
        v[static_cast<size_t>(n_inputs_) + k] = out;
        if (last_read_[static_cast<size_t>(n_inputs_) + k] < 0) free_[static_cast<size_t>(out)] = true;  // never read
        for (int a : ins.args) {
          const size_t ar = static_cast<size_t>(a);
          const bool scalar = a < n_inputs_ && scalar_input_[ar];
          if (!scalar && last_read_[ar] == static_cast<int>(k) && v[ar] >= 0) {
            free_[static_cast<size_t>(v[ar])] = true;
            v[ar] = -1;
          }
        }
      }
    }
    for (int u = 0; u < copies; ++u)
      for (size_t o = 0; o < output_regs_.size(); ++o) {
        const int r = value[static_cast<size_t>(u)][static_cast<size_t>(output_regs_[o])];
        store_result(ptr[output_ptr_[o] + rdx + u * vector_bytes_], vreg(r), access);
        free_[static_cast<size_t>(r)] = true;
      }
  }

  // The loop over whole steps of unroll_ vectors (a copy with plain and one with streaming
  // stores), then the tail a vector at a time under a mask of min(lanes, what is left) lanes.
  void emit_function() {
    // Pointers of the inputs read in place and of the outputs after the first, in registers the
    // body leaves alone (rdi: end, rsi: output 0, rdx: offset, rcx and r11: the loop's own
    // arithmetic); the callee-saved ones are saved.
    const Xbyak::Reg64 candidates[] = {r8, r9, r10, rax, rbx, rbp, r12, r13, r14, r15};
    const Xbyak::Reg64 callee_saved[] = {rbx, rbp, r12, r13, r14, r15};
    input_ptr_.assign(static_cast<size_t>(n_inputs_), Xbyak::Reg64());
    scalar_reg_.assign(static_cast<size_t>(n_inputs_), -1);
    size_t used = 0;
    for (int i = 0; i < n_inputs_; ++i)
      if (!scalar_input_[static_cast<size_t>(i)]) {
        if (used == std::size(candidates)) throw Unsupported{};
        input_ptr_[static_cast<size_t>(i)] = candidates[used++];
      }
    output_ptr_.assign(1, rsi);
    for (size_t o = 1; o < output_regs_.size(); ++o) {
      if (used == std::size(candidates)) throw Unsupported{};
      output_ptr_.push_back(candidates[used++]);
    }
    std::vector<Xbyak::Reg64> saved;
    for (const Xbyak::Reg64& r : callee_saved)
      for (size_t c = 0; c < used; ++c)
        if (candidates[c] == r) saved.push_back(r);
    for (const Xbyak::Reg64& r : saved) push(r);
    Xbyak::Label regular, streaming, tail, tail_loop, done, mask_table;
    mov(r11d, ecx);  // the streaming flag
    for (int i = 0; i < n_inputs_; ++i) {
      const size_t s = static_cast<size_t>(i);
      if (scalar_input_[s]) {
        scalar_reg_[s] = take();
        mov(rcx, ptr[rdx + 8 * i]);
        if (isa_ == Isa::avx512) {
          const Xbyak::Zmm z(scalar_reg_[s]);
          f64_ ? vbroadcastsd(z, ptr[rcx]) : vbroadcastss(z, ptr[rcx]);
        } else {
          const Xbyak::Ymm y(scalar_reg_[s]);
          f64_ ? vbroadcastsd(y, ptr[rcx]) : vbroadcastss(y, ptr[rcx]);
        }
      } else {
        mov(input_ptr_[s], ptr[rdx + 8 * i]);
      }
    }
    for (size_t o = output_ptr_.size(); o-- > 0;) mov(output_ptr_[o], ptr[rsi + 8 * static_cast<int>(o)]);  // rsi, the array, last
    const int shift = f64_ ? 3 : 2;
    const int step_bytes = vector_bytes_ * unroll_;
    // rdi: the end (bytes), rcx: the end of the whole steps.
    shl(rdi, shift);
    mov(rcx, rdi);
    and_(rcx, -step_bytes);
    xor_(edx, edx);
    test(rcx, rcx);
    jz(tail, T_NEAR);
    test(r11d, r11d);
    jnz(streaming, T_NEAR);
    L(regular);
    emit_body(unroll_, Access::whole);
    add(rdx, step_bytes);
    cmp(rdx, rcx);
    jb(regular, T_NEAR);
    jmp(tail, T_NEAR);
    L(streaming);
    emit_body(unroll_, Access::streaming);
    add(rdx, step_bytes);
    cmp(rdx, rcx);
    jb(streaming, T_NEAR);
    L(tail);
    cmp(rdx, rdi);
    jae(done, T_NEAR);
    if (isa_ != Isa::avx512) tail_mask_ = take();
    L(tail_loop);
    // rcx = the lanes left, at most one vector's.
    const int lanes = vector_bytes_ / element_bytes_;
    mov(rcx, rdi);
    sub(rcx, rdx);
    shr(rcx, shift);
    mov(r11d, lanes);
    cmp(rcx, r11);
    cmova(rcx, r11);
    if (isa_ == Isa::avx512) {
      mov(r11d, -1);
      bzhi(r11d, r11d, ecx);
      kmovw(k2, r11d);
    } else {
      // From element lanes - left of a table of `lanes` all-ones elements, then `lanes` zeros.
      neg(rcx);
      add(rcx, lanes);
      lea(r11, ptr[rip + mask_table]);
      vmovdqu(Xbyak::Ymm(tail_mask_), ptr[r11 + rcx * element_bytes_]);
    }
    emit_body(1, Access::masked);
    add(rdx, vector_bytes_);
    cmp(rdx, rdi);
    jb(tail_loop, T_NEAR);
    L(done);
    vzeroupper();
    for (auto r = saved.rbegin(); r != saved.rend(); ++r) pop(*r);
    ret();
    align(64);
    L(mask_table);
    for (int i = 0; i < 2 * vector_bytes_; ++i) db(i < vector_bytes_ ? 0xFF : 0);
    L(pool_label_);
    for (uint8_t b : pool_) db(b);
  }

  const std::vector<ScalarInstruction>& program_;
  int n_inputs_;
  std::vector<bool> scalar_input_;
  Isa isa_;
  int unroll_;
  bool f64_ = false;
  int element_bytes_ = 4, vector_bytes_ = 32, n_vregs_ = 16;
  std::vector<bool> free_;
  std::vector<int> last_read_;
  std::vector<int> output_regs_;  // output o is register output_regs_[o]
  std::vector<Xbyak::Reg64> input_ptr_, output_ptr_;
  std::vector<int> scalar_reg_;
  int tail_mask_ = -1;
  Xbyak::Label pool_label_;
  std::map<std::pair<uint64_t, int>, size_t> pool_offset_;
  std::vector<uint8_t> pool_;
};

class JitProgram final : public CompiledProgram {
 public:
  JitProgram(std::unique_ptr<ProgramEmitter> code, Isa isa)
      : code_(std::move(code)),
        entry_(code_->getCode<void (*)(int64_t, void* const*, const void* const*, int)>()),
        isa_(isa) {}
  void run(int64_t n, void* const* outs, const void* const* inputs, bool nontemporal) const override {
    entry_(n, outs, inputs, nontemporal ? 1 : 0);
  }
  Isa isa() const override { return isa_; }

 private:
  std::unique_ptr<ProgramEmitter> code_;
  void (*entry_)(int64_t, void* const*, const void* const*, int);
  Isa isa_;
};

}  // namespace

namespace {

std::shared_ptr<const CompiledProgram> generate(const std::vector<ScalarInstruction>& program,
                                                std::span<const DType> input_dtypes, std::span<const bool> scalar_input,
                                                std::span<const int> extra_outputs, Isa isa) {
  // The widest unroll whose registers fit: four independent copies hide the latency of a chain.
  for (int unroll : {4, 2, 1}) {
    try {
      auto code = std::make_unique<ProgramEmitter>(program, input_dtypes, scalar_input, extra_outputs, isa, unroll);
      return std::make_shared<JitProgram>(std::move(code), isa);
    } catch (const OutOfRegisters&) {
      continue;
    } catch (const Unsupported&) {
      return nullptr;
    } catch (const Xbyak::Error&) {
      return nullptr;  // no executable memory (a hardened system): the interpreter runs it
    }
  }
  return nullptr;
}

// What decides the machine code: the program, the inputs' dtypes and which are single values, the
// outputs, the instruction set.
std::vector<int64_t> program_key(const std::vector<ScalarInstruction>& program, std::span<const DType> input_dtypes,
                                 std::span<const bool> scalar_input, std::span<const int> extra_outputs, Isa isa) {
  std::vector<int64_t> key{static_cast<int64_t>(isa), static_cast<int64_t>(input_dtypes.size()),
                           static_cast<int64_t>(extra_outputs.size())};
  key.insert(key.end(), extra_outputs.begin(), extra_outputs.end());
  for (size_t i = 0; i < input_dtypes.size(); ++i) key.push_back(static_cast<int64_t>(input_dtypes[i]) * 2 + scalar_input[i]);
  for (const ScalarInstruction& ins : program) {
    key.push_back(static_cast<int64_t>(ins.op));
    key.push_back(static_cast<int64_t>(ins.dtype));
    key.push_back(static_cast<int64_t>(ins.args.size()));
    key.insert(key.end(), ins.args.begin(), ins.args.end());
  }
  return key;
}

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 0x100000001b3ULL;
    return static_cast<size_t>(h);
  }
};

// A deep network repeats the same fused programs layer after layer: each is generated once per
// process. Bounded: past it, programs are generated for their node alone.
constexpr size_t kMostPrograms = 4096;

}  // namespace

void run_in_place(const CompiledProgram& code, InputValues inputs, std::span<const bool> single, OutputValues outs) {
  const int64_t total = outs[0].numel();
  bool streaming = streams(static_cast<int64_t>(outs[0].nbytes()), total);
  for (const Tensor& out : outs) streaming = streaming && reinterpret_cast<uintptr_t>(out.raw_data()) % 64 == 0;
  auto run_range = [&](int64_t start, int64_t end) {
    SmallVector<const void*, 16> pointers;
    for (size_t i = 0; i < inputs.size(); ++i)
      pointers.push_back(inputs[i].raw_data() + (single[i] ? 0 : start * static_cast<int64_t>(dtype_size(inputs[i].dtype()))));
    SmallVector<void*, 16> out_pointers;
    for (Tensor& out : outs) out_pointers.push_back(out.raw_data() + start * static_cast<int64_t>(dtype_size(out.dtype())));
    code.run(end - start, out_pointers.data(), pointers.data(), streaming);
    if (streaming) _mm_sfence();
  };
  if (total < kParallelElements) return run_range(0, total);
  const int threads = std::max(omp_get_max_threads(), 1);
  if (threads == 1 || omp_in_parallel()) return run_range(0, total);
  constexpr int64_t kAlign = 64;  // elements: a multiple of 64 bytes for any dtype
  const int64_t chunks = (total + kAlign - 1) / kAlign;
  parallel_region(threads, [&](int t, int nt) {
    run_range(std::min(total, chunks * t / nt * kAlign), std::min(total, chunks * (t + 1) / nt * kAlign));
  });
}

std::shared_ptr<const CompiledProgram> CompiledProgram::compile(const std::vector<ScalarInstruction>& program,
                                                                std::span<const DType> input_dtypes,
                                                                std::span<const bool> scalar_input, Isa isa,
                                                                std::span<const int> extra_outputs) {
  if (isa == Isa::baseline || program.empty()) return nullptr;
  static std::mutex mutex;
  static std::unordered_map<std::vector<int64_t>, std::shared_ptr<const CompiledProgram>, KeyHash> made;
  std::vector<int64_t> key = program_key(program, input_dtypes, scalar_input, extra_outputs, isa);
  {
    std::lock_guard lock(mutex);
    if (auto it = made.find(key); it != made.end()) return it->second;
  }
  std::shared_ptr<const CompiledProgram> code = generate(program, input_dtypes, scalar_input, extra_outputs, isa);
  std::lock_guard lock(mutex);
  if (made.size() < kMostPrograms) made.emplace(std::move(key), code);
  return code;
}

}  // namespace kiln
