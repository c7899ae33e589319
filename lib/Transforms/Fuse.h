//===- Fuse.h - What shoal-fuse would fuse ----------------------*- C++ -*-===//
//
// shoal-fuse's prediction of its own work (Fuse.cpp), for shoal-plan, which
// times the ops the compiled plan will run.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TRANSFORMS_FUSE_H
#define SHOAL_LIB_TRANSFORMS_FUSE_H

#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <string>

namespace shoal {

/// A chain shoal-fuse would fuse into one op: the fused op's name and cost
/// (CostOpInterface; rows: of its result, for a matrix product), and the
/// ops it replaces.
struct FusionGroup {
  std::string fused;
  llvm::SmallVector<mlir::Operation *> ops;
  int64_t flops = 0, bytes = 0;
  double rows = 0;
};

/// The rows of `op`'s first result, as a matrix product's: its elements
/// but the last dimension's (0 unless a static ranked tensor).
double resultRows(mlir::Operation *op);

/// What shoal-fuse would fuse in `func` (fused on a clone; `func` is left
/// as it is): shoal-plan times the ops the compiled plan will run.
llvm::SmallVector<FusionGroup> predictFusions(mlir::Operation *func);

} // namespace shoal

#endif // SHOAL_LIB_TRANSFORMS_FUSE_H
