//===- Importer.cpp - ONNX graph to func.func @main -------------*- C++ -*-===//
//
// Walks the main graph in order (ONNX graphs are topologically sorted) and
// hands each node to its converter. Values are kept by ONNX name;
// initializers turn into `shoal.weight` ops only when first read, and their
// data is never looked at.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "shoal/Support/Files.h"

#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::onnx_import;

//===----------------------------------------------------------------------===//
// Types and attributes
//===----------------------------------------------------------------------===//

Type onnx_import::convertElementType(MLIRContext *ctx, int32_t dataType) {
  Builder b(ctx);
  switch (dataType) {
  case onnx::TensorProto::FLOAT:
    return b.getF32Type();
  case onnx::TensorProto::DOUBLE:
    return b.getF64Type();
  case onnx::TensorProto::FLOAT16:
    return b.getF16Type();
  case onnx::TensorProto::BFLOAT16:
    return b.getBF16Type();
  case onnx::TensorProto::INT64:
    return b.getIntegerType(64);
  case onnx::TensorProto::INT32:
    return b.getIntegerType(32);
  case onnx::TensorProto::INT8:
    return b.getIntegerType(8);
  case onnx::TensorProto::UINT8:
    return b.getIntegerType(8, /*isSigned=*/false);
  case onnx::TensorProto::BOOL:
    return b.getI1Type();
  default:
    return {};
  }
}

StringRef onnx_import::dataTypeName(int32_t dataType) {
  if (onnx::TensorProto::DataType_IsValid(dataType))
    return onnx::TensorProto::DataType_Name(
        static_cast<onnx::TensorProto::DataType>(dataType));
  return "<invalid>";
}

std::string onnx_import::formatShape(const onnx::TensorShapeProto &shape) {
  std::string s = "[";
  for (int i = 0; i < shape.dim_size(); ++i) {
    if (i)
      s += ", ";
    const auto &dim = shape.dim(i);
    if (dim.has_dim_value())
      s += std::to_string(dim.dim_value());
    else if (dim.has_dim_param() && !dim.dim_param().empty())
      s += dim.dim_param();
    else
      s += "?";
  }
  return s + "]";
}

const onnx::AttributeProto *onnx_import::findAttr(const onnx::NodeProto &node,
                                                  StringRef name) {
  for (const auto &attr : node.attribute())
    if (attr.name() == name)
      return &attr;
  return nullptr;
}

int64_t onnx_import::getIntAttr(const onnx::NodeProto &node, StringRef name,
                                int64_t dflt) {
  const auto *attr = findAttr(node, name);
  return attr ? attr->i() : dflt;
}

float onnx_import::getFloatAttr(const onnx::NodeProto &node, StringRef name,
                                float dflt) {
  const auto *attr = findAttr(node, name);
  return attr ? attr->f() : dflt;
}

std::optional<SmallVector<int64_t>>
onnx_import::getIntsAttr(const onnx::NodeProto &node, StringRef name) {
  const auto *attr = findAttr(node, name);
  if (!attr)
    return std::nullopt;
  return SmallVector<int64_t>(attr->ints().begin(), attr->ints().end());
}

//===----------------------------------------------------------------------===//
// Importer
//===----------------------------------------------------------------------===//

Importer::Importer(MLIRContext *ctx, StringRef path, StringRef source,
                   const onnx::ModelProto &model)
    : ctx(ctx), path(path.str()), source(source.str()), graph(model.graph()),
      b(ctx), fileLoc(FileLineColLoc::get(ctx, source, 0, 0)),
      nodeLoc(fileLoc) {}

InFlightDiagnostic Importer::fileError() {
  return emitError(UnknownLoc::get(ctx)) << path << ": ";
}

InFlightDiagnostic Importer::nodeError() {
  return fileError() << "node '" << nodeName << "': ";
}

void Importer::indexGraph() {
  nodeNames = getNodeNames(graph);
  for (const auto &init : graph.initializer())
    initializers[init.name()] = &init;
  // Graph inputs and outputs win over value_info entries of the same name.
  for (const auto &vi : graph.value_info())
    types[vi.name()] = &vi.type();
  for (const auto &vi : graph.input())
    types[vi.name()] = &vi.type();
  for (const auto &vi : graph.output())
    types[vi.name()] = &vi.type();
  for (const auto &node : graph.node())
    for (const auto &input : node.input())
      if (!input.empty())
        used.insert(input);
  for (const auto &output : graph.output())
    used.insert(output.name());
}

RankedTensorType Importer::convertType(const onnx::TypeProto &type,
                                       std::string &error, bool &dynamic) {
  dynamic = false;
  if (!type.has_tensor_type()) {
    error = "is not a tensor";
    return {};
  }
  const auto &tt = type.tensor_type();
  Type elementType = convertElementType(ctx, tt.elem_type());
  if (!elementType) {
    error =
        ("has unsupported element type " + dataTypeName(tt.elem_type())).str();
    return {};
  }
  if (!tt.has_shape()) {
    dynamic = true;
    error = "has an unknown rank";
    return {};
  }
  SmallVector<int64_t> dims;
  for (const auto &dim : tt.shape().dim()) {
    if (!dim.has_dim_value() || dim.dim_value() < 0) {
      dynamic = true;
      error = "has dynamic shape " + formatShape(tt.shape());
      return {};
    }
    dims.push_back(dim.dim_value());
  }
  return RankedTensorType::get(dims, elementType);
}

LogicalResult Importer::convertGraphInputs(SmallVectorImpl<Type> &argTypes,
                                           SmallVectorImpl<StringRef> &names) {
  bool ok = true;
  for (const auto &input : graph.input()) {
    // An input that has an initializer is a weight with a default value.
    if (initializers.count(input.name()))
      continue;
    std::string error;
    bool dynamic;
    RankedTensorType type = convertType(input.type(), error, dynamic);
    if (!type) {
      auto diag = fileError()
                  << "graph input '" << input.name() << "' " << error;
      if (dynamic) {
        int rank = input.type().tensor_type().has_shape()
                       ? input.type().tensor_type().shape().dim_size()
                       : -1;
        diag << "; give it a static shape with --input-shape " << input.name()
             << "=";
        if (rank < 0)
          diag << "d0,d1,...";
        for (int i = 0; i < rank; ++i)
          diag << (i ? ",d" : "d") << i;
      }
      ok = false;
      continue;
    }
    argTypes.push_back(type);
    names.push_back(input.name());
  }
  return success(ok);
}

StringRef Importer::resolveAlias(StringRef name) const {
  // Identity chains are short; the checker's SSA rule rules out cycles.
  for (auto it = aliases.find(name); it != aliases.end();
       it = aliases.find(name))
    name = it->second;
  return name;
}

FailureOr<Value> Importer::getValue(StringRef name) {
  name = resolveAlias(name);
  if (auto it = values.find(name); it != values.end())
    return it->second;
  if (const onnx::TensorProto *init = initializers.lookup(name)) {
    Type elementType = convertElementType(ctx, init->data_type());
    if (!elementType)
      return fileError() << "initializer '" << name
                         << "' has unsupported element type "
                         << dataTypeName(init->data_type());
    SmallVector<int64_t> dims(init->dims().begin(), init->dims().end());
    auto type = RankedTensorType::get(dims, elementType);
    // Only the name and type are recorded: the data stays in the model.
    Value weight =
        b.create<WeightOp>(NameLoc::get(b.getStringAttr(name), fileLoc), type,
                           b.getStringAttr(name));
    values[name] = weight;
    return weight;
  }
  return fileError() << "value '" << name << "' is not defined";
}

FailureOr<Value> Importer::getInput(const onnx::NodeProto &node, int i) {
  if (!hasInput(node, i))
    return nodeError() << "missing input " << i;
  return getValue(node.input(i));
}

FailureOr<RankedTensorType> Importer::getResultType(const onnx::NodeProto &node,
                                                    int i) {
  const std::string &name = node.output(i);
  const onnx::TypeProto *proto = types.lookup(name);
  if (!proto)
    return nodeError() << "shape inference gave no type for output '" << name
                       << "'";
  std::string error;
  bool dynamic;
  RankedTensorType type = convertType(*proto, error, dynamic);
  if (!type) {
    auto diag = nodeError() << "output '" << name << "' " << error;
    if (dynamic)
      diag << "; shoal needs static shapes: give the graph inputs static "
              "shapes with --input-shape";
    return diag;
  }
  return type;
}

void Importer::setResult(const onnx::NodeProto &node, int i, Value value) {
  values[node.output(i)] = value;
}

void Importer::setAlias(const onnx::NodeProto &node, int i, int j) {
  aliases[node.output(i)] = node.input(j);
}

bool Importer::isOutputUsed(const onnx::NodeProto &node, int i) const {
  return i < node.output_size() && !node.output(i).empty() &&
         used.contains(node.output(i));
}

const onnx::TensorProto *Importer::findConstantTensor(StringRef name) const {
  name = resolveAlias(name);
  if (const onnx::TensorProto *t = constants.lookup(name))
    return t;
  return initializers.lookup(name);
}

//===----------------------------------------------------------------------===//
// Tensor data
//===----------------------------------------------------------------------===//

namespace {
/// Reads the elements of `tensor` as raw bit patterns of `byteWidth` bytes
/// each (`raw_data` is little-endian), from `raw_data` or the typed field
/// ONNX stores that type in. Fails with a reason.
FailureOr<SmallVector<uint64_t>> readBits(const onnx::TensorProto &tensor,
                                          int64_t numElements,
                                          unsigned byteWidth,
                                          std::string &error) {
  SmallVector<uint64_t> bits;
  if (tensor.has_raw_data()) {
    const std::string &raw = tensor.raw_data();
    if (static_cast<int64_t>(raw.size()) != numElements * byteWidth) {
      error = "has " + std::to_string(raw.size()) +
              " bytes of data, expected " +
              std::to_string(numElements * byteWidth);
      return failure();
    }
    bits.reserve(numElements);
    for (int64_t k = 0; k < numElements; ++k) {
      uint64_t v = 0;
      for (unsigned byte = 0; byte < byteWidth; ++byte)
        v |= uint64_t(static_cast<uint8_t>(raw[k * byteWidth + byte]))
             << (8 * byte);
      bits.push_back(v);
    }
    return bits;
  }
  int64_t count;
  switch (tensor.data_type()) {
  case onnx::TensorProto::FLOAT:
    count = tensor.float_data_size();
    for (float v : tensor.float_data())
      bits.push_back(llvm::bit_cast<uint32_t>(v));
    break;
  case onnx::TensorProto::DOUBLE:
    count = tensor.double_data_size();
    for (double v : tensor.double_data())
      bits.push_back(llvm::bit_cast<uint64_t>(v));
    break;
  case onnx::TensorProto::INT64:
    count = tensor.int64_data_size();
    for (int64_t v : tensor.int64_data())
      bits.push_back(static_cast<uint64_t>(v));
    break;
  default:
    // INT32, INT8, UINT8, BOOL, and FLOAT16/BFLOAT16 as bit patterns.
    count = tensor.int32_data_size();
    for (int32_t v : tensor.int32_data())
      bits.push_back(static_cast<uint64_t>(static_cast<int64_t>(v)));
    break;
  }
  if (count != numElements) {
    error = "has " + std::to_string(count) + " values, expected " +
            std::to_string(numElements);
    return failure();
  }
  return bits;
}

int64_t getNumElements(const onnx::TensorProto &tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.dims())
    n *= d;
  return n;
}

bool isExternal(const onnx::TensorProto &tensor) {
  return tensor.data_location() == onnx::TensorProto::EXTERNAL;
}
} // namespace

FailureOr<DenseElementsAttr>
Importer::convertTensorData(const onnx::TensorProto &tensor) {
  Type elementType = convertElementType(ctx, tensor.data_type());
  if (!elementType)
    return nodeError() << "constant has unsupported element type "
                       << dataTypeName(tensor.data_type());
  if (isExternal(tensor))
    return nodeError() << "constant data stored outside the model is not "
                          "supported";
  for (int64_t d : tensor.dims())
    if (d < 0)
      return nodeError() << "constant has a negative dimension";
  SmallVector<int64_t> dims(tensor.dims().begin(), tensor.dims().end());
  auto type = RankedTensorType::get(dims, elementType);
  unsigned width = elementType.getIntOrFloatBitWidth();
  unsigned byteWidth = std::max(1u, width / 8);

  std::string error;
  auto bits = readBits(tensor, type.getNumElements(), byteWidth, error);
  if (failed(bits)) {
    auto diag = nodeError() << "constant of shape [";
    llvm::interleaveComma(dims, diag);
    return diag << "] " << error;
  }

  if (auto floatType = dyn_cast<FloatType>(elementType)) {
    SmallVector<APFloat> values;
    values.reserve(bits->size());
    for (uint64_t v : *bits)
      values.emplace_back(floatType.getFloatSemantics(), APInt(width, v));
    return DenseElementsAttr::get(type, values);
  }
  SmallVector<APInt> values;
  values.reserve(bits->size());
  for (uint64_t v : *bits)
    values.push_back(width == 1 ? APInt(1, v != 0) : APInt(width, v));
  return DenseElementsAttr::get(type, values);
}

FailureOr<SmallVector<int64_t>>
Importer::getConstantInts(const onnx::NodeProto &node, int i, StringRef what) {
  if (!hasInput(node, i))
    return nodeError() << "missing " << what;
  const std::string &name = node.input(i);
  const onnx::TensorProto *tensor = findConstantTensor(name);
  if (!tensor)
    return nodeError() << what << " '" << name
                       << "' must be a Constant or an initializer: shoal "
                          "needs it at compile time";
  // int32 too: ONNX allows it for CumSum's axis, and exporters write it.
  bool i32 = tensor->data_type() == onnx::TensorProto::INT32;
  if (tensor->data_type() != onnx::TensorProto::INT64 && !i32)
    return nodeError() << what << " '" << name
                       << "' must be int64 or int32, got "
                       << dataTypeName(tensor->data_type());
  if (isExternal(*tensor))
    return nodeError() << what << " '" << name
                       << "' is stored outside the model; store it inline";
  std::string error;
  auto bits = readBits(*tensor, getNumElements(*tensor), i32 ? 4 : 8, error);
  if (failed(bits))
    return nodeError() << what << " '" << name << "' " << error;
  SmallVector<int64_t> ints;
  for (uint64_t v : *bits)
    ints.push_back(i32 ? static_cast<int64_t>(static_cast<int32_t>(v))
                       : static_cast<int64_t>(v));
  return ints;
}

FailureOr<DenseElementsAttr>
Importer::getConstantData(const onnx::NodeProto &node, int i, StringRef what) {
  const onnx::TensorProto *tensor = getConstantTensor(node, i);
  if (!tensor)
    return nodeError() << what << " '"
                       << (hasInput(node, i) ? node.input(i) : "")
                       << "' must be a Constant or an initializer: shoal "
                          "needs it at compile time";
  return convertTensorData(*tensor);
}

FailureOr<double> Importer::getConstantScalar(const onnx::NodeProto &node,
                                              int i, StringRef what) {
  auto data = getConstantData(node, i, what);
  if (failed(data))
    return failure();
  if (data->getNumElements() != 1)
    return nodeError() << what << " must have one element, got "
                       << data->getNumElements();
  Type elem = data->getElementType();
  if (isa<FloatType>(elem))
    return (*data->getValues<APFloat>().begin()).convertToDouble();
  if (elem.isInteger(1))
    return *data->getValues<bool>().begin() ? 1.0 : 0.0;
  return static_cast<double>(
      (*data->getValues<APInt>().begin()).getSExtValue());
}

const onnx::TensorProto *
Importer::getConstantNodeTensor(const onnx::NodeProto &node) {
  if (node.attribute_size() != 1) {
    nodeError() << "Constant needs exactly one value attribute";
    return nullptr;
  }
  const onnx::AttributeProto &attr = node.attribute(0);
  StringRef name = attr.name();
  if (name == "value")
    return &attr.t();
  onnx::TensorProto &t = ownedTensors.emplace_back();
  if (name == "value_float") {
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_float_data(attr.f());
  } else if (name == "value_floats") {
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.add_dims(attr.floats_size());
    *t.mutable_float_data() = attr.floats();
  } else if (name == "value_int") {
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_int64_data(attr.i());
  } else if (name == "value_ints") {
    t.set_data_type(onnx::TensorProto::INT64);
    t.add_dims(attr.ints_size());
    *t.mutable_int64_data() = attr.ints();
  } else {
    nodeError() << "Constant with attribute '" << name
                << "' is not supported (use value, value_float(s) or "
                   "value_int(s))";
    return nullptr;
  }
  return &t;
}

void Importer::registerConstant(const onnx::NodeProto &node,
                                const onnx::TensorProto *tensor) {
  constants[node.output(0)] = tensor;
}

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

LogicalResult Importer::foldShape(const onnx::NodeProto &node) {
  // The shape of any value is static here.
  SmallVector<int64_t> dims;
  StringRef name = resolveAlias(node.input(0));
  if (const onnx::TensorProto *init = initializers.lookup(name)) {
    dims.assign(init->dims().begin(), init->dims().end());
  } else {
    auto value = getValue(name);
    if (failed(value))
      return failure();
    auto type = cast<RankedTensorType>(value->getType());
    dims.assign(type.getShape().begin(), type.getShape().end());
  }
  onnx::TensorProto &t = ownedTensors.emplace_back();
  t.set_name(node.output(0));
  t.set_data_type(onnx::TensorProto::INT64);
  if (node.op_type() == "Size") {
    int64_t n = 1;
    for (int64_t d : dims)
      n *= d;
    t.add_int64_data(n);
  } else {
    int64_t rank = dims.size();
    int64_t start = getIntAttr(node, "start", 0),
            end = getIntAttr(node, "end", rank);
    if (start < 0)
      start += rank;
    if (end < 0)
      end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    t.add_dims(end - start);
    for (int64_t i = start; i < end; ++i)
      t.add_int64_data(dims[i]);
  }
  return setFolded(node, 0, t);
}

LogicalResult Importer::setFolded(const onnx::NodeProto &node, int i,
                                  const onnx::TensorProto &tensor) {
  constants[node.output(i)] = &tensor;
  auto value = convertTensorData(tensor);
  if (failed(value))
    return failure();
  setResult(node, i, b.create<ConstantOp>(nodeLoc, value->getType(), *value));
  return success();
}

/// Small initializers (shape constants the exporter stored) may be folded;
/// large ones are weights and are never read.
static constexpr int64_t kMaxFoldedInitializer = 4096;
static constexpr int64_t kMaxFoldedConstant = 1 << 20;

bool Importer::tryFold(const onnx::NodeProto &node, std::string &why) {
  if (!isFoldableOp(node.op_type()) || node.op_type() == "Identity")
    return false;
  SmallVector<const onnx::TensorProto *> inputs;
  bool any = false;
  for (int i = 0; i < node.input_size(); ++i) {
    if (node.input(i).empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    StringRef name = resolveAlias(node.input(i));
    const onnx::TensorProto *t = findConstantTensor(name);
    if (!t || isExternal(*t))
      return false;
    int64_t n = getNumElements(*t);
    bool isInitializer = initializers.lookup(name) == t;
    if (n > kMaxFoldedConstant || (isInitializer && n > kMaxFoldedInitializer))
      return false;
    if (isInitializer && !foldFloatInitializers &&
        (t->data_type() == onnx::TensorProto::FLOAT ||
         t->data_type() == onnx::TensorProto::DOUBLE ||
         t->data_type() == onnx::TensorProto::FLOAT16 ||
         t->data_type() == onnx::TensorProto::BFLOAT16))
      return false;
    inputs.push_back(t);
    any = true;
  }
  if (!any && node.op_type() != "ConstantOfShape")
    return false;
  auto folded = foldNode(node, inputs, why);
  if (!folded)
    return false;
  for (int i = 0; i < node.output_size(); ++i) {
    onnx::TensorProto &t = ownedTensors.emplace_back(std::move((*folded)[i]));
    if (failed(setFolded(node, i, t)))
      return false;
  }
  return true;
}

LogicalResult Importer::convertNode(const onnx::NodeProto &node, int index) {
  nodeName = nodeNames[index];
  nodeLoc = NameLoc::get(b.getStringAttr(nodeName), fileLoc);
  if (node.op_type() == "Shape" || node.op_type() == "Size")
    return foldShape(node);
  std::string why;
  if (tryFold(node, why))
    return success();
  ConvertFn convert = lookupConverter(node.op_type());
  if (!convert) {
    if (isFoldableOp(node.op_type()) && !why.empty())
      return nodeError() << node.op_type()
                         << " is supported only where it folds at compile "
                            "time, and this one does not: "
                         << why;
    if (isFoldableOp(node.op_type()))
      return nodeError() << node.op_type()
                         << " is supported only on constant inputs (shape "
                            "computations that fold at compile time); give "
                            "static input shapes with --input-shape";
    return nodeError() << "unsupported ONNX op '" << node.op_type() << "'";
  }
  return convert(*this, node);
}

OwningOpRef<ModuleOp> Importer::run() {
  indexGraph();
  if (graph.sparse_initializer_size() > 0) {
    fileError() << "sparse initializers are not supported";
    return {};
  }
  SmallVector<Type> argTypes;
  SmallVector<StringRef> argNames;
  if (failed(convertGraphInputs(argTypes, argNames)))
    return {};

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  (*module)->setAttr(ShoalDialect::kSourceAttr, b.getStringAttr(source));
  b.setInsertionPointToEnd(module->getBody());
  auto func =
      b.create<func::FuncOp>(fileLoc, "main", b.getFunctionType(argTypes, {}));
  Block *entry = new Block();
  func.getBody().push_back(entry);
  for (auto [type, name] : llvm::zip(argTypes, argNames)) {
    values[name] =
        entry->addArgument(type, NameLoc::get(b.getStringAttr(name), fileLoc));
  }
  for (auto [i, name] : llvm::enumerate(argNames))
    func.setArgAttr(i, kNameAttr, b.getStringAttr(name));

  b.setInsertionPointToEnd(entry);
  for (int i = 0; i < graph.node_size(); ++i)
    if (failed(convertNode(graph.node(i), i)))
      return {};

  nodeName.clear();
  SmallVector<Value> results;
  for (const auto &output : graph.output()) {
    auto value = getValue(output.name());
    if (failed(value))
      return {};
    results.push_back(*value);
  }
  b.create<func::ReturnOp>(fileLoc, results);
  func.setFunctionType(
      b.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (auto [i, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, kNameAttr, b.getStringAttr(output.name()));

  // Constants read only as compile-time operands (a Reshape's shape) are
  // dead once folded into types and attributes, as is a reshape an import
  // rewrite left unread (the flattened rows of x[arange(B), idx]); last
  // first, so that what a dead reshape read dies too.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*entry)))
    if (isa<ConstantOp, ReshapeOp>(op) && op.use_empty())
      op.erase();

  // The nodes that left no op, by name: an annotation pattern may name
  // them (a spec written from the ONNX graph) without being a typo.
  llvm::StringSet<> placed;
  func.walk([&](Operation *op) {
    if (auto name = dyn_cast<NameLoc>(op->getLoc()))
      placed.insert(name.getName().getValue());
  });
  SmallVector<Attribute> folded;
  for (const std::string &name : nodeNames)
    if (!name.empty() && !placed.contains(name))
      folded.push_back(b.getStringAttr(name));
  if (!folded.empty())
    (*module)->setAttr(ShoalDialect::kFoldedNodesAttr, b.getArrayAttr(folded));

  if (failed(verify(*module))) {
    fileError() << "the imported module does not verify (see above)";
    return {};
  }
  return module;
}

bool shoal::onnx_import::isInsideModelFolder(const std::string &location) {
  if (location.empty() || llvm::sys::path::is_absolute(location))
    return false;
  int depth = 0;
  for (llvm::StringRef part : llvm::make_range(
           llvm::sys::path::begin(location), llvm::sys::path::end(location))) {
    if (part == "..")
      --depth;
    else if (part != ".")
      ++depth;
    if (depth < 0)
      return false;
  }
  return true;
}

std::optional<std::string>
shoal::onnx_import::readExternalData(const onnx::TensorProto &t,
                                     llvm::StringRef modelDir, int64_t bytes) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto &e : t.external_data()) {
    if (e.key() == "location")
      location = e.value();
    else if (e.key() == "offset")
      offset = std::strtoll(e.value().c_str(), nullptr, 10);
    else if (e.key() == "length")
      length = std::strtoll(e.value().c_str(), nullptr, 10);
  }
  std::string path = (modelDir + location).str();
  if (!isInsideModelFolder(location) || offset < 0 || bytes < 0 ||
      (length >= 0 && length != bytes) ||
      !shoal::checkRegularFile(path).empty())
    return std::nullopt;
  auto file = llvm::MemoryBuffer::getFileSlice(path, bytes, offset,
                                               /*IsVolatile=*/false);
  if (!file || static_cast<int64_t>((*file)->getBufferSize()) != bytes)
    return std::nullopt;
  return (*file)->getBuffer().str();
}
