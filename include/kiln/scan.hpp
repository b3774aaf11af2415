#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "kiln/function.hpp"
#include "kiln/graph.hpp"

namespace kiln {

// An output fed back to the body: the body reads it at the given steps before the current one
// (negative offsets). With the default {-1}, `initial` is the value before the first step; with
// other taps it holds that many rows (the values at steps -A .. -1, A the largest offset).
struct Taps {
  Taps(Var initial) : initial(std::move(initial)) {}  // NOLINT: an output fed back at offset -1
  Taps(Var initial, std::vector<int> taps) : initial(std::move(initial)), taps(std::move(taps)) {}
  Var initial;
  std::vector<int> taps = {-1};
};

// A sequence read at several offsets from the current step (0: the current row).
struct SeqTaps {
  SeqTaps(Var sequence) : sequence(std::move(sequence)) {}  // NOLINT: read at the current row
  SeqTaps(Var sequence, std::vector<int> taps) : sequence(std::move(sequence)), taps(std::move(taps)) {}
  Var sequence;
  std::vector<int> taps = {0};
};

struct ScanArgs {
  std::vector<SeqTaps> sequences;
  std::vector<std::optional<Taps>> outputs_info;  // nullopt: an output not fed back
  std::vector<Var> non_sequences;
  std::optional<Var> n_steps;  // symbolic or constant; required without sequences
  bool go_backwards = false;   // the sequences are read from their last row to their first
  // Back-propagation through time stops after this many steps back from the last (-1: all).
  int64_t truncate_gradient = -1;
};

// outputs: per output, its value at every step stacked on axis 0 (in the order the steps ran);
// updates: the final values of the shared variables the body updated (scan_update), to pass to
// function(..., {.updates = ...}).
struct ScanResult {
  std::vector<Var> outputs;
  Updates updates;
};

// A symbolic loop (Theano's scan). fn receives, in this order: one value per sequence tap, one per
// output tap, then the non-sequences; it returns the new value of each output of outputs_info,
// and optionally until(cond) last, which makes the loop a do-while that stops after the step
// where cond holds. Several sequences of different lengths: the loop runs to the shortest. Values
// the body uses without receiving them (weights it captures, shared variables) are passed to
// every step unchanged. Errors name the user's line that called scan.
ScanResult scan(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, ScanArgs args,
                Loc loc = Loc::current());
Var until(const Var& cond, Loc loc = Loc::current());

// Inside a scan's body: the shared variable takes this value at each step (the next step reads
// it), and the loop's final value of it comes back in ScanResult::updates.
void scan_update(const Shared& variable, const Var& value, Loc loc = Loc::current());

// Built on scan (Theano's): map applies fn to each row of the sequences (stacked results);
// reduce and foldl carry outputs_info along the sequences and return each output's final value;
// foldr does the same from the last row to the first.
ScanResult map(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
               std::vector<Var> non_sequences = {}, bool go_backwards = false, Loc loc = Loc::current());
ScanResult reduce(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
                  std::vector<Var> initial, std::vector<Var> non_sequences = {}, bool go_backwards = false,
                  Loc loc = Loc::current());
ScanResult foldl(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
                 std::vector<Var> initial, std::vector<Var> non_sequences = {}, Loc loc = Loc::current());
ScanResult foldr(const std::function<std::vector<Var>(const std::vector<Var>&)>& fn, std::vector<SeqTaps> sequences,
                 std::vector<Var> initial, std::vector<Var> non_sequences = {}, Loc loc = Loc::current());

}  // namespace kiln
