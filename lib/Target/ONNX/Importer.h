//===- Importer.h - ONNX graph to shoal, internal interface -----*- C++ -*-===//
//
// Shared by the import driver (ImportONNX.cpp) and the per-op converters
// (ImportOps.cpp). Not installed: the public interface is
// include/shoal/Target/ONNX.h.
//
//===----------------------------------------------------------------------===//

#ifndef SHOAL_LIB_TARGET_ONNX_IMPORTER_H
#define SHOAL_LIB_TARGET_ONNX_IMPORTER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include "onnx/onnx_pb.h"

#include <deque>
#include <optional>
#include <string>
#include <vector>

namespace shoal {
namespace onnx_import {

/// Argument and result attribute holding the ONNX name of a graph input or
/// output.
inline constexpr llvm::StringLiteral kNameAttr = "shoal.name";

/// Converts the main graph of one (checked, shape-inferred) ONNX model into
/// the body of `func.func @main`. Op converters use its helpers to read
/// operands, result types and constant operands, and to report errors that
/// name the file and the node being converted.
class Importer {
public:
  /// `path` names the file in errors; `source` (its absolute path) goes into
  /// `shoal.source` and the ops' locations.
  /// Training imports keep float initializers as weights (never folded).
  bool foldFloatInitializers = true;
  /// Training-mode BatchNormalization: statistics per this many groups of
  /// consecutive samples (the plan's micro-batches).
  int64_t batchNormGroups = 1;

  Importer(mlir::MLIRContext *ctx, llvm::StringRef path, llvm::StringRef source,
           const onnx::ModelProto &model);

  /// Builds the module; emits errors and returns null on failure.
  mlir::OwningOpRef<mlir::ModuleOp> run();

  //===--------------------------------------------------------------------===//
  // Helpers for op converters
  //===--------------------------------------------------------------------===//

  mlir::OpBuilder &builder() { return b; }
  mlir::MLIRContext *getContext() { return ctx; }
  /// `NameLoc(node name, path:0:0)` of the node being converted.
  mlir::Location loc() const { return nodeLoc; }
  /// An error prefixed with `<path>: node '<name>': `.
  mlir::InFlightDiagnostic nodeError();
  /// An error prefixed with `<path>: `.
  mlir::InFlightDiagnostic fileError();

  /// Whether input `i` of `node` is present (optional inputs may be absent
  /// or have an empty name).
  static bool hasInput(const onnx::NodeProto &node, int i) {
    return i < node.input_size() && !node.input(i).empty();
  }
  /// The value of input `i`; an initializer becomes a `shoal.weight` here on
  /// its first use.
  mlir::FailureOr<mlir::Value> getInput(const onnx::NodeProto &node, int i);
  /// The static type shape inference gave output `i`.
  mlir::FailureOr<mlir::RankedTensorType>
  getResultType(const onnx::NodeProto &node, int i);
  /// Binds output `i` of `node` to `value`.
  void setResult(const onnx::NodeProto &node, int i, mlir::Value value);
  /// Makes output `i` of `node` another name for its input `j` (Identity).
  void setAlias(const onnx::NodeProto &node, int i, int j);
  /// Whether output `i` of `node` is read by a node or is a graph output.
  bool isOutputUsed(const onnx::NodeProto &node, int i) const;

  /// Reads input `i`, which must be a constant (initializer or Constant
  /// node), as a list of integers (a Reshape shape, ReduceSum axes). `what`
  /// names the operand in errors.
  mlir::FailureOr<llvm::SmallVector<int64_t>>
  getConstantInts(const onnx::NodeProto &node, int i, llvm::StringRef what);

  /// Reads input `i`, which must be a constant (initializer or Constant
  /// node), as its elements; `what` names the operand in errors.
  mlir::FailureOr<mlir::DenseElementsAttr>
  getConstantData(const onnx::NodeProto &node, int i, llvm::StringRef what);

  /// Reads input `i`, which must be a constant of one element (a Pad's
  /// constant_value, OneHot's depth), as a number (bools as 0 and 1).
  mlir::FailureOr<double> getConstantScalar(const onnx::NodeProto &node, int i,
                                            llvm::StringRef what);

  /// The tensor of input `i` when it is a constant (an initializer or a
  /// Constant node); null otherwise.
  const onnx::TensorProto *getConstantTensor(const onnx::NodeProto &node,
                                             int i) const {
    return hasInput(node, i) ? findConstantTensor(node.input(i)) : nullptr;
  }

  /// The tensor of a `Constant` node (its `value`, or one built from
  /// `value_float(s)` / `value_int(s)`); null after an error.
  const onnx::TensorProto *getConstantNodeTensor(const onnx::NodeProto &node);
  /// Records the tensor of Constant `node`, so that later nodes can read it
  /// as a compile-time operand.
  void registerConstant(const onnx::NodeProto &node,
                        const onnx::TensorProto *tensor);
  /// Converts a tensor's data into a dense attribute.
  mlir::FailureOr<mlir::DenseElementsAttr>
  convertTensorData(const onnx::TensorProto &tensor);

private:
  void indexGraph();
  mlir::LogicalResult
  convertGraphInputs(llvm::SmallVectorImpl<mlir::Type> &argTypes,
                     llvm::SmallVectorImpl<llvm::StringRef> &names);
  mlir::LogicalResult convertNode(const onnx::NodeProto &node, int index);
  /// Evaluates a node whose inputs are all small constants; false if it
  /// cannot (the node is then converted as a runtime op).
  /// On failure `why` says why a foldable node with constant inputs was not
  /// folded (empty when its inputs are not constant).
  bool tryFold(const onnx::NodeProto &node, std::string &why);
  /// Shape and Size of a (static) value.
  mlir::LogicalResult foldShape(const onnx::NodeProto &node);
  /// Makes `tensor` the constant value of output `i`.
  mlir::LogicalResult setFolded(const onnx::NodeProto &node, int i,
                                const onnx::TensorProto &tensor);
  llvm::StringRef resolveAlias(llvm::StringRef name) const;
  mlir::FailureOr<mlir::Value> getValue(llvm::StringRef name);
  mlir::RankedTensorType convertType(const onnx::TypeProto &type,
                                     std::string &error, bool &dynamic);
  const onnx::TensorProto *findConstantTensor(llvm::StringRef name) const;

  mlir::MLIRContext *ctx;
  std::string path;
  std::string source;
  const onnx::GraphProto &graph;
  mlir::OpBuilder b;
  mlir::Location fileLoc;
  mlir::Location nodeLoc;
  std::string nodeName;

  /// Values defined so far, by ONNX name.
  llvm::StringMap<mlir::Value> values;
  /// Initializers by name; they become weights on first use.
  llvm::StringMap<const onnx::TensorProto *> initializers;
  /// Tensors of the Constant nodes seen so far, by output name.
  llvm::StringMap<const onnx::TensorProto *> constants;
  /// Tensors built from Constant's value_float(s)/value_int(s).
  std::deque<onnx::TensorProto> ownedTensors;
  /// Identity outputs, mapped to their inputs.
  llvm::StringMap<std::string> aliases;
  /// Types of graph inputs, outputs and inferred values, by name.
  llvm::StringMap<const onnx::TypeProto *> types;
  /// Names read by some node or returned by the graph.
  llvm::StringSet<> used;
  /// The location name of each node (getNodeNames).
  std::vector<std::string> nodeNames;
};

/// The name a node is known by: its ONNX name, or `<OpType>_<index>` for an
/// unnamed node.
inline std::string getNodeName(const onnx::NodeProto &node, int index) {
  if (!node.name().empty())
    return node.name();
  return node.op_type() + "_" + std::to_string(index);
}

/// The name an op converted from node `index` of `graph` is located at:
/// its ONNX name, or, for a node whose name carries no module path (does
/// not start with '/') but whose metadata has PyTorch's module path
/// (`pkg.torch.onnx.name_scopes`, written by `torch.onnx.export(...,
/// dynamo=True)`), `/<module>/<submodule>/<OpType>` as PyTorch's
/// TorchScript exporter names nodes, made unique with `_1`, `_2`, ...;
/// unnamed nodes without metadata are `<OpType>_<index>`.
std::vector<std::string> getNodeNames(const onnx::GraphProto &graph);

/// The value of a node's `metadata_props` entry `key` (IR version 10, a
/// field ONNX 1.12 does not know: it is read from the unknown fields).
std::optional<std::string> getNodeMetadata(const onnx::NodeProto &node,
                                           llvm::StringRef key);

/// Rewrites a model of default-domain opset 18 to 21 into opset 17 (which
/// ONNX 1.12's checker and shape inference know): the ops whose signature
/// changed take their opset-17 form, Gelu and GroupNormalization become
/// opset-17 ops. Returns an error naming the node when an op's use has no
/// opset-17 form.
/// `modelDir` (with its trailing separator, or empty) is where the model's
/// external data lies: small integer initializers stored there (the dynamo
/// exporter writes every initializer out) are read into the model.
std::optional<std::string> downgradeToOpset17(onnx::ModelProto &model,
                                              int64_t opset,
                                              llvm::StringRef modelDir = "");

/// An external data location inside the model's folder: relative, and not
/// climbing out of it through `..` (the runtime refuses the others too,
/// WeightLoader.cpp).
bool isInsideModelFolder(const std::string &location);

/// The `bytes` bytes of initializer `t`, stored as ONNX external data in a
/// regular file next to the model (`modelDir`, with its trailing separator,
/// or empty); nullopt when its location is missing or leaves the model's
/// folder, its offset is negative, its length is given and is not `bytes`,
/// or the file cannot be read.
std::optional<std::string> readExternalData(const onnx::TensorProto &t,
                                            llvm::StringRef modelDir,
                                            int64_t bytes);

/// Formats an ONNX shape as `[N, 128]` (`?` for an unknown dimension).
std::string formatShape(const onnx::TensorShapeProto &shape);

/// Converts one node. The node's domain and op type have been checked with
/// `isSupportedOp`.
using ConvertFn = mlir::LogicalResult (*)(Importer &, const onnx::NodeProto &);

/// The converter for a default-domain op type, or null if unsupported.
ConvertFn lookupConverter(llvm::StringRef opType);

/// Einsum as Transpose, Reshape, MatMul and ReduceSum (ImportEinsum.cpp).
mlir::LogicalResult convertEinsum(Importer &im, const onnx::NodeProto &node);
/// LSTM and GRU unrolled over the sequence (ImportRecurrent.cpp).
mlir::LogicalResult convertLSTM(Importer &im, const onnx::NodeProto &node);
mlir::LogicalResult convertGRU(Importer &im, const onnx::NodeProto &node);
/// Resize (and Upsample, which the version converter turns into Resize)
/// as a shoal.onnx "Resize" with constant scales (ImportResize.cpp).
mlir::LogicalResult convertResize(Importer &im, const onnx::NodeProto &node);

/// The MLIR element type of an ONNX `TensorProto::DataType`, or null.
mlir::Type convertElementType(mlir::MLIRContext *ctx, int32_t dataType);
/// ONNX's name of a `TensorProto::DataType`, for errors.
llvm::StringRef dataTypeName(int32_t dataType);

/// Finds attribute `name` of `node`, or null.
const onnx::AttributeProto *findAttr(const onnx::NodeProto &node,
                                     llvm::StringRef name);
int64_t getIntAttr(const onnx::NodeProto &node, llvm::StringRef name,
                   int64_t dflt);
float getFloatAttr(const onnx::NodeProto &node, llvm::StringRef name,
                   float dflt);
std::optional<llvm::SmallVector<int64_t>>
getIntsAttr(const onnx::NodeProto &node, llvm::StringRef name);

/// True for the op types foldNode can evaluate.
bool isFoldableOp(llvm::StringRef opType);

/// Evaluates `node` on constant `inputs` (null for an absent optional one);
/// the results are named after the node's outputs. Returns nullopt with the
/// reason in `why` when it cannot.
std::optional<std::vector<onnx::TensorProto>>
foldNode(const onnx::NodeProto &node,
         llvm::ArrayRef<const onnx::TensorProto *> inputs, std::string &why);

/// Replaces every node of `graph` that evaluates to a constant (Shape of a
/// statically shaped value, or a foldable op on constants) by Constant
/// nodes; returns how many nodes it folded. Run between rounds of shape
/// inference until nothing changes.
int foldModelConstants(onnx::GraphProto &graph,
                       bool foldFloatInitializers = true);

/// What restoreParameters changed in a model (docs/Importer.md, "Training
/// imports").
struct RestoredParameters {
  /// An Identity output made an initializer of its own: {parameter, the
  /// initializer whose value it copies}.
  std::vector<std::pair<std::string, std::string>> copies;
  /// A folded copy of a tied weight replaced by a read of the weight.
  struct Tie {
    std::string copy, parameter;
    bool transposed = false;
  };
  std::vector<Tie> ties;
  /// Initializers of equal value that may or may not be one parameter.
  std::vector<std::string> warnings;
  bool changed() const { return !copies.empty() || !ties.empty(); }
};

/// Rewrites an exported model into one initializer per parameter of the
/// source model, for training: each `Identity` of an initializer whose
/// output has a parameter's name (not a generated one) becomes an
/// initializer of that name holding a copy of the value; a float
/// initializer with a generated name (`onnx::MatMul_12`) whose value equals
/// exactly one named initializer, or its transpose, bit for bit, and is not
/// one value repeated, is removed and read from that initializer (through a
/// Transpose). Other equal values are reported in `warnings`. `modelDir`
/// (with its trailing separator) is where external data lies.
RestoredParameters restoreParameters(onnx::ModelProto &model,
                                     llvm::StringRef modelDir);

/// A name PyTorch's exporter generates (`onnx::MatMul_12`, `/h.0/Add_1`
/// outputs): not a parameter's.
bool isGeneratedName(llvm::StringRef name);

/// Writes `model` to `path` (its folder created), its external data files
/// (relative to `modelDir`) hard-linked or copied next to it; returns an
/// error message.
std::string writeRestoredModel(const onnx::ModelProto &model,
                               llvm::StringRef modelDir, llvm::StringRef path);

} // namespace onnx_import
} // namespace shoal

#endif // SHOAL_LIB_TARGET_ONNX_IMPORTER_H
