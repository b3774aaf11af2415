// The eager benchmark, kiln's side (bench/eager.sh): eager operations on Tensors, each run at once
// (no fusion). "bench_eager_kiln THREADS" prints one line per row (bench/eager_common.hpp), with the
// heap allocations of a steady iteration: operator new calls (counted by this executable's
// replacement, on every thread) and blocks taken from kiln's slab of small objects, the storages kiln's allocator made (allocator_stats()
// .n_allocations) and of those the ones that took a new block from the system
// (.n_system_allocations: the tensors' data, which operator new does not see), and the change of
// live storages and live tensors over the counted iterations. Then 10^6 iterations of a + b on 10 floats, each in a
// DisposeScope; exits 1 if live storages or live tensors did not come back to where they started.
#include <kiln/kiln.hpp>

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include "eager_common.hpp"

#include "count_operator_new.hpp"  // tests/: every operator new counted

using kiln::Tensor;

namespace {

struct Counts {
  double news_per_iteration = 0, allocations_per_iteration = 0, system_allocations_per_iteration = 0;
  int64_t live_storages_delta = 0, live_tensors_delta = 0;
};

struct Snapshot {
  int64_t news, allocations, system_allocations, live_storages, live_tensors;
  static Snapshot now() {
    const kiln::AllocatorStats a = kiln::allocator_stats();
    return {allocations_so_far(), a.n_allocations, a.n_system_allocations, a.live_storages, kiln::scope_statistics().live};
  }
};

Counts difference(const Snapshot& before, const Snapshot& after, int64_t iterations) {
  const auto n = static_cast<double>(iterations);
  return {static_cast<double>(after.news - before.news) / n, static_cast<double>(after.allocations - before.allocations) / n,
          static_cast<double>(after.system_allocations - before.system_allocations) / n,
          after.live_storages - before.live_storages, after.live_tensors - before.live_tensors};
}

// The allocations of `iterations` steady steps (after a few to warm up).
template <class Step> Counts count_allocations(Step step, int64_t iterations) {
  for (int i = 0; i < 5; ++i) step();
  const Snapshot before = Snapshot::now();
  for (int64_t i = 0; i < iterations; ++i) step();
  return difference(before, Snapshot::now(), iterations);
}

double checksum(const Tensor& t) { return bench::checksum(t.data<float>(), t.numel()); }

void print_row(const std::string& row, double microseconds, double sum, const Counts& c) {
  std::printf("%s %.4g %.9g %.2f %.2f %.2f %lld %lld\n", row.c_str(), microseconds, sum, c.news_per_iteration,
              c.allocations_per_iteration, c.system_allocations_per_iteration, static_cast<long long>(c.live_storages_delta),
              static_cast<long long>(c.live_tensors_delta));
  std::fflush(stdout);
}

Tensor vector_of(int64_t n, uint32_t seed) { return Tensor::from(bench::operand(n, seed), {n}); }

void elementwise_rows() {
  for (int64_t n : {bench::kSmall, bench::kLarge}) {
    const Tensor a = vector_of(n, 1), b = vector_of(n, 2);
    auto add = [&] { Tensor c = a + b; };
    print_row("add" + std::to_string(n), bench::median_microseconds(add), checksum(a + b),
              count_allocations(add, n == bench::kSmall ? 10000 : 50));
  }
  const Tensor a = vector_of(bench::kLarge, 1), b = vector_of(bench::kLarge, 2);
  auto expression = [&] { return tanh(a * b + 1.0) * exp(-a) - b; };
  auto step = [&] { Tensor c = expression(); };
  print_row("expr" + std::to_string(bench::kLarge), bench::median_microseconds(step), checksum(expression()),
            count_allocations(step, 50));
}

void mlp_rows() {
  const Tensor w1 = Tensor::from(bench::mlp_w1(), {bench::kInputs, bench::kHidden});
  const Tensor b1 = Tensor::from(bench::mlp_b1(), {bench::kHidden});
  const Tensor w2 = Tensor::from(bench::mlp_w2(), {bench::kHidden, bench::kClasses});
  const Tensor b2 = Tensor::from(bench::mlp_b2(), {bench::kClasses});
  for (int64_t batch : bench::kMlpBatches) {
    const Tensor x = Tensor::from(bench::mlp_x(batch), {batch, bench::kInputs});
    auto predict = [&] { return softmax(dot(tanh(dot(x, w1) + b1), w2) + b2); };
    auto step = [&] {
      kiln::DisposeScope scope;
      predict();
    };
    double sum = 0;
    {
      kiln::DisposeScope scope;
      sum = checksum(predict());
    }
    print_row("mlp" + std::to_string(batch), bench::median_microseconds(step), sum, count_allocations(step, 1000));
  }
}

// 10^6 iterations of a + b (10 floats), each in a DisposeScope: the time of one, and whether live
// storages and live tensors come back to where they started.
int scoped_check() {
  const Tensor a = vector_of(bench::kSmall, 1), b = vector_of(bench::kSmall, 2);
  const Snapshot before = Snapshot::now();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < bench::kScopedIterations; ++i) {
    kiln::DisposeScope scope;
    Tensor c = a + b;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Snapshot after = Snapshot::now();
  double sum = 0;
  {
    kiln::DisposeScope scope;
    sum = checksum(a + b);
  }
  print_row("scoped_add10", 1e6 * seconds / static_cast<double>(bench::kScopedIterations), sum,
            difference(before, after, bench::kScopedIterations));
  std::printf("check %lld %lld %lld %lld\n", static_cast<long long>(before.live_storages), static_cast<long long>(after.live_storages),
              static_cast<long long>(before.live_tensors), static_cast<long long>(after.live_tensors));
  std::fflush(stdout);
  if (after.live_storages != before.live_storages || after.live_tensors != before.live_tensors) {
    std::fprintf(stderr, "bench_eager_kiln: LEAK after %lld scoped iterations: live storages %lld -> %lld, live tensors %lld -> %lld\n%s",
                 static_cast<long long>(bench::kScopedIterations), static_cast<long long>(before.live_storages),
                 static_cast<long long>(after.live_storages), static_cast<long long>(before.live_tensors),
                 static_cast<long long>(after.live_tensors), kiln::live_tensor_report().c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 || std::atoi(argv[1]) < 1) {
    std::fprintf(stderr, "usage: %s THREADS\n", argv[0]);
    return 2;
  }
  kiln::set_num_threads(std::atoi(argv[1]));
  elementwise_rows();
  mlp_rows();
  return scoped_check();
}
