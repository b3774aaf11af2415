#pragma once
#include <memory>
#include <string>

#include "graph/executable.hpp"

namespace kiln {

// Where nodes run: a backend allocates storage on its device and turns each node into an
// executable once, when a function is compiled. The CPU backend is the only one today; a device
// backend would be another subclass with its own kernel table and Device tag
// (docs/architecture.md), leaving ops, graph and planner as they are.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual Device device() const = 0;
  virtual std::shared_ptr<Storage> allocate(size_t bytes) const = 0;
  virtual std::unique_ptr<Executable> executable(const Node& node, const MakeContext& context = {}) const = 0;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend();  // every op family adds its kernels
  std::string name() const override { return "cpu"; }
  Device device() const override { return Device::cpu; }
  std::shared_ptr<Storage> allocate(size_t bytes) const override;
  std::unique_ptr<Executable> executable(const Node& node, const MakeContext& context = {}) const override {
    return kernels_.make(node, context);
  }
  // Ops defined outside kiln (tests) add their kernels here.
  KernelTable& kernels() { return kernels_; }

 private:
  KernelTable kernels_;
};

CpuBackend& cpu_backend();

}  // namespace kiln
