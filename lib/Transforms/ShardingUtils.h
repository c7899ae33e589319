//===- ShardingUtils.h - Shared helpers of the sharding passes --*- C++ -*-===//

#ifndef SHOAL_TRANSFORMS_SHARDINGUTILS_H
#define SHOAL_TRANSFORMS_SHARDINGUTILS_H

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

namespace mlir {
class ModuleOp;
namespace func {
class FuncOp;
} // namespace func
} // namespace mlir

namespace shoal {

/// Mesh axes that split each factor of an op's sharding rule.
using FactorAxes = llvm::SmallVector<llvm::SmallVector<llvm::StringRef>>;

/// Outer count of each factor of an op's sharding rule: a factor split
/// over its axes in `outer` consecutive runs, a block of each per rank
/// (1: a plain block split). See ShardingAttr.
using FactorOuter = llvm::SmallVector<int64_t>;

/// Name of the op attribute holding the factors' outer counts (absent when
/// all are 1).
inline constexpr llvm::StringLiteral kFactorOuterAttr = "shoal.factor_outer";

/// Reads `shoal.factor_sharding` of an op (empty if absent).
FactorAxes getFactorAxes(mlir::Operation *op);

/// Reads `shoal.factor_outer` of an op: `numFactors` entries, 1 if absent.
FactorOuter getFactorOuter(mlir::Operation *op, size_t numFactors);

/// The sharding a tensor with the given factors has under `axes`: each
/// dimension takes the axes of its first split factor. A dimension whose
/// split factor is not its major one (or is itself strided) is strided:
/// its outer count is the product of the sizes of the factors before it,
/// times the factor's own outer count.
ShardingAttr shardingFromFactors(mlir::MLIRContext *ctx,
                                 const ShardingRule &rule,
                                 const TensorFactors &dims,
                                 const FactorAxes &axes,
                                 llvm::ArrayRef<int64_t> outer = {});

/// `s` with every strided dimension made whole (what leaves a TaskGraph,
/// crosses a bridge or reaches a weight: they only know block splits).
ShardingAttr dropStrided(ShardingAttr s);

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

/// True if `v` is a weight, or a weight only transposed, reshaped or cast:
/// its uneven shards are padded with zeros.
bool isZeroPaddedWeight(mlir::Value v);

/// The layout a TaskGraph's values have: its mesh and ranks with `sharding`.
LayoutAttr getLayout(TaskGraphOp tg, ShardingAttr sharding);

/// A weight view: a reshape of a weight (shoal-fused-weight-views) or a
/// transpose of one (an `nn.Linear` exported in training mode reads
/// `Transpose(W)`). Like weights it is cloned into every TaskGraph that
/// reads it and laid out by its users, the weight taking the matching
/// block split.
bool isWeightView(mlir::Operation *op);

/// A lookup of whole matrices in a stack of them by ids computed at run
/// time (transformers 5's batched_mm experts, `gate_up_proj[expert_ids]`):
/// a Gather along axis 0 of a weight of rank >= 3 whose indices are not a
/// constant; null otherwise. Laid out by its user like a weight view
/// (shoal-propagate-sharding), cut in blocks with a fused product
/// (shoal-fused-weight-views).
GatherOp getGatheredWeight(mlir::Operation *op);

/// The ONNX node name of an op (the name of its NameLoc, as the importer
/// writes it), or empty: what spec patterns and recompute layers match.
llvm::StringRef onnxNodeName(mlir::Operation *op);

/// The batch dimension of graph input `i`: 0 unless the spec's `inputs:`
/// gave another (`shoal.batch_dim`).
int64_t getBatchDim(mlir::func::FuncOp func, unsigned i);

/// The batch: the batch dimension of the first graph input of rank >= 1
/// and its size ({0, -1} if there is none).
std::pair<int64_t, int64_t> getBatch(mlir::func::FuncOp func);

/// Module attribute (shoal-annotate): where the spec wrote each scope
/// ("scope:<name>") and the micro-batch count ("num_micro_batch"), as
/// "file:line".
inline constexpr llvm::StringLiteral kSpecLocationsAttr =
    "shoal.spec_locations";

/// " (spec.yaml:3)" for `key` of kSpecLocationsAttr on `op`'s module, or "".
std::string specLocation(mlir::Operation *op, llvm::StringRef key);

/// True when the module's scopes become pipeline stages on devices of their
/// own (Whale's rule, shoal-form-task-graphs): the spec asks for
/// micro-batches, or its scopes differ in device count, or shoal-plan's
/// search chose a pipeline (kPipelinedAttr; it may have one micro-batch and
/// stages of the same size).
bool isStaged(mlir::ModuleOp module);
/// Module: set by shoal-plan when the layout it searched for is a pipeline.
inline constexpr llvm::StringLiteral kPipelinedAttr = "shoal.pipelined";
/// Module: shoal-plan's compiled batch shares, micro-batches per rank (one
/// stage; the module's micro-batch count is their sum over the ranks). The
/// plan's export writes them as Program.micro_batch_shares.
inline constexpr llvm::StringLiteral kMicroBatchSharesAttr =
    "shoal.micro_batch_shares";

/// Module: shoal-plan's compiled shards by speed: scope name -> the
/// weights (per mille of the split) of each coordinate on its "tp" axis.
/// shoal-partition keeps the even types and marks the values whose blocks
/// differ between ranks (kUnevenLayoutsAttr, kUnevenAttr on the TaskGraph);
/// the plan export writes Program.uneven_axes and value_layouts.
inline constexpr llvm::StringLiteral kUnevenShardsAttr = "shoal.uneven_shards";
/// Module: shoal-plan's compiled batch blocks: replicated scope name -> the
/// samples of the batch each coordinate on its "tp" axis (its replicas)
/// gets. shoal-partition marks the values as for kUnevenShardsAttr, in
/// blocks of whole samples, the TaskGraph's graph inputs included
/// (kUnevenArgLayoutsAttr).
inline constexpr llvm::StringLiteral kBatchBlocksAttr = "shoal.batch_blocks";
/// TaskGraph: per block argument, {global_shape, sharding} of a graph input
/// whose blocks are uneven, or a unit attribute.
inline constexpr llvm::StringLiteral kUnevenArgLayoutsAttr =
    "shoal.uneven_arg_layouts";
/// Module: the multiple uneven blocks are rounded to (elements of a split
/// dimension; 1 when it does not divide the dimension).
inline constexpr llvm::StringLiteral kShardMultipleAttr =
    "shoal.shard_multiple";
/// TaskGraph: {axis, weights, multiple} of its uneven axis.
inline constexpr llvm::StringLiteral kUnevenAttr = "shoal.uneven";
/// Op: per result, {global_shape, sharding} of a value whose blocks are
/// uneven, or a unit attribute.
inline constexpr llvm::StringLiteral kUnevenLayoutsAttr =
    "shoal.uneven_layouts";

/// `to` has the uneven layout `from` has (kUnevenLayoutsAttr), if any: what
/// passes after shoal-partition call when a new op stands for a value
/// (shoal-fuse's fused ops, shoal-mixed-precision's casts).
void copyUnevenLayout(mlir::Value from, mlir::Value to);

/// Module: names of the scopes with `sequence_parallel: true` (the
/// annotation spec); a TaskGraph of such a scope carries
/// kSequenceParallelAttr (shoal-form-task-graphs).
inline constexpr llvm::StringLiteral kScopeSequenceParallelAttr =
    "shoal.scope_sequence_parallel";
inline constexpr llvm::StringLiteral kSequenceParallelAttr =
    "shoal.sequence_parallel";
/// From shoal-propagate-sharding to shoal-partition: on an op, the results
/// split along the sequence (weak tp splits of sequence parallelism); on a
/// TaskGraph, the block arguments that are.
inline constexpr llvm::StringLiteral kSequenceSplitAttr =
    "shoal.sequence_split";
/// From shoal-propagate-sharding to the report: on a contraction of a split
/// TaskGraph whose weight stays whole over tp because its split would be
/// needed whole by the op this names before any product contracts it.
inline constexpr llvm::StringLiteral kTpKeptWholeAttr = "shoal.tp_kept_whole";
/// From shoal-partition to the report: on the Slice that drops the zero
/// padding after an all_gather of uneven blocks (part of that gather).
inline constexpr llvm::StringLiteral kUnpadAttr = "shoal.unpad";

/// Name of the TaskGraph attribute holding the shardings its inputs arrive
/// with, and the one holding the shardings its body uses for them.
/// A cast shoal-mixed-precision made around a matrix product (the report
/// looks through it to the product).
inline constexpr llvm::StringLiteral kPrecisionCastAttr =
    "shoal.precision_cast";
inline constexpr llvm::StringLiteral kInShardingsAttr = "shoal.in_shardings";
inline constexpr llvm::StringLiteral kArgShardingsAttr = "shoal.arg_shardings";

} // namespace shoal

#endif // SHOAL_TRANSFORMS_SHARDINGUTILS_H
