//===- Ops.h - Op kinds, attributes and type rules --------------*- C++ -*-===//
//
// Part of the shoal project.
//
//===----------------------------------------------------------------------===//
//
// The ops a plan may contain (proto/plan.proto, message Op), validated. Their
// kinds, arities and attributes are named once in
// include/shoal/Schema/Ops.def; each kind's type rule (lib/Runtime/ops/)
// reads its attributes and gives its output types from its input types. Plan
// validation runs these rules on every op before anything executes, so
// kernels only ever see consistent types. No backend owns this op model.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_RUNTIME_OPS_H
#define SHOAL_RUNTIME_OPS_H

#include "OpAttrs.h"
#include "Sharding.h"
#include "Tensor.h"
#include "shoal/Schema/OpTable.h"

#include <string>
#include <vector>

namespace shoal {
namespace plan {
class Op;
} // namespace plan

namespace rt {

// OpKind and its table come from include/shoal/Schema/Ops.def (OpTable.h).

/// The kind called `name` (ONNX op type or shoal collective); false if
/// unknown.
bool parseOpKind(const std::string &name, OpKind &kind);
/// The names of every kind, for messages.
std::string knownOpKinds();

/// One validated op of the program.
struct OpInfo {
  OpKind kind = OpKind::MatMul;
  int index = 0;
  std::string kindName;
  std::string name; ///< ONNX node name, may be empty.
  /// Value ids; -1 marks an absent optional operand.
  std::vector<int> inputs, outputs;
  OpAttrs attrs;
  /// The task (index into LoadedPlan::tasks) the op belongs to.
  int task = 0;
  /// Send and Recv: index into LoadedPlan::transfers; -1 otherwise.
  int transfer = -1;
  /// FLOPs and bytes the compiler estimated for the op (Op.flops, Op.bytes;
  /// 0 when unknown), for profiles.
  double flops = 0, bytes = 0;

  /// Its output shares its input's buffer (an op flagged kMayAlias whose
  /// type rule found it an identity or reshape): the kernel sets the output
  /// with Tensor::alias instead of writing into a preallocated one.
  bool aliasesInput = false;

  /// `op #3 '/h.0/attn/MatMul' (MatMul)`, for messages.
  std::string describe() const;
  /// Whether its kind has any of `flags` (OpFlags).
  bool has(unsigned flags) const { return opKindHas(kind, flags); }
  bool isCollective() const { return has(kCollective); }
};

/// Checks `op` (number `index` in its program) against the local `types` of
/// the program's values: known kind, arity (both from Ops.def), value ids in
/// range, then the kind's type rule (ops/TypeRules.h): attributes, and
/// declared output types equal to what the inputs give. Returns the
/// parsed op; throws Error saying what is wrong (without the op prefix).
/// Send and Recv are only checked for arity and for having a transfer: their
/// types depend on the rank, which the plan loader knows.
OpInfo checkOp(const plan::Op &op, int index,
               const std::vector<TensorType> &types, const Mesh &mesh);

} // namespace rt
} // namespace shoal

#endif // SHOAL_RUNTIME_OPS_H
