//===- OpTable.h - Op kinds of plans: names, arity, flags -------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The op kinds of Ops.def as an enum and a constant table: what the runtime,
// the plan exporter and the planner share. Header-only, with no runtime
// internals and no exceptions, so that the compiler (built with LLVM's
// -fno-exceptions) can include it.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_SCHEMA_OPTABLE_H
#define SHOAL_SCHEMA_OPTABLE_H

#include <string_view>

namespace shoal {
namespace rt {

/// What the Flags column of Ops.def says about an op kind.
enum OpFlags : unsigned {
  kNoFlags = 0,
  /// Runs over the mesh axes of its attribute `axes` (the collectives and
  /// LocalSlice).
  kCollective = 1u << 0,
  /// Exchanges data among the ranks of its groups (AllReduce, AllGather,
  /// AllToAll).
  kCommunicates = 1u << 1,
  /// A point-to-point transfer between programs or tasks (Send, Recv).
  kTransfer = 1u << 2,
  /// An optimizer update: updates its inputs in place once per step.
  kOptimizer = 1u << 3,
  /// Made by shoal-fuse out of several ONNX ops.
  kFused = 1u << 4,
  /// Its output may share its input's buffer (OpInfo::aliasesInput says
  /// whether an op does): its kernel sets the output itself.
  kMayAlias = 1u << 5,
  /// Runs at the rate of matrix products in the planner's cost model.
  kMatMulClass = 1u << 6,
};

/// The scheduler runs ops with any of these flags itself: they have no
/// kernels.
constexpr unsigned kSchedulerOps = kCommunicates | kTransfer | kOptimizer;

/// An arity without an upper limit.
constexpr int kMany = 1 << 30;

enum class OpKind {
#define SHOAL_OP(Kind, ...) Kind,
#include "shoal/Schema/Ops.def"
};

constexpr int kNumOpKinds = 0
#define SHOAL_OP(...) +1
#include "shoal/Schema/Ops.def"
    ;

/// One row of Ops.def (without the type rule and the attributes, which are
/// the runtime's).
struct OpKindInfo {
  OpKind kind;
  const char *name;
  int minInputs, maxInputs, minOutputs, maxOutputs;
  unsigned flags;
};

inline constexpr OpKindInfo kOpKindTable[] = {
#define SHOAL_OP(Kind, Name, MinIn, MaxIn, MinOut, MaxOut, Flags, Rule)        \
  {OpKind::Kind, Name, MinIn, MaxIn, MinOut, MaxOut, Flags},
#include "shoal/Schema/Ops.def"
};
static_assert(sizeof(kOpKindTable) / sizeof(kOpKindTable[0]) == kNumOpKinds,
              "one row per op kind");
constexpr bool opKindTableIsIndexedByKind() {
  for (int i = 0; i < kNumOpKinds; ++i)
    if (static_cast<int>(kOpKindTable[i].kind) != i)
      return false;
  return true;
}
static_assert(opKindTableIsIndexedByKind(), "row i describes OpKind i");

constexpr const OpKindInfo &opKindInfo(OpKind kind) {
  return kOpKindTable[static_cast<int>(kind)];
}

/// The kind as plans spell it ("MatMul").
constexpr const char *opKindName(OpKind kind) { return opKindInfo(kind).name; }

/// Whether `kind` has any of `flags`.
constexpr bool opKindHas(OpKind kind, unsigned flags) {
  return (opKindInfo(kind).flags & flags) != 0;
}

/// The kind plans spell `name`; false if there is none.
inline bool lookupOpKind(std::string_view name, OpKind &kind) {
  for (const OpKindInfo &info : kOpKindTable)
    if (name == info.name) {
      kind = info.kind;
      return true;
    }
  return false;
}

/// Whether the kind spelled `name` exists and has any of `flags`.
inline bool opKindHas(std::string_view name, unsigned flags) {
  OpKind kind;
  return lookupOpKind(name, kind) && opKindHas(kind, flags);
}

} // namespace rt
} // namespace shoal

#endif // SHOAL_SCHEMA_OPTABLE_H
