//===- ReportInternal.h - The parallelism report's model --------*- C++ -*-===//
//
// What the report's analysis (ReportAnalysis.cpp) finds in a partitioned
// module and its two printers (ReportText.cpp, ReportDot.cpp) write.
// Private to shoal-report.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TRANSFORMS_REPORTINTERNAL_H
#define SHOAL_LIB_TRANSFORMS_REPORTINTERNAL_H

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

#include <string>
#include <utility>
#include <vector>

namespace shoal::report {

/// `1.5 KiB`.
std::string formatBytes(int64_t bytes);
/// `0-3` or `0,1,4,5`: runs of three or more ranks as ranges.
std::string formatRanks(llvm::ArrayRef<int64_t> ranks);
/// `mb=2 x dp=2 x tp=2`.
std::string formatMesh(MeshAttr mesh);
/// The mesh of `tg` as the report shows it: a replicate TaskGraph's device
/// axes all split the batch and show as one `dp` (`mb=2 x dp=4`).
std::string formatMesh(TaskGraphOp tg);
/// `axis` as the report names it in `tg`: `dp` for every device axis of a
/// replicate TaskGraph.
std::string displayAxis(llvm::StringRef axis, TaskGraphOp tg);
/// The size of the mesh's micro-batch axis (1 without one).
int64_t getMicroBatches(MeshAttr mesh);

//===----------------------------------------------------------------------===//
// The report
//===----------------------------------------------------------------------===//

struct CollectiveInfo {
  mlir::Operation *op;
  std::string kind;
  std::string axes;
  std::string dims;
  std::string shapes;
  int64_t bytes = 0;
  std::string node;
  std::string phase;
  std::string reason;
};

struct TransferInfo {
  std::string text;
  int64_t bytes = 0;
};

struct TaskGraphInfo {
  TaskGraphOp tg;
  llvm::SmallVector<int64_t> ranks;
  std::string inputs;
  llvm::SmallVector<CollectiveInfo> collectives;
  llvm::SmallVector<TransferInfo> sends, recvs;
  llvm::SmallVector<std::string> warnings;
  /// Replicated work that is so by design (not counted as warnings).
  llvm::SmallVector<std::string> notes;
};

/// A value between TaskGraphs for the picture: graph input -> TaskGraph,
/// TaskGraph -> TaskGraph (same devices, a bridge, or a send/recv pair),
/// TaskGraph -> graph output.
struct Edge {
  std::string from, to, label, style;
};

class ReportBuilder {
public:
  explicit ReportBuilder(mlir::ModuleOp module) : module(module) {}

  void build() {
    for (auto func : module.getOps<mlir::func::FuncOp>()) {
      if (func.isExternal())
        continue;
      buildFunc(func);
    }
  }

  /// ReportText.cpp.
  void printText(llvm::raw_ostream &os);
  /// ReportDot.cpp.
  void printDot(llvm::raw_ostream &os);

private:
  void buildFunc(mlir::func::FuncOp func);
  void describeCollective(TaskGraphInfo &info, mlir::Operation *op);
  void addWarnings(TaskGraphInfo &info, int64_t globalBatch);
  std::string nodeId(TaskGraphOp tg) {
    return "tg" + std::to_string(index.lookup(tg.getOperation()));
  }

  mlir::ModuleOp module;
  std::vector<TaskGraphInfo> graphs;
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  llvm::SmallVector<std::string> bridges;
  llvm::SmallVector<std::pair<std::string, std::string>>
      graphInputs; // id, label
  llvm::SmallVector<std::pair<std::string, std::string>>
      graphOutputs; // id, label
  llvm::SmallVector<Edge> edges;
  int64_t micro = 1;
  llvm::SetVector<int64_t> stages;
};

} // namespace shoal::report

#endif // SHOAL_LIB_TRANSFORMS_REPORTINTERNAL_H
