//===- Recompute.h - Attribute names of shoal-recompute ---------*- C++ -*-===//
//
// Discardable attributes that shoal-annotate, shoal-recompute and shoal-fuse
// share (kept out of the dialect's header so that a change here rebuilds
// three files, not every one).
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TRANSFORMS_RECOMPUTE_H
#define SHOAL_LIB_TRANSFORMS_RECOMPUTE_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <string>

namespace shoal {

/// Module: {scope name: "none"|"full"|"selective"}, from the annotation
/// spec's per-scope `recompute:`.
inline constexpr llvm::StringLiteral kScopeRecomputeAttr =
    "shoal.scope_recompute";
/// On an op cloned by shoal-recompute into the backward.
inline constexpr llvm::StringLiteral kRecomputedAttr = "shoal.recomputed";
/// On an op: indices of results that had several users before
/// shoal-recompute moved some of them to clones (array<i64>).
inline constexpr llvm::StringLiteral kMultiUseAttr = "shoal.multi_use";

/// Whether `v` has one user and had no others before shoal-recompute.
bool hasOneUseBeforeRecompute(mlir::Value v);

/// Megatron's selective recomputation: the attention core around a
/// forward Softmax, `MatMul(q, kt) -> [Mul|Div scale] -> [Add mask | Where]
/// -> Softmax -> MatMul(., v)` with Casts anywhere, the product with v
/// last; empty when the chain is not that. (shoal-recompute's segments;
/// the planner's cost of recomputing them.)
llvm::SmallVector<mlir::Operation *> attentionCore(mlir::Operation *softmax);

/// The layer of an ONNX node name: the name up to its first numbered part
/// ("/h.3" of "/h.3/attn/MatMul", "/encoder/layer.0" of
/// "/encoder/layer.0/attention/..."); empty when no part but the node's own
/// is numbered. Full recomputation's segments (and the planner's count of
/// them).
std::string getLayerKey(llvm::StringRef name);

} // namespace shoal

#endif
