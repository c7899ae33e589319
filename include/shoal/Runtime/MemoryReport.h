//===- MemoryReport.h - The bytes a rank holds ------------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// A leaf header: the memory report of a run (shoal-run --report-memory) and
// its prediction (shoal-sim), which the engine's memory plan computes.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_MEMORYREPORT_H
#define SHOAL_RUNTIME_MEMORYREPORT_H

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shoal {
namespace rt {

/// Bytes a rank holds, by kind (shoal-run --report-memory).
struct MemoryReport {
  /// Weights loaded from the model (distinct buffers).
  std::size_t weights = 0;
  /// Gradients the optimizer reads (their kept buffers).
  std::size_t grads = 0;
  /// Optimizer state (zero-initialized weights: AdamW's m and v, SGD's
  /// momentum).
  std::size_t optimizer = 0;
  /// Everything else: the arena of op results (as planned), other kept
  /// values (per micro-batch), inputs and constants.
  std::size_t activations = 0;
  /// Of the activations, the inputs (a block per micro-batch) and the
  /// constants: the data the step is given, which a 16-bit plan does not
  /// change (float labels, masks), and its copies in the type the ops read
  /// it in (a 16-bit plan's cast of a float input, as autocast makes):
  /// their kept buffers and the bytes the arena needs for them.
  std::size_t inputs = 0;
  /// Of the activations, the weight gradients on their way to the
  /// optimizer (a product's partial sums before their all_reduce or
  /// reduce-scatter, a shared weight's uses before their sum, a gradient
  /// before its cast, a pipeline stage's step sum it sends): their kept
  /// buffers, and the bytes the arena needs beyond what the activations
  /// alone would. They stay float32 in a 16-bit plan, as Megatron-LM's
  /// main_grad does.
  std::size_t gradientTemporaries = 0;
  /// The device's measured peak (for the CPU, the process's peak resident
  /// set, which also counts code, libraries and communication buffers).
  std::size_t peak = 0;
};

} // namespace rt
namespace plan {
class Plan;
} // namespace plan
namespace rt {

/// One program of a plan and the bytes each of its ranks holds in a step.
struct ProgramMemory {
  int program = 0;
  std::vector<int64_t> ranks; ///< world ranks
  MemoryReport memory;        ///< peak left 0: it is measured, not planned
};

/// Checks every program of `plan` as shoal-run checks it (one rank of each;
/// `path` names the plan in messages and resolves its weight sources) and
/// predicts each program's memory per rank from the runtime's buffer plan,
/// in the parts of --report-memory (shoal-sim). Programs in plan order.
/// Plans of shapes-only models (no weight data) are accepted.
/// Throws Error with the message shoal-run would give.
std::vector<ProgramMemory> checkAndPredictMemory(const plan::Plan &plan,
                                                 const std::string &path,
                                                 int64_t worldSize);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_MEMORYREPORT_H
