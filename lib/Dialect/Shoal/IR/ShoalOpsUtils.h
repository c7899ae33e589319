//===- ShoalOpsUtils.h - Shape helpers of the ops ---------------*- C++ -*-===//
//
// Shape helpers that the ops' verifiers (ShoalOps.cpp) and their sharding
// rules (ShoalShardingRules.cpp) share. Private to the dialect library.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_DIALECT_SHOAL_IR_SHOALOPSUTILS_H
#define SHOAL_LIB_DIALECT_SHOAL_IR_SHOALOPSUTILS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/Value.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <string>

namespace shoal::detail {

inline llvm::ArrayRef<int64_t> shapeOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType()).getShape();
}
inline int64_t rankOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType()).getRank();
}

/// Prints a shape as `[4, 8]` in diagnostics.
std::string fmtShape(llvm::ArrayRef<int64_t> shape);

/// Normalizes a possibly negative axis; returns -1 if out of range.
inline int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return -1;
  return axis < 0 ? axis + rank : axis;
}

/// Numpy broadcast of `shapes`; fails if incompatible.
mlir::FailureOr<llvm::SmallVector<int64_t>>
broadcastShapes(llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

/// Batch, M, K, N of a numpy matmul; fails with a diagnostic.
struct MatMulDims {
  llvm::SmallVector<int64_t> batch;
  bool hasM, hasN;
  int64_t m, k, n;
};

mlir::FailureOr<MatMulDims> getMatMulDims(mlir::Operation *op,
                                          llvm::ArrayRef<int64_t> a,
                                          llvm::ArrayRef<int64_t> b);

} // namespace shoal::detail

#endif // SHOAL_LIB_DIALECT_SHOAL_IR_SHOALOPSUTILS_H
