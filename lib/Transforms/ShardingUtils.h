//===- ShardingUtils.h - Shared helpers of the sharding passes --*- C++ -*-===//

#ifndef SHOAL_TRANSFORMS_SHARDINGUTILS_H
#define SHOAL_TRANSFORMS_SHARDINGUTILS_H

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

namespace shoal {

/// Mesh axes that split each factor of an op's sharding rule.
using FactorAxes = llvm::SmallVector<llvm::SmallVector<llvm::StringRef>>;

/// Reads `shoal.factor_sharding` of an op (empty if absent).
FactorAxes getFactorAxes(mlir::Operation *op);

/// The sharding a tensor with the given factors has under `axes`: each
/// dimension takes the axes of its major factor.
ShardingAttr shardingFromFactors(mlir::MLIRContext *ctx,
                                 const TensorFactors &dims,
                                 const FactorAxes &axes);

/// Sharding of a value as recorded by shoal-propagate-sharding: on the
/// defining op's `shoal.sharding`, or on the TaskGraph for block arguments.
/// Replicated when nothing is recorded.
ShardingAttr getValueSharding(mlir::Value v);

/// Number of ranks `axes` spans in `mesh`.
int64_t getAxesSize(MeshAttr mesh, llvm::ArrayRef<llvm::StringRef> axes);

/// Checks that `sharding` fits `type` on `mesh`: one entry per dimension,
/// known axes, each used once, and sizes that divide. `emitError` starts an
/// error naming the value.
mlir::LogicalResult
verifySharding(ShardingAttr sharding, mlir::RankedTensorType type,
               MeshAttr mesh,
               llvm::function_ref<mlir::InFlightDiagnostic()> emitError);

/// Local type of a tensor of `type` split by `sharding` over `mesh`.
mlir::RankedTensorType getLocalType(mlir::RankedTensorType type,
                                    ShardingAttr sharding, MeshAttr mesh);

/// The TaskGraph that holds `v` for others: the one producing it, or for a
/// function argument the first TaskGraph reading it. Null if none.
TaskGraphOp getOwnerTaskGraph(mlir::Value v);

/// True if two TaskGraphs run on the same ranks with the same mesh.
bool samePlacement(TaskGraphOp a, TaskGraphOp b);

/// The layout a TaskGraph's values have: its mesh and ranks with `sharding`.
LayoutAttr getLayout(TaskGraphOp tg, ShardingAttr sharding);

/// Name of the TaskGraph attribute holding the shardings its inputs arrive
/// with, and the one holding the shardings its body uses for them.
inline constexpr llvm::StringLiteral kInShardingsAttr = "shoal.in_shardings";
inline constexpr llvm::StringLiteral kArgShardingsAttr = "shoal.arg_shardings";

} // namespace shoal

#endif // SHOAL_TRANSFORMS_SHARDINGUTILS_H
