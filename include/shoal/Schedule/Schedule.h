//===- Schedule.h - Pipeline schedules --------------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The order in which each pipeline stage runs its micro-batches' forward and
// backward work, for GPipe, 1F1B (PipeDream-flush) and interleaved 1F1B
// (Megatron-LM's virtual stages). Shared by the compiler (shoal-pipeline),
// the runtime and the simulator; no MLIR dependency.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEDULE_SCHEDULE_H
#define SHOAL_SCHEDULE_SCHEDULE_H

#include <cstdint>
#include <string>
#include <vector>

namespace shoal {
namespace sched {

enum class Kind { GPipe, OneFOneB, Interleaved };

/// Parses "gpipe", "1f1b" or "interleaved"; false otherwise.
bool parseKind(const std::string &text, Kind &out);
const char *kindName(Kind kind);

/// One unit of work of a stage: the forward or backward pass of one
/// micro-batch through one of the stage's model chunks (chunk 0 unless the
/// schedule is interleaved).
struct Step {
  bool backward = false;
  int microBatch = 0;
  int chunk = 0;
  bool operator==(const Step &o) const {
    return backward == o.backward && microBatch == o.microBatch &&
           chunk == o.chunk;
  }
};

/// `F3`, `B0`, or with chunks `F3.1`.
std::string str(const Step &step, bool withChunk = false);

struct Schedule {
  Kind kind;
  int stages = 1;
  int microBatches = 1;
  /// Model chunks per stage (interleaved: v; otherwise 1). Virtual stage
  /// `c * stages + s` is chunk c of stage s.
  int chunks = 1;
  /// With `forwardOnly`, the schedules hold only forward steps (inference).
  bool forwardOnly = false;
  /// Per stage, its steps in execution order.
  std::vector<std::vector<Step>> order;

  /// The most micro-batches whose activations stage `s` holds at once (a
  /// forward done, its backward not yet): what the memory model multiplies
  /// activations by.
  int peakInFlight(int stage) const;
  /// The schedule's idle fraction with equal step times:
  /// (p - 1) / (v * m) for these schedules (p stages, m micro-batches,
  /// v chunks).
  double bubbleFraction() const;
};

/// Builds the schedule; returns an empty error string on success, or why the
/// parameters do not work (e.g. interleaving needs m to be a multiple of p).
std::string build(Kind kind, int stages, int microBatches, int chunks,
                  bool forwardOnly, Schedule &out);

/// Replays `s` with unit step times and the pipeline's dependencies (a
/// forward needs the previous virtual stage's forward of that micro-batch, a
/// backward needs the next virtual stage's backward and its own forward);
/// returns an empty string if every stage finishes, or a description of the
/// deadlock or missing step. The makespan (in steps) goes to `makespan`.
std::string replay(const Schedule &s, int *makespan = nullptr);

} // namespace sched
} // namespace shoal

#endif // SHOAL_SCHEDULE_SCHEDULE_H
