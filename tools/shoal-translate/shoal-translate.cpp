//===- shoal-translate.cpp - ONNX import and plan export --------*- C++ -*-===//
//
//   shoal-translate --import-onnx model.onnx [--input-shape x=8,32] > m.mlir
//   shoal-translate --export-plan spmd.mlir -o model.plan
//
//===----------------------------------------------------------------------===//

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include "shoal/Target/ONNX.h"
#include "shoal/Target/Plan.h"
#include "shoal/Tools/AtomicOutput.h"
#include "shoal/Tools/CommandLine.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

static llvm::cl::OptionCategory translateCategory("shoal-translate options");

static llvm::cl::list<std::string> inputShapeOpts(
    "input-shape", llvm::cl::cat(translateCategory),
    llvm::cl::desc("Static shape for a graph input, for --import-onnx; "
                   "repeat the flag or separate entries with ';'"),
    llvm::cl::value_desc("name=d0,d1,..."));

static llvm::cl::opt<int64_t> batchNormGroups(
    "batch-norm-groups", llvm::cl::cat(translateCategory), llvm::cl::init(1),
    llvm::cl::desc("For --import-onnx: training-mode BatchNormalization "
                   "takes its statistics per this many groups of samples "
                   "(the spec's num_micro_batch)"),
    llvm::cl::value_desc("N"));

static void registerDialects(DialectRegistry &registry) {
  registry.insert<shoal::ShoalDialect, func::FuncDialect>();
}

/// Prints a diagnostic of the importer. Its errors name the file in their
/// text and carry no source location (a binary model has no lines), so they
/// are printed as `error: <path>: ...` rather than mlir-translate's
/// `<unknown>:0: error: ...`; a diagnostic on an op names the op's node.
static void printImportDiagnostic(Diagnostic &diag) {
  llvm::raw_ostream &os = llvm::errs();
  switch (diag.getSeverity()) {
  case DiagnosticSeverity::Error:
    os << "error: ";
    break;
  case DiagnosticSeverity::Warning:
    os << "warning: ";
    break;
  case DiagnosticSeverity::Note:
    os << "note: ";
    break;
  case DiagnosticSeverity::Remark:
    os << "remark: ";
    break;
  }
  if (auto name = dyn_cast<NameLoc>(diag.getLocation())) {
    if (auto file = dyn_cast<FileLineColLoc>(name.getChildLoc()))
      os << file.getFilename().getValue() << ": ";
    os << "node '" << name.getName().getValue() << "': ";
  }
  os << diag << "\n";
  for (Diagnostic &note : diag.getNotes())
    printImportDiagnostic(note);
}

static OwningOpRef<Operation *> importONNX(llvm::SourceMgr &sourceMgr,
                                           MLIRContext *ctx) {
  ScopedDiagnosticHandler handler(ctx, [](Diagnostic &diag) {
    printImportDiagnostic(diag);
    return success();
  });
  std::vector<shoal::InputShape> shapes;
  for (llvm::StringRef opt : inputShapeOpts) {
    llvm::SmallVector<llvm::StringRef> entries;
    opt.split(entries, ';', /*MaxSplit=*/-1, /*KeepEmpty=*/false);
    for (llvm::StringRef entry : entries) {
      shoal::InputShape shape;
      std::string error = shoal::parseInputShape(entry, shape);
      if (!error.empty()) {
        emitError(UnknownLoc::get(ctx)) << "--input-shape: " << error;
        return nullptr;
      }
      shapes.push_back(std::move(shape));
    }
  }
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  OwningOpRef<ModuleOp> module = shoal::importONNXBuffer(
      buffer->getBufferIdentifier(), buffer->getBuffer(), shapes, ctx,
      /*foldFloatInitializers=*/true, batchNormGroups);
  return module ? module.release().getOperation() : nullptr;
}

/// The folder of the file `-o` names (findOutputArgument, as
/// runWithAtomicOutput finds it), absolute: --export-plan writes the model's
/// path relative to it, as shoal-compile does with its -o. Empty for stdout
/// (no -o, or "-"), whose plan may land anywhere: the path stays absolute.
static std::string outputFolder(int argc, char **argv) {
  std::string output = shoal::findOutputArgument(argc, argv).file;
  if (output.empty() || output == "-")
    return "";
  llvm::SmallString<256> dir(output);
  llvm::sys::fs::make_absolute(dir);
  llvm::sys::path::remove_filename(dir);
  return dir.str().str();
}

int main(int argc, char **argv) {
  // mlirTranslateMain registers its own options (input, -o, the
  // translations, the printer's) after this, so they stay in --help.
  shoal::hideUnrelatedOptions(&translateCategory);
  TranslateToMLIRRegistration importRegistration(
      "import-onnx", "Import an ONNX model (.onnx, or .onnxtext text syntax)",
      importONNX, registerDialects);
  TranslateFromMLIRRegistration exportRegistration(
      "export-plan", "Write the protobuf plan of an SPMD module",
      [planDir = outputFolder(argc, argv)](ModuleOp module,
                                           llvm::raw_ostream &os) {
        return shoal::exportPlan(module, os, planDir);
      },
      registerDialects);
  TranslateFromMLIRRegistration exportTextRegistration(
      "export-plan-text",
      "Write the plan in protobuf's text format (for reading and tests)",
      [](ModuleOp module, llvm::raw_ostream &os) {
        return shoal::exportPlanAsText(module, os);
      },
      registerDialects);
  // -o is written to a new file renamed into place: never through a symlink.
  return shoal::runWithAtomicOutput(
      argc, argv, "shoal-translate", [](int argc, char **argv) {
        return failed(mlirTranslateMain(argc, argv, "shoal translation tool"))
                   ? 1
                   : 0;
      });
}
