//===- Report.h - The parallelism report of a module ------------*- C++ -*-===//
//
// What a user reads instead of the partitioned IR: per TaskGraph, its
// strategy, mesh and ranks, every collective with its reason, the
// send/recv and bridges to other TaskGraphs, and warnings where a scope
// computes replicated work (docs/Report.md). A collective's reason is the
// `shoal.reason` (ShoalDialect::kReasonAttr) its inserting pass wrote, or
// one the report derives from the IR.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_TRANSFORMS_REPORT_H
#define SHOAL_TRANSFORMS_REPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

namespace shoal {

enum class ReportFormat {
  /// Plain text, one section per TaskGraph.
  Text,
  /// Graphviz `dot`: TaskGraphs as nodes, edges for the values between them.
  Dot,
};

/// Writes the parallelism report of `module` (after shoal-partition, and
/// best before shoal-fuse, whose fused ops hide the node names) to `os`.
void writeParallelismReport(mlir::ModuleOp module, llvm::raw_ostream &os,
                            ReportFormat format);

} // namespace shoal

#endif // SHOAL_TRANSFORMS_REPORT_H
