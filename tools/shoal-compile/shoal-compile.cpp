//===- shoal-compile.cpp - ONNX to executable plan in one go ----*- C++ -*-===//
//
//   shoal-compile model.onnx --annotate spec.yaml --world-size 4 -o model.plan
//   shoal-compile model.onnx --cluster cluster.yaml --explain -o model.plan
//   shoal-compile model.onnx --annotate spec.yaml --train train.yaml -o t.plan
//   shoal-compile model.onnx --annotate spec.yaml --report -o model.plan
//   shoal-compile model.mlir --cluster cluster.yaml -o model.plan
//
// Imports the model, runs the shoal-parallelize pipeline and exports the
// plan. The same as shoal-translate --import-onnx | shoal-opt
// --shoal-parallelize | shoal-translate --export-plan. A `.mlir` file is a
// module of the shoal dialect (shoal-translate --import-onnx's output, or
// bench/gpt_mlir.py's shapes-only models) and is read as it is.
//
//===----------------------------------------------------------------------===//

#include "shoal/Support/Files.h"
#include "shoal/Target/ONNX.h"
#include "shoal/Target/Plan.h"
#include "shoal/Tools/CommandLine.h"
#include "shoal/Transforms/CompileOptions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;
namespace cl = llvm::cl;

static cl::OptionCategory compileCategory("shoal-compile options");

// The options that shape the compile (--annotate, --world-size, --cluster,
// --train, --device, ...) are CompileOptions.def's, registered by
// shoal::registerCompileCLOptions and shared with the shoal-parallelize
// pipeline; these are the tool's own.
static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx | model.mlir>"),
                                      cl::cat(compileCategory));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Static shape of a graph input: name=d0,d1,..."),
                cl::value_desc("name=dims"), cl::cat(compileCategory));
static cl::opt<std::string> outputPath("o", cl::desc("Output plan file"),
                                       cl::value_desc("file"),
                                       cl::cat(compileCategory));
static cl::opt<bool> listNodes(
    "list-nodes",
    cl::desc("Print every node of the ONNX model, one per line: the name "
             "spec patterns match, its op type and its name in the file, "
             "separated by tabs; then exit (no -o needed)"),
    cl::cat(compileCategory));
static cl::opt<std::string>
    emitMlir("emit-mlir", cl::desc("Also write the partitioned IR to a file"),
             cl::value_desc("file"), cl::cat(compileCategory));
static cl::opt<bool>
    report("report",
           cl::desc("Print the parallelism report to stdout (the same as "
                    "--report-file=-): per TaskGraph its ranks, every "
                    "collective and why, transfers, replicated work "
                    "(docs/Report.md)"),
           cl::cat(compileCategory));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  shoal::registerCompileCLOptions(compileCategory);
  shoal::hideUnrelatedOptions(&compileCategory);
  mlir::registerPassManagerCLOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "shoal-compile: ONNX model + annotations -> executable plan\n");
  auto fail = [](const llvm::Twine &msg) {
    llvm::errs() << "shoal-compile: error: " << msg << "\n";
    return 1;
  };
  if (listNodes) {
    MLIRContext ctx;
    auto names = shoal::listONNXNodeNames(modelPath, &ctx);
    if (failed(names))
      return 1;
    for (const shoal::ONNXNodeName &n : *names)
      llvm::outs() << n.name << "\t" << n.opType << "\t" << n.onnxName << "\n";
    return 0;
  }
  if (outputPath.empty())
    return fail("-o FILE (the plan to write) is required");
  // Checks the values and reads the training config and the annotation
  // spec (once: the import and shoal-annotate both take it from `options`).
  shoal::CompileOptions options = shoal::compileOptionsFromCL();
  if (std::string err =
          shoal::resolveCompileOptions(options, shoal::OptionSpelling::Flag);
      !err.empty())
    return fail(err);
  if (report && options.report.empty()) {
    if (outputPath == "-")
      return fail("--report prints to stdout, where -o - writes the plan; "
                  "use --report-file");
    options.report = "-";
  }

  // A report file that cannot be written fails now, not after the compile.
  for (const std::string &path : {options.report, options.reportDot}) {
    if (path.empty() || path == "-")
      continue;
    // Creates (and drops) a temporary file next to it; opening the file
    // itself would truncate whatever a symlink there points to.
    shoal::AtomicFile probe(path);
    if (!probe.ok())
      return fail(probe.error());
  }

  std::vector<shoal::InputShape> shapes;
  for (const std::string &text : inputShapes) {
    shoal::InputShape s;
    std::string err = shoal::parseInputShape(text, s);
    if (!err.empty())
      return fail(err);
    shapes.push_back(std::move(s));
  }

  MLIRContext ctx;
  ctx.loadDialect<shoal::ShoalDialect, func::FuncDialect>();
  // Without a handler MLIR prints errors only: show the passes' warnings
  // (a layout that is not what it seems) too; errors keep the default.
  ctx.getDiagEngine().registerHandler([](Diagnostic &d) -> LogicalResult {
    if (d.getSeverity() != DiagnosticSeverity::Warning)
      return failure();
    llvm::errs() << d.getLocation() << ": warning: " << d << "\n";
    return success();
  });
  // A training compile must not fold weights away (they are trained).
  // Training-mode BatchNormalization takes its statistics per micro-batch.
  int64_t microBatches = options.microBatches();
  OwningOpRef<ModuleOp> module;
  if (llvm::StringRef(modelPath).ends_with(".mlir")) {
    if (!shapes.empty())
      return fail("--input-shape applies to ONNX models; " + modelPath +
                  " is a .mlir module with static shapes");
    if (std::string err = shoal::checkRegularFile(modelPath); !err.empty())
      return fail(modelPath + ": " + err);
    module = parseSourceFile<ModuleOp>(modelPath, &ctx);
  } else {
    // A training import restores the parameters an eval-mode export merged
    // into a copy of the model next to the plan (docs/Importer.md), from
    // which the plan's weights are then read.
    std::string restoredModel;
    if (options.trainConfig && outputPath != "-")
      restoredModel = outputPath + ".source/" +
                      llvm::sys::path::stem(modelPath).str() + ".onnx";
    module = shoal::importONNX(modelPath, shapes, &ctx,
                               /*foldFloatInitializers=*/!options.trainConfig,
                               microBatches, restoredModel);
    if (module)
      if (auto restored = (*module)->getAttrOfType<DictionaryAttr>(
              shoal::ShoalDialect::kRestoredAttr)) {
        auto count = [&](StringRef key) {
          auto list = restored.getAs<ArrayAttr>(key);
          return list ? list.size() : 0;
        };
        llvm::errs() << "shoal-compile: " << modelPath << ": restored "
                     << count("copies")
                     << " parameters the export read through Identity nodes "
                        "and "
                     << count("ties")
                     << " tied weights it had folded into copies; the plan "
                        "reads its weights from "
                     << restoredModel << "\n";
      }
  }
  if (!module)
    return 1;

  PassManager pm(&ctx);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  shoal::addParallelizePipeline(pm, options);
  if (failed(pm.run(*module)))
    return 1;

  // Files are written aside and renamed into place (never through a
  // symlink); "-" is stdout. Returns the exit status.
  auto write = [&](const std::string &path, const std::string &bytes) {
    if (path == "-") {
      llvm::outs() << bytes;
      llvm::outs().flush();
      return 0;
    }
    std::string err = shoal::writeFileAtomically(path, bytes);
    return err.empty() ? 0 : fail(err);
  };
  if (!emitMlir.empty()) {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    if (int status = write(emitMlir, os.str()))
      return status;
  }

  SmallString<256> dir(outputPath);
  llvm::sys::fs::make_absolute(dir);
  llvm::sys::path::remove_filename(dir);
  std::string plan;
  llvm::raw_string_ostream os(plan);
  if (failed(shoal::exportPlan(*module, os, dir)))
    return 1;
  return write(outputPath, os.str());
}
