//===- ONNX.h - ONNX import -------------------------------------*- C++ -*-===//

#ifndef SHOAL_TARGET_ONNX_H
#define SHOAL_TARGET_ONNX_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"
#include <cstdint>
#include <string>
#include <vector>

namespace shoal {

/// A static shape given on the command line for a graph input
/// (`--input-shape name=d0,d1,...`).
struct InputShape {
  std::string name;
  std::vector<int64_t> dims;
};

/// Parses `name=d0,d1,...`; returns an error message on failure.
std::string parseInputShape(llvm::StringRef text, InputShape &out);

/// Imports an ONNX model (binary `.onnx`, or ONNX's text format when the
/// file ends in `.onnxtext`) into a module holding `func.func @main` in the
/// shoal dialect. Runs ONNX's checker and shape inference first. Weights
/// become `shoal.weight` references; their data is not copied. Errors are
/// emitted on `ctx`'s diagnostic engine (naming the file and node) and a
/// null module is returned. Nodes whose inputs are all small initializers
/// are folded into constants; without `foldFloatInitializers` (training:
/// float initializers are weights to train) only integer ones are.
/// `batchNormGroups` > 1 (the plan's micro-batches) makes a training-mode
/// BatchNormalization compute its statistics per group of N / groups
/// consecutive samples, as a pipeline running those micro-batches one after
/// another does (GPipe, torch.distributed.pipelining).
/// A training import (`foldFloatInitializers` false) given a
/// `restoredModelPath` restores the parameters an eval-mode export merged
/// (docs/Importer.md, "Training imports"): when that changes anything, the
/// restored model is written there and becomes the module's `shoal.source`.
mlir::OwningOpRef<mlir::ModuleOp>
importONNX(llvm::StringRef path, llvm::ArrayRef<InputShape> inputShapes,
           mlir::MLIRContext *ctx, bool foldFloatInitializers = true,
           int64_t batchNormGroups = 1, llvm::StringRef restoredModelPath = "");

/// Like `importONNX`, but reads the model from `bytes` (the contents of
/// `path`) instead of from the file; `path` still decides the format, names
/// the file in errors and is recorded as `shoal.source`.
mlir::OwningOpRef<mlir::ModuleOp>
importONNXBuffer(llvm::StringRef path, llvm::StringRef bytes,
                 llvm::ArrayRef<InputShape> inputShapes, mlir::MLIRContext *ctx,
                 bool foldFloatInitializers = true, int64_t batchNormGroups = 1,
                 llvm::StringRef restoredModelPath = "");

/// One node of an ONNX graph as annotation specs see it.
struct ONNXNodeName {
  /// The name spec patterns match: the node's own, or, for a node of
  /// torch's dynamo exporter (`node_MatMul_3`), the name the TorchScript
  /// exporter would have given it, rebuilt from its module path metadata
  /// (`/h.0/attn/q/MatMul`; docs/Annotations.md).
  std::string name;
  std::string opType;
  /// The node's name in the file ("" if it has none).
  std::string onnxName;
};

/// Every node of the ONNX model at `path`, in graph order, with the name
/// the importer gives it (`shoal-compile MODEL --list-nodes`). Errors name
/// the file; the model is parsed and validated, not imported.
mlir::FailureOr<std::vector<ONNXNodeName>>
listONNXNodeNames(llvm::StringRef path, mlir::MLIRContext *ctx);

} // namespace shoal

#endif // SHOAL_TARGET_ONNX_H
