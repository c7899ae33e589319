//===- ShoalOps.h - shoal operations ----------------------------*- C++ -*-===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHOALOPS_H
#define SHOAL_DIALECT_SHOAL_IR_SHOALOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "shoal/Dialect/Shoal/IR/ShardingRule.h"
#include "shoal/Dialect/Shoal/IR/ShoalDialect.h"

namespace shoal {
/// Total bytes of the statically shaped tensors in `types`.
int64_t getTensorBytes(mlir::TypeRange types);
/// Sharding rule of an elementwise op with numpy broadcasting.
ShardingRule getElementwiseShardingRule(mlir::Operation *op);
/// Sharding rule of a reduction over `axes`.
ShardingRule getReduceShardingRule(mlir::Operation *op,
                                   llvm::ArrayRef<int64_t> axes, bool keepdims);
mlir::LogicalResult verifyElementwiseOp(mlir::Operation *op);
/// Sharding rule and verifier of an optimizer update (every operand has the
/// weight's shape; no results).
ShardingRule getOptimizerShardingRule(mlir::Operation *op);
/// Sharding rule of the vocabulary-parallel cross-entropy pieces (local ops
/// made by shoal-partition): positions parallel, the class axis whole.
ShardingRule getVocabShardingRule(mlir::Operation *op);
mlir::LogicalResult verifyOptimizerOp(mlir::Operation *op);
/// The operands an in-place update (AdamW, SGD, assign) writes: its weight
/// (operand 0) and its optimizer state (AdamW's moments, SGD's momentum
/// buffer). Each must be the stored weight itself, never a copy of it.
llvm::SmallVector<unsigned, 3> getInPlaceOperands(mlir::Operation *op);
mlir::LogicalResult verifyReduceOp(mlir::Operation *op,
                                   llvm::ArrayRef<int64_t> axes, bool keepdims);
/// The gradient rule of `op` (GradientOpInterface): builds the gradients of
/// its operands from those of its results (ShoalGradients.cpp).
mlir::LogicalResult
buildGradient(mlir::Operation *op, mlir::OpBuilder &b,
              llvm::ArrayRef<mlir::Value> resultGrads,
              llvm::SmallVectorImpl<mlir::Value> &operandGrads);
} // namespace shoal

#include "shoal/Dialect/Shoal/IR/ShoalInterfaces.h.inc"

#define GET_OP_CLASSES
#include "shoal/Dialect/Shoal/IR/ShoalOps.h.inc"

namespace shoal {
/// The `axis` attribute of an ONNX op (`dflt` if absent), normalized into
/// [0, rank); -1 if it is out of range.
int64_t getOnnxAxis(OnnxOp op, int64_t rank, int64_t dflt);

/// The name of the initializer weight `w` reads: its own, or that of the
/// initializer it is a block of (`shoal.source_range`). Training configs'
/// weight patterns (frozen, no weight decay) match this name.
llvm::StringRef getSourceName(WeightOp w);
} // namespace shoal

#endif // SHOAL_DIALECT_SHOAL_IR_SHOALOPS_H
