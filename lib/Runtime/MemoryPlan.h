//===- MemoryPlan.h - Ahead-of-time buffer placement ------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// Places every value an op produces in one arena, reusing memory between
// values whose lifetimes do not overlap, so that a device backend allocates
// once and never in the step loop. Values defined outside the ops (inputs,
// weights, constants) are persistent and live outside the arena.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_MEMORYPLAN_H
#define SHOAL_RUNTIME_MEMORYPLAN_H

#include <cstddef>
#include <cstdint>
#include <vector>

namespace shoal {
namespace rt {

struct LoadedPlan;

struct MemoryPlan {
  /// Bytes of the arena holding every op result.
  std::size_t arenaBytes = 0;
  /// Bytes of the values defined outside the ops (inputs, weights,
  /// constants), each in a buffer of its own.
  std::size_t persistentBytes = 0;
  /// Sum of the sizes of the op results: what the arena would need without
  /// reuse.
  std::size_t unsharedBytes = 0;
  /// Per value: its offset in the arena, or -1 if it is persistent, unused,
  /// or shares the buffer of another value (see aliasOf).
  std::vector<int64_t> offset;
  /// Per value: the value whose buffer it shares (a Reshape's result shares
  /// its input's), or -1.
  std::vector<int> aliasOf;
  /// Per value: first and last op index during which its buffer must hold
  /// it (for the arena values; -1 for the others).
  std::vector<int> firstUse, lastUse;
};

/// Plans the arena of `plan`'s program. Buffers are `alignment`-aligned.
/// Greedy by decreasing size: each buffer goes at the lowest offset that does
/// not overlap a placed buffer alive at the same time.
MemoryPlan planMemory(const LoadedPlan &plan, std::size_t alignment = 256);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_MEMORYPLAN_H
