#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "kiln/data.hpp"
#include "kiln/scope.hpp"

namespace kiln {
namespace {

// The examples of an epoch in order: shuffled, a permutation that follows from (seed, epoch)
// alone (Fisher-Yates on a 64-bit Mersenne twister with unbiased draws; the standard library's
// shuffle and distributions differ between implementations).
std::vector<int64_t> epoch_order(int64_t n, const DataLoaderOptions& options, uint64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (!options.shuffle) return order;
  std::mt19937_64 rng(options.seed ^ (0x9e3779b97f4a7c15ull * (epoch + 1)));
  for (uint64_t i = static_cast<uint64_t>(n); i > 1; --i) {
    const uint64_t limit = std::mt19937_64::max() - std::mt19937_64::max() % i;
    uint64_t draw;
    do draw = rng();
    while (draw >= limit);
    std::swap(order[i - 1], order[draw % i]);
  }
  return order;
}

void dispose_all(const NamedTensors& batch, const Loc& loc) {
  for (const auto& [name, value] : batch) value.dispose(loc);
}

}  // namespace

class DataLoader::Epoch {
 public:
  Epoch(Dataset& dataset, const DataLoaderOptions& options, uint64_t epoch, int64_t batches, const Loc& loop)
      : dataset_(dataset),
        options_(options),
        order_(epoch_order(dataset.size(), options, epoch)),
        batches_(batches),
        loop_(loop) {
    if (batches_ == 0) return;
    if (options_.prefetch) producer_ = std::thread([this] { produce(); });
    try {
      current_ = next_batch(0);
    } catch (...) {
      stop_producer();
      throw;
    }
  }

  ~Epoch() {
    stop_producer();
    if (options_.dispose_batch && position_ < batches_) dispose_all(current_, loop_);
  }

  const NamedTensors& current() const {
    if (position_ >= batches_) throw Error("DataLoader: the iterator is past the last batch of the epoch");
    return current_;
  }

  void advance() {
    if (position_ >= batches_) throw Error("DataLoader: the iterator is past the last batch of the epoch");
    if (options_.dispose_batch) dispose_all(current_, loop_);
    current_ = NamedTensors();
    if (++position_ < batches_) current_ = next_batch(position_);
  }

  bool done() const { return position_ >= batches_; }

 private:
  NamedTensors next_batch(int64_t batch) {
    if (!producer_.joinable()) return collate(batch);
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return ready_.has_value() || error_; });
    if (!ready_) std::rethrow_exception(error_);
    NamedTensors taken = std::move(*ready_);
    ready_.reset();
    changed_.notify_all();
    return taken;
  }

  void stop_producer() {
    if (!producer_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    producer_.join();
    if (ready_) dispose_all(*ready_, loop_);  // collated ahead, never handed out
    ready_.reset();
  }

  void produce() {
    set_num_threads(1);  // the training thread keeps the cores; collation is copying
    try {
      for (int64_t batch = 0; batch < batches_; ++batch) {
        NamedTensors collated = collate(batch);
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return !ready_.has_value() || stop_; });
        if (stop_) return dispose_all(collated, loop_);
        ready_ = std::move(collated);
        changed_.notify_all();
      }
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      changed_.notify_all();
    }
  }

  // The batch fetched in a dispose scope of the loader's own, which disposes every tensor the
  // dataset made for it (the seed's rule); the batch's tensors leave every scope.
  NamedTensors collate(int64_t batch) {
    const int64_t first = batch * options_.batch_size;
    const int64_t count = std::min(options_.batch_size, static_cast<int64_t>(order_.size()) - first);
    NamedTensors collated;
    DisposeScope made_by_dataset;
    try {
      const NamedTensors fetched = dataset_.get_batch(std::span(order_).subspan(static_cast<size_t>(first), static_cast<size_t>(count)));
      for (const auto& [name, value] : fetched) collated.set(name, value.alias(loop_).detach_from_scope());
    } catch (const DisposedError& e) {
      dispose_all(collated, loop_);
      e.rethrow_with(std::string("DataLoader: ") + e.what() +
                     "; the tensors a dataset's get makes are disposed once their batch is collated, so one that "
                     "get keeps for a later call must be detached (detach_from_scope()) and returned as an alias(), "
                     "or a later get may dispose it before its batch is stacked (docs/data.md)");
    } catch (...) {
      dispose_all(collated, loop_);
      throw;
    }
    return collated;
  }

  Dataset& dataset_;
  const DataLoaderOptions options_;
  const std::vector<int64_t> order_;
  const int64_t batches_;
  const Loc loop_;  // the caller's loop over the loader: batches are made and disposed there
  int64_t position_ = 0;
  NamedTensors current_;

  std::thread producer_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<NamedTensors> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
};

DataLoader::DataLoader(Dataset& dataset, DataLoaderOptions options) : dataset_(dataset), options_(options) {
  if (options_.batch_size < 1)
    throw Error("DataLoader: batch_size must be at least 1, got " + std::to_string(options_.batch_size));
}

int64_t DataLoader::size() const {
  const int64_t n = dataset_.size();
  const int64_t whole = n / options_.batch_size;
  return options_.drop_last || n % options_.batch_size == 0 ? whole : whole + 1;
}

DataLoader::Iterator DataLoader::begin(Loc loop) {
  return Iterator(std::make_unique<Epoch>(dataset_, options_, epochs_begun_++, size(), loop));
}

DataLoader::Iterator::Iterator(std::unique_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {}
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;
DataLoader::Epoch& DataLoader::Iterator::epoch() const {
  if (!epoch_) throw Error("DataLoader: this iterator was moved from; use the one it was moved to");
  return *epoch_;
}
const NamedTensors& DataLoader::Iterator::operator*() const { return epoch().current(); }
DataLoader::Iterator& DataLoader::Iterator::operator++() {
  epoch().advance();
  return *this;
}
bool DataLoader::Iterator::operator==(std::default_sentinel_t) const { return !epoch_ || epoch_->done(); }

}  // namespace kiln
