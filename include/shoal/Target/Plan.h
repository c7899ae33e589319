//===- Plan.h - Executable plan export --------------------------*- C++ -*-===//

#ifndef SHOAL_TARGET_PLAN_H
#define SHOAL_TARGET_PLAN_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

namespace shoal {

/// Writes the protobuf plan (proto/plan.proto) of a partitioned module.
/// `planDir` is the folder the plan will live in (the folder of
/// shoal-compile's or shoal-translate's -o): weight sources inside it are
/// written relative to it, the others, and all where `planDir` is empty
/// (shoal-translate's plan written to stdout), as absolute paths. Emits an
/// error on the offending op and fails if the module is not in SPMD form.
mlir::LogicalResult exportPlan(mlir::ModuleOp module, llvm::raw_ostream &os,
                               llvm::StringRef planDir);

/// The device a plan runs on by default ("cpu" or "cuda"), recorded in the
/// module as `shoal.device`.
inline constexpr llvm::StringLiteral kDeviceAttr = "shoal.device";

/// Writes the same plan in protobuf's text format (for reading and tests).
mlir::LogicalResult exportPlanAsText(mlir::ModuleOp module,
                                     llvm::raw_ostream &os);

} // namespace shoal

#endif // SHOAL_TARGET_PLAN_H
