//===- Report.cpp - shoal-report and writeParallelismReport -----*- C++ -*-===//
//
// Reads a partitioned module and says, per TaskGraph, where it runs, which
// collectives it contains and why, what it sends to and receives from other
// TaskGraphs, and where it computes work its strategy should have split.
// A collective's reason is the `shoal.reason` its inserting pass wrote, or
// one derived from the IR: who produces its input (an all_reduce sums the
// partial results of a contraction) and who consumes its result (an
// all_gather feeds an op that needs the value whole).
//
//===----------------------------------------------------------------------===//

#include "shoal/Transforms/Report.h"
#include "ReportInternal.h"
#include "shoal/Support/Files.h"
#include "shoal/Transforms/Passes.h"

namespace shoal {
#define GEN_PASS_DEF_REPORTPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;
using namespace shoal::report;

namespace {

//===----------------------------------------------------------------------===//
// The pass
//===----------------------------------------------------------------------===//

struct ReportPass : public ::shoal::impl::ReportPassBase<ReportPass> {
  using ReportPassBase::ReportPassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    ReportFormat kind;
    if (format == "text") {
      kind = ReportFormat::Text;
    } else if (format == "dot") {
      kind = ReportFormat::Dot;
    } else {
      module.emitError() << "shoal-report: unknown format '" << format
                         << "' (text or dot)";
      return signalPassFailure();
    }
    markAllAnalysesPreserved();
    if (file == "-") {
      writeParallelismReport(module, llvm::outs(), kind);
      llvm::outs().flush();
      return;
    }
    std::string text;
    llvm::raw_string_ostream os(text);
    writeParallelismReport(module, os, kind);
    // Written aside and renamed into place: never through a symlink.
    if (std::string err = shoal::writeFileAtomically(file, os.str());
        !err.empty()) {
      module.emitError() << "shoal-report: " << err;
      return signalPassFailure();
    }
  }
};

} // namespace

void shoal::writeParallelismReport(ModuleOp module, raw_ostream &os,
                                   ReportFormat format) {
  ReportBuilder builder(module);
  builder.build();
  if (format == ReportFormat::Dot)
    builder.printDot(os);
  else
    builder.printText(os);
}
