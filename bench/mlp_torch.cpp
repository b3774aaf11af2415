// The same training loop written with LibTorch (C++), the peer.
#include <dlfcn.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "torch_mlp.hpp"

// OpenBLAS's own queries. Debian's LibTorch links the generic libblas.so.3, which the alternatives
// system points at OpenBLAS or at the reference BLAS, so the binary does not link OpenBLAS itself
// (that would load it even where LibTorch does not use it): "blas" looks the functions up at run time.
extern "C" char* openblas_get_config(void);
extern "C" char* openblas_get_corename(void);
extern "C" int openblas_get_parallel(void);
extern "C" int openblas_get_num_threads(void);

namespace {

double train_throughput(const std::vector<int64_t>& layers, int64_t batch, const torch::Tensor& data,
                        const torch::Tensor& labels) {
  bench::TorchMlpStep step(layers);
  return bench::throughput(batch, 0.5, [&](int64_t first) { step(data.narrow(0, first, batch), labels.narrow(0, first, batch)); });
}

// The loaded library that defines LibTorch's sgemm_ (found the way the dynamic linker bound
// LibTorch's call), and that library's file.
void* sgemm_library(std::string& file) {
  void* sym = dlsym(RTLD_DEFAULT, "sgemm_");
  Dl_info info{};
  if (sym == nullptr || dladdr(sym, &info) == 0 || info.dli_fname == nullptr) return nullptr;
  char resolved[PATH_MAX];
  file = realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
  return dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
}

template <class F> F lookup(void* library, const char* name) { return reinterpret_cast<F>(dlsym(library, name)); }

// Prints the BLAS LibTorch calls, the core type OpenBLAS chose and a checked, timed sgemm through
// LibTorch (the forced core type's kernels run here, so a wrong one crashes here). Returns 3 when
// LibTorch's sgemm_ is not OpenBLAS's.
int print_blas() {
  torch::set_num_threads(1);
  std::string file;
  void* library = sgemm_library(file);
  // dlsym on a library's handle searches it and its dependencies: Debian's OpenBLAS libblas.so.3
  // needs libopenblas.so.0, the reference libblas.so.3 does not (though another library, such as
  // an OpenBLAS liblapack.so.3, may have loaded OpenBLAS into the process).
  auto get_config = library ? lookup<decltype(&openblas_get_config)>(library, "openblas_get_config") : nullptr;
  auto get_corename = library ? lookup<decltype(&openblas_get_corename)>(library, "openblas_get_corename") : nullptr;
  if (get_config == nullptr || get_corename == nullptr) {
    std::printf("LibTorch BLAS: not OpenBLAS: sgemm_ comes from %s\n", file.empty() ? "no loaded library" : file.c_str());
    return 3;
  }
  auto get_parallel = lookup<decltype(&openblas_get_parallel)>(library, "openblas_get_parallel");
  auto get_threads = lookup<decltype(&openblas_get_num_threads)>(library, "openblas_get_num_threads");
  const int parallel = get_parallel != nullptr ? get_parallel() : -1;
  std::printf("LibTorch BLAS: %s (%s, %d thread(s)); sgemm_ from %s\n", get_config(),
              parallel == 0 ? "sequential" : parallel == 1 ? "pthreads" : parallel == 2 ? "OpenMP" : "unknown threading",
              get_threads != nullptr ? get_threads() : -1, file.c_str());
  std::printf("LibTorch BLAS core type: %s\n", get_corename());
  std::fflush(stdout);  // seen even if the kernels below crash

  const int64_t n = 512;
  auto a = torch::rand({n, n}, torch::kFloat32), b = torch::rand({n, n}, torch::kFloat32);
  double best = 1e30;
  torch::Tensor c;
  for (int r = 0; r < 5; ++r) {
    auto start = std::chrono::steady_clock::now();
    c = torch::mm(a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  const double error = (c - torch::mm(a.to(torch::kFloat64), b.to(torch::kFloat64)).to(torch::kFloat32)).abs().max().item<double>();
  std::printf("LibTorch sgemm %lldx%lldx%lld, 1 thread: %.1f GFLOP/s, max error %.2g against double\n", static_cast<long long>(n),
              static_cast<long long>(n), static_cast<long long>(n), 2.0 * n * n * n / best * 1e-9, error);
  if (!(error < 1e-2)) {
    std::fprintf(stderr, "LibTorch's sgemm gives wrong results\n");
    return 4;
  }
  return 0;
}

}  // namespace

// The same command line as bench_mlp_kiln, and "blas".
int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "mlp" && argc == 5) {
    torch::set_num_threads(std::atoi(argv[4]));
    auto xs = bench::random_inputs();
    auto ys = bench::random_labels();
    auto data = torch::from_blob(xs.data(), {bench::kExamples, bench::kInputs}, torch::kFloat32).clone();
    auto labels = torch::from_blob(ys.data(), {bench::kExamples}, torch::kInt64).clone();
    for (const auto& layers : bench::models())
      if (bench::model_name(layers) == argv[2]) {
        std::printf("%.0f\n", train_throughput(layers, std::atoll(argv[3]), data, labels));
        return 0;
      }
    std::fprintf(stderr, "%s: unknown model %s\n", argv[0], argv[2]);
    return 2;
  }
  if (mode == "tiny" && argc == 3) {
    torch::set_num_threads(std::atoi(argv[2]));
    torch::NoGradGuard no_grad;
    auto v = torch::ones({10}, torch::kFloat32);
    std::printf("%.3f\n", bench::microseconds_per_call([&] { auto y = 2.0 * v + 1.0; }));
    return 0;
  }
  if (mode == "blas" && argc == 2) return print_blas();
  std::fprintf(stderr, "usage: %s mlp MODEL BATCH THREADS | tiny THREADS | blas\n", argv[0]);
  return 2;
}
