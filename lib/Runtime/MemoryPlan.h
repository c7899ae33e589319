//===- MemoryPlan.h - Ahead-of-time buffer placement ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Places the values ops produce so that no device allocates in the step
// loop. Values defined outside the ops (inputs, weights, constants) are
// persistent. A value that only ops of its own task read lives in one arena,
// which reuses memory between values whose lifetimes (op index ranges) do not
// overlap; tasks run one at a time, so values of different tasks never
// compete for it, whatever the schedule. Values that outlive their task's
// run (read by another task, program outputs, gradients the optimizer reads
// at the end of the step, sums over micro-batches) are kept: one buffer per
// micro-batch, allocated once.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_MEMORYPLAN_H
#define SHOAL_RUNTIME_MEMORYPLAN_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {

struct MemoryReport;

struct LoadedPlan;
struct OpInfo;

/// Where a value's buffer is. WeightCopy: the step's copy of a weight in
/// another element type (rt::weightCopies), one buffer per copy made once
/// per step and kept across steps.
enum class Residence : uint8_t { Persistent, Arena, Kept, WeightCopy };

struct MemoryPlan {
  /// Per value.
  std::vector<Residence> residence;
  /// Bytes of the arena holding every op result.
  std::size_t arenaBytes = 0;
  /// Of the arena, the bytes it needs beyond what its activations alone
  /// would: the weight gradients on their way to the optimizer
  /// (gradientTransients), which share it (MemoryReport::
  /// gradientTemporaries).
  std::size_t gradientArenaBytes = 0;
  /// Of the arena, the bytes its activations need beyond what they would
  /// without the copies of the inputs and constants in another element
  /// type (inputCopies), which MemoryReport::inputs counts: the step's
  /// data in the type the ops read it in.
  std::size_t inputArenaBytes = 0;
  /// Bytes of the values defined outside the ops (inputs, weights,
  /// constants), each in a buffer of its own.
  std::size_t persistentBytes = 0;
  /// Sum of the sizes of the op results: what the arena would need without
  /// reuse.
  std::size_t unsharedBytes = 0;
  /// Bytes of the kept values (one micro-batch's).
  std::size_t keptBytes = 0;
  /// Bytes of the weight copies (Residence::WeightCopy).
  std::size_t weightCopyBytes = 0;
  /// Per op: the op whose result holds the weight copy this op computes
  /// (rt::weightCopies, shoal/Schema/InPlace.h), or -1. The executor runs
  /// the first of a step's casts of the weight and skips the others.
  std::vector<int> weightCopyOf;
  /// Per op: for a product that sums itself into an accumulating
  /// AllReduce's step sum (rt::productsAccumulatingInPlace), that
  /// AllReduce; -1 else.
  /// Its result is a view (aliasOf) of the AllReduce's.
  std::vector<int> accumulatesInto;
  /// Per op: for such an AllReduce, the product; -1 else.
  std::vector<int> accumulatedFrom;
  /// Per value: its offset in the arena, or -1 if it is not in the arena or
  /// shares the buffer of another value (see aliasOf).
  std::vector<int64_t> offset;
  /// Per value: the value whose buffer it shares (a Reshape's result, an
  /// identity reduction's and an in-place AllReduce's share their input's;
  /// a product that accumulates into an AllReduce's step sum shares that
  /// sum), or -1. A value and the
  /// values it aliases have the same residence.
  std::vector<int> aliasOf;
  /// Per value: first and last op index during which its buffer must hold
  /// it (for the arena values; -1 for the others).
  std::vector<int> firstUse, lastUse;
  /// Per value: a view of a value set from outside the ops (a reshape of a
  /// weight, an input or a constant, which the kernel makes an alias): it
  /// shares that buffer and needs none of its own.
  std::vector<bool> viewOfOutside;
};

/// True for ops whose result shares its input's buffer (Reshape, identity
/// reductions).
bool aliasesInput(const OpInfo &op);
/// True for an AllReduce over the micro-batch axis: it sums its input over
/// the step's micro-batches (gradient accumulation).
bool accumulatesOverMicroBatches(const LoadedPlan &plan, const OpInfo &op);

/// Plans the buffers of `plan`'s program. Buffers are `alignment`-aligned.
/// Greedy: each buffer goes at the lowest offset that does not overlap a
/// placed buffer alive at the same time, placed by decreasing size and,
/// separately, by decreasing lifetime; the smaller of the two arenas is kept.
MemoryPlan planMemory(const LoadedPlan &plan, std::size_t alignment = 256);

/// What becomes of a kept value's buffers over a step.
enum class KeptLife : uint8_t {
  /// One buffer per micro-batch for the whole step (program outputs,
  /// values kept alive to the end).
  PerMicroBatch,
  /// One buffer for the step (a sum over micro-batches, a reduce-scatter's
  /// block).
  OncePerStep,
  /// Handed back to the pool when its micro-batch has run the last task
  /// that reads it (keptReleases).
  Pooled,
  /// A view of another kept buffer, dropped with it.
  View,
};

/// Per value, its KeptLife (meaningful for Kept values); what
/// Executor::releaseKept does and predictMemory counts.
std::vector<KeptLife> keptLives(const LoadedPlan &plan,
                                const MemoryPlan &memory);

/// When the executor hands kept buffers back, per schedule entry: the
/// Pooled and View values whose buffer for that entry's micro-batch is
/// released after it. That is after the micro-batch's last entry running a
/// task that reads the value, or a value sharing its buffer (an alias or a
/// view), or after the entry defining it when nothing reads it. So an
/// interleaved stage frees a chunk's activations after the chunk's own
/// backward (and with one micro-batch a later value of the same size
/// reuses the buffer). Values whose buffer is held (keptHeld) are never
/// released.
std::vector<std::vector<int>> keptReleases(const LoadedPlan &plan,
                                           const MemoryPlan &memory,
                                           const std::vector<KeptLife> &life);

/// Per value: its kept buffer is held for good, so it neither goes back to
/// a pool nor takes one from it: an optimizer update reads a value sharing
/// it (updates run at the end of the step), or one sharing it is kept per
/// micro-batch or per step (a program output that views it).
std::vector<bool> keptHeld(const LoadedPlan &plan, const MemoryPlan &memory,
                           const std::vector<KeptLife> &life);

/// Per value, whether it is a weight gradient on its way to the optimizer:
/// the optimizer's gradient operand, a step's sum over micro-batches that a
/// pipeline stage sends (a tied or shared weight's gradient, summed on the
/// stage that updates it first), or a value that every reader carries
/// into such values (adds, collectives, reshapes, casts, transposes,
/// concatenations and slices): a product's partial sums before their
/// all_reduce, the sum of a shared weight's uses, a gradient before its
/// cast (MemoryPlan::gradientArenaBytes).
std::vector<bool> gradientTransients(const LoadedPlan &plan);

/// Per value, whether it is a copy of an input or a constant in another
/// element type (a Cast of one: a 16-bit plan's copy of a float input,
/// which PyTorch's autocast makes too).
std::vector<bool> inputCopies(const LoadedPlan &plan);

/// What a kept value's buffers count as in the memory report (and which
/// pool they go back to): activations, weight gradients before their sum
/// (activations too, and MemoryReport::gradientTemporaries), the gradients
/// the optimizer reads, or copies of inputs (activations too, and
/// MemoryReport::inputs).
enum class KeptKind : uint8_t {
  Activation,
  GradientTemporary,
  Gradient,
  InputCopy
};

/// Per value, its KeptKind (optimizerGradients, gradientTransients,
/// inputCopies).
std::vector<KeptKind> keptKinds(const LoadedPlan &plan,
                                const MemoryPlan &memory);

/// Adds `bytes` of a kept buffer of `kind` to the report's parts (as
/// predictMemory and Executor::memoryReport count it).
void countKept(MemoryReport &r, KeptKind kind, std::size_t bytes);

/// Per value, whether it holds a gradient the optimizer reads: the
/// optimizer's gradient operand and, when that is a view (a weight viewed
/// in pieces by shoal-fused-weight-views), the buffers it views. The memory
/// report's "grads" part.
std::vector<bool> optimizerGradients(const LoadedPlan &plan,
                                     const MemoryPlan &memory);

/// The bytes a rank running `plan` holds during a step, by part, as
/// Executor::memoryReport counts them after the step, predicted from the
/// plan alone (shoal-sim): weights and optimizer state; the gradients the
/// optimizer reads (one buffer each, summed over micro-batches); inputs
/// (a block per micro-batch) and constants; the arena; and the kept values,
/// as many buffers as micro-batches hold one at once under the plan's
/// schedule (keptReleases says when a micro-batch hands one back). The
/// peak field is left 0: it is measured, not planned.
MemoryReport predictMemory(const LoadedPlan &plan, const MemoryPlan &memory);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_MEMORYPLAN_H
