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
#include "shoal/Transforms/Passes.h"

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

static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx | model.mlir>"),
                                      cl::cat(compileCategory));
static cl::opt<std::string> specPath("annotate",
                                     cl::desc("YAML annotation spec"),
                                     cl::value_desc("spec.yaml"),
                                     cl::cat(compileCategory));
static cl::opt<int64_t>
    worldSize("world-size",
              cl::desc("Number of ranks (default: the scopes' device count)"),
              cl::init(0), cl::cat(compileCategory));
static cl::list<std::string>
    inputShapes("input-shape",
                cl::desc("Static shape of a graph input: name=d0,d1,..."),
                cl::value_desc("name=dims"), cl::cat(compileCategory));
static cl::opt<std::string> outputPath("o", cl::desc("Output plan file"),
                                       cl::value_desc("file"), cl::Required,
                                       cl::cat(compileCategory));
static cl::opt<std::string>
    device("device",
           cl::desc("Device the plan runs on by default: cpu or cuda "
                    "(shoal-run --backend overrides it)"),
           cl::init("cpu"), cl::cat(compileCategory));
static cl::opt<std::string> clusterPath(
    "cluster",
    cl::desc("Cluster spec (YAML): balance the annotated layout for it, or "
             "search for one when there is no --annotate"),
    cl::value_desc("cluster.yaml"), cl::cat(compileCategory));
static cl::opt<bool>
    explain("explain",
            cl::desc("Print the planner's top layouts with their predicted "
                     "time and memory and why the chosen one won (needs "
                     "--cluster)"),
            cl::cat(compileCategory));
static cl::opt<int64_t> shardMultiple(
    "shard-multiple",
    cl::desc("With --cluster: shards by speed are whole multiples of this "
             "many elements of the split dimension, e.g. a head's size (of 1 "
             "where it does not divide it; default 64)"),
    cl::init(64), cl::cat(compileCategory));
static cl::opt<std::string> batchShares(
    "batch-shares",
    cl::desc("With --cluster, data parallelism on devices of different speed: "
             "'blocks' (each replica one block of the batch by its speed, "
             "where one replicated scope allows it) or 'micro-batches' "
             "(micro-batches of one size dealt out by speed); default "
             "blocks, the faster of the two in the planner's prediction"),
    cl::init("blocks"), cl::cat(compileCategory));
static cl::opt<std::string> fuseBeforeAutodiff(
    "fuse-before-autodiff",
    cl::desc("With --train: the chains fused before autodiff, so that their "
             "backward is the fused op's gradient (comma-separated from "
             "gelu-erf, rms-norm, attention; 'none' differentiates every "
             "chain op by op); default gelu-erf,rms-norm,attention"),
    cl::init("gelu-erf,rms-norm,attention"), cl::cat(compileCategory));
static cl::opt<std::string> trainPath(
    "train",
    cl::desc("Training config (YAML: loss, optimizer, frozen weights): "
             "compile a training step instead of a forward pass"),
    cl::value_desc("train.yaml"), cl::cat(compileCategory));
static cl::opt<std::string>
    emitMlir("emit-mlir", cl::desc("Also write the partitioned IR to a file"),
             cl::value_desc("file"), cl::cat(compileCategory));
static cl::opt<bool>
    report("report",
           cl::desc("Print the parallelism report to stdout: per TaskGraph "
                    "its ranks, every collective and why, transfers, "
                    "replicated work (docs/Report.md)"),
           cl::cat(compileCategory));
static cl::opt<std::string>
    reportFile("report-file",
               cl::desc("Write the parallelism report to a file instead"),
               cl::value_desc("file"), cl::cat(compileCategory));
static cl::opt<std::string>
    reportDot("report-dot",
              cl::desc("Write the parallelism report as a Graphviz picture "
                       "(render with dot -Tsvg)"),
              cl::value_desc("file.dot"), cl::cat(compileCategory));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  shoal::hideUnrelatedOptions(&compileCategory);
  mlir::registerPassManagerCLOptions();
  cl::ParseCommandLineOptions(
      argc, argv,
      "shoal-compile: ONNX model + annotations -> executable plan\n");
  auto fail = [](const llvm::Twine &msg) {
    llvm::errs() << "shoal-compile: error: " << msg << "\n";
    return 1;
  };
  if (worldSize < 0)
    return fail("--world-size must be positive");
  if (explain && clusterPath.empty())
    return fail("--explain needs --cluster");
  if (batchShares != "blocks" && batchShares != "micro-batches")
    return fail("--batch-shares must be 'blocks' or 'micro-batches', got '" +
                llvm::Twine(batchShares) + "'");
  std::vector<std::string> earlyChains;
  if (fuseBeforeAutodiff != "none") {
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(fuseBeforeAutodiff).split(parts, ',');
    for (llvm::StringRef c : parts) {
      if (c != "gelu-erf" && c != "rms-norm" && c != "attention")
        return fail("--fuse-before-autodiff: unknown chain '" + c +
                    "' (expected gelu-erf, rms-norm, attention or none)");
      earlyChains.push_back(c.str());
    }
  }
  if (shardMultiple < 1)
    return fail("--shard-multiple must be at least 1, got " +
                llvm::Twine(static_cast<int64_t>(shardMultiple)));
  if (device != "cpu" && device != "cuda")
    return fail("--device must be cpu or cuda, got '" + device + "'");
  if (report && reportFile.empty() && outputPath == "-")
    return fail("--report prints to stdout, where -o - writes the plan; "
                "use --report-file");

  // A report file that cannot be written fails now, not after the compile.
  for (const std::string &path :
       {reportFile.getValue(), reportDot.getValue()}) {
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
  int64_t microBatches =
      specPath.empty() ? 1 : shoal::readSpecMicroBatches(specPath);
  OwningOpRef<ModuleOp> module;
  if (llvm::StringRef(modelPath).ends_with(".mlir")) {
    if (!shapes.empty())
      return fail("--input-shape applies to ONNX models; " + modelPath +
                  " is a .mlir module with static shapes");
    if (std::string err = shoal::checkRegularFile(modelPath); !err.empty())
      return fail(modelPath + ": " + err);
    module = parseSourceFile<ModuleOp>(modelPath, &ctx);
  } else {
    module = shoal::importONNX(modelPath, shapes, &ctx,
                               /*foldFloatInitializers=*/trainPath.empty(),
                               microBatches);
  }
  if (!module)
    return 1;

  (*module)->setAttr(shoal::kDeviceAttr, StringAttr::get(&ctx, device));
  PassManager pm(&ctx);
  if (failed(applyPassManagerCLOptions(pm)))
    return 1;
  shoal::ParallelizeOptions options;
  options.spec = specPath;
  options.worldSize = worldSize;
  options.cluster = clusterPath;
  options.explain = explain;
  options.shardMultiple = shardMultiple;
  options.batchBlocks = batchShares == "blocks";
  options.fuseBeforeAutodiff = earlyChains;
  if (!reportFile.empty())
    options.report = reportFile;
  else if (report)
    options.report = "-";
  options.reportDot = reportDot;
  if (!trainPath.empty()) {
    shoal::TrainConfig config;
    std::string err = shoal::parseTrainConfig(trainPath, config);
    if (!err.empty())
      return fail(err);
    options.train = std::move(config);
  }
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
