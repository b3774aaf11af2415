// The measurement behind kiln's matrix-product choice: GFLOP/s of oneDNN's sgemm and matmul
// primitive, of Eigen (compiled for this CPU) and of kiln's own choice (kiln::gemm: its kernels
// compiled for each instruction set, or oneDNN) on the shapes of the MLP benchmark's training
// step, 1 thread. NN: forward (x W), NT: input gradient (g W^T), TN: weight gradient (x^T g).
#include <dnnl.h>
#include <omp.h>

#include <Eigen/Core>

#include "ops/blas.hpp"
#include "tensor/isa.hpp"
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

namespace {

// oneDNN's matmul primitive for one shape and layout, created once and run many times.
struct MatmulPrimitive {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  dnnl_primitive_t primitive = nullptr;
  dnnl_memory_t a = nullptr, b = nullptr, c = nullptr;
  std::string impl;

  MatmulPrimitive(bool ta, bool tb, int64_t m, int64_t k, int64_t n) {
    dnnl_engine_create(&engine, dnnl_cpu, 0);
    dnnl_stream_create(&stream, engine, dnnl_stream_default_flags);
    dnnl_memory_desc_t a_md, b_md, c_md;
    dnnl_dims_t a_dims{m, k}, b_dims{k, n}, c_dims{m, n};
    dnnl_dims_t a_strides{ta ? 1 : k, ta ? m : 1}, b_strides{tb ? 1 : n, tb ? k : 1}, c_strides{n, 1};
    dnnl_memory_desc_init_by_strides(&a_md, 2, a_dims, dnnl_f32, a_strides);
    dnnl_memory_desc_init_by_strides(&b_md, 2, b_dims, dnnl_f32, b_strides);
    dnnl_memory_desc_init_by_strides(&c_md, 2, c_dims, dnnl_f32, c_strides);
    dnnl_matmul_desc_t desc;
    dnnl_matmul_desc_init(&desc, &a_md, &b_md, nullptr, &c_md);
    dnnl_primitive_desc_t pd;
    dnnl_primitive_desc_create(&pd, &desc, nullptr, engine, nullptr);
    const char* name = nullptr;
    dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name);
    impl = name ? name : "?";
    dnnl_primitive_create(&primitive, pd);
    dnnl_primitive_desc_destroy(pd);
    dnnl_memory_create(&a, &a_md, engine, DNNL_MEMORY_NONE);
    dnnl_memory_create(&b, &b_md, engine, DNNL_MEMORY_NONE);
    dnnl_memory_create(&c, &c_md, engine, DNNL_MEMORY_NONE);
  }
  void run(const float* pa, const float* pb, float* pc) {
    dnnl_memory_set_data_handle(a, const_cast<float*>(pa));
    dnnl_memory_set_data_handle(b, const_cast<float*>(pb));
    dnnl_memory_set_data_handle(c, pc);
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
    dnnl_primitive_execute(primitive, stream, 3, args);
    dnnl_stream_wait(stream);
  }
};

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

template <class F> double seconds_per_call(F f) {
  f();
  int n = 0;
  auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (elapsed < 0.2 || n < 3) {
    f();
    ++n;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return elapsed / n;
}

void measure(const char* layout, int64_t m, int64_t k, int64_t n) {
  const bool ta = layout[0] == 'T', tb = layout[1] == 'T';
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  RowMajor a = ta ? RowMajor(k, m) : RowMajor(m, k), b = tb ? RowMajor(n, k) : RowMajor(k, n), c(m, n);
  for (float* p : {a.data(), b.data()})
    for (int64_t i = 0; i < (p == a.data() ? a.size() : b.size()); ++i) p[i] = uni(rng);
  const double flops = 2.0 * m * n * k;
  double onednn = flops / seconds_per_call([&] {
    dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.f, a.data(), a.cols(), b.data(), b.cols(), 0.f, c.data(), n);
  }) / 1e9;
  MatmulPrimitive prim(ta, tb, m, k, n);
  double matmul = flops / seconds_per_call([&] { prim.run(a.data(), b.data(), c.data()); }) / 1e9;
  double eigen = flops / seconds_per_call([&] {
    if (!ta && !tb) c.noalias() = a * b;
    else if (ta && !tb) c.noalias() = a.transpose() * b;
    else if (!ta && tb) c.noalias() = a * b.transpose();
    else c.noalias() = a.transpose() * b.transpose();
  }) / 1e9;
  const kiln::Tensor ka = kiln::Tensor::wrap(a.data(), {a.rows(), a.cols()}), kb = kiln::Tensor::wrap(b.data(), {b.rows(), b.cols()});
  kiln::Tensor kc = kiln::Tensor::wrap(c.data(), {m, n});
  const kiln::Tensor a_op = ta ? ka.view({m, k}, {1, m}, 0) : ka, b_op = tb ? kb.view({k, n}, {1, k}, 0) : kb;
  double kiln_gemm = flops / seconds_per_call([&] { kiln::gemm(1.0, a_op, b_op, 0.0, kc); }) / 1e9;
  const char* best = matmul >= onednn && matmul >= eigen ? "oneDNN matmul" : onednn >= eigen ? "oneDNN sgemm" : "Eigen";
  std::printf("%-4s %5lld %5lld %5lld %10.1f %10.1f %10.1f %10.1f   %-14s %s\n", layout, static_cast<long long>(m),
              static_cast<long long>(k), static_cast<long long>(n), onednn, matmul, eigen, kiln_gemm, best, prim.impl.c_str());
}

}  // namespace

int main() {
  kiln::set_num_threads(1);
  std::printf("kiln runs its %s kernels on this CPU\n", kiln::isa_name(kiln::active_isa()));
  std::printf("%-4s %5s %5s %5s %10s %10s %10s %10s   %-14s %s\n", "op", "M", "K", "N", "sgemm", "matmul", "Eigen", "kiln",
              "fastest", "matmul implementation (GFLOP/s, 1 thread)");
  for (int64_t batch : {1, 10, 60, 1000}) {
    measure("NN", batch, 784, 500);
    measure("NN", batch, 1000, 1000);
    measure("NT", batch, 10, 500);
    measure("NT", batch, 1000, 1000);
    measure("TN", 784, batch, 500);
    measure("TN", 1000, batch, 1000);
  }
}
