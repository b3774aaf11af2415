#pragma once
#include <memory>

#include "graph/executable.hpp"
#include "kiln/function.hpp"

namespace kiln {

// Compiles the graphs inside ops (a scan's body) as the function around them is compiled: its
// mode's rewrite groups, its schedules, its planner. Each program plans its memory once per set of
// input shapes; a run keeps its slots and its plan's working memory from step to step and writes
// each output where the caller points it.
class ModeCompiler final : public InnerCompiler {
 public:
  explicit ModeCompiler(Mode mode) : mode_(std::move(mode)) {}
  std::unique_ptr<InnerProgram> compile(const InnerGraph& graph) const override;

 private:
  Mode mode_;
};

}  // namespace kiln
