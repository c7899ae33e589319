//===- ImportOps.cpp - ONNX node converters ---------------------*- C++ -*-===//
//
// One converter per ONNX op family. Result types always come from ONNX's
// shape inference; the shoal ops' verifiers check them against the operands.
//
//===----------------------------------------------------------------------===//

#include "Importer.h"

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "llvm/ADT/StringSwitch.h"

#include <climits>
#include <cmath>
#include <numeric>

using namespace mlir;
using namespace shoal;
using namespace shoal::onnx_import;

namespace {

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <typename OpTy>
LogicalResult convertBinary(Importer &im, const onnx::NodeProto &node) {
  auto lhs = im.getInput(node, 0);
  auto rhs = im.getInput(node, 1);
  auto type = im.getResultType(node, 0);
  if (failed(lhs) || failed(rhs) || failed(type))
    return failure();
  im.setResult(node, 0, im.builder().create<OpTy>(im.loc(), *type, *lhs, *rhs));
  return success();
}

template <typename OpTy>
LogicalResult convertUnary(Importer &im, const onnx::NodeProto &node) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  im.setResult(node, 0, im.builder().create<OpTy>(im.loc(), *type, *input));
  return success();
}

/// Cast; to the input's own type it is the input (PyTorch exports
/// `x.to(torch.float32)` of a float32 model as such a Cast: Hugging Face's
/// RMSNorm), so that no op copies it.
LogicalResult convertCast(Importer &im, const onnx::NodeProto &node) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  if (input->getType() == *type) {
    im.setAlias(node, 0, 0);
    return success();
  }
  im.setResult(node, 0, im.builder().create<CastOp>(im.loc(), *type, *input));
  return success();
}

/// IsNaN(x) as Not(Equal(x, x)): NaN is the one value unequal to itself.
/// (PyTorch 2.x's exporters write it after the Softmax of
/// scaled_dot_product_attention, to zero fully masked rows.)
LogicalResult convertIsNaN(Importer &im, const onnx::NodeProto &node) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  OpBuilder &b = im.builder();
  Value equal = b.create<EqualOp>(im.loc(), *type, *input, *input);
  im.setResult(node, 0, b.create<NotOp>(im.loc(), *type, equal));
  return success();
}

//===----------------------------------------------------------------------===//
// MatMul, Gemm
//===----------------------------------------------------------------------===//

LogicalResult convertMatMul(Importer &im, const onnx::NodeProto &node) {
  return convertBinary<MatMulOp>(im, node);
}

LogicalResult convertGemm(Importer &im, const onnx::NodeProto &node) {
  auto a = im.getInput(node, 0);
  auto bv = im.getInput(node, 1);
  auto type = im.getResultType(node, 0);
  if (failed(a) || failed(bv) || failed(type))
    return failure();
  Value c;
  if (Importer::hasInput(node, 2)) {
    auto cv = im.getInput(node, 2);
    if (failed(cv))
      return failure();
    c = *cv;
  }
  OpBuilder &b = im.builder();
  auto op =
      b.create<GemmOp>(im.loc(), *type, *a, *bv, c,
                       b.getF32FloatAttr(getFloatAttr(node, "alpha", 1.0f)),
                       b.getF32FloatAttr(getFloatAttr(node, "beta", 1.0f)),
                       b.getBoolAttr(getIntAttr(node, "transA", 0) != 0),
                       b.getBoolAttr(getIntAttr(node, "transB", 0) != 0));
  im.setResult(node, 0, op);
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax, LayerNormalization
//===----------------------------------------------------------------------===//

LogicalResult convertSoftmax(Importer &im, const onnx::NodeProto &node) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  OpBuilder &b = im.builder();
  im.setResult(
      node, 0,
      b.create<SoftmaxOp>(im.loc(), *type, *input,
                          b.getI64IntegerAttr(getIntAttr(node, "axis", -1))));
  return success();
}

LogicalResult convertGeneric(Importer &im, const onnx::NodeProto &node);

LogicalResult convertLayerNorm(Importer &im, const onnx::NodeProto &node) {
  // shoal.layer_norm has one result; when ONNX's optional Mean and
  // InvStdDev outputs are read, the node stays a shoal.onnx (computed whole
  // on every rank).
  for (int i = 1; i < node.output_size(); ++i)
    if (im.isOutputUsed(node, i))
      return convertGeneric(im, node);
  auto input = im.getInput(node, 0);
  auto scale = im.getInput(node, 1);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(scale) || failed(type))
    return failure();
  Value bias;
  if (Importer::hasInput(node, 2)) {
    auto bv = im.getInput(node, 2);
    if (failed(bv))
      return failure();
    bias = *bv;
  }
  OpBuilder &b = im.builder();
  auto op = b.create<LayerNormOp>(
      im.loc(), *type, *input, *scale, bias,
      b.getI64IntegerAttr(getIntAttr(node, "axis", -1)),
      b.getF32FloatAttr(getFloatAttr(node, "epsilon", 1e-5f)),
      /*rms=*/b.getBoolAttr(false));
  im.setResult(node, 0, op);
  return success();
}

//===----------------------------------------------------------------------===//
// Gather
//===----------------------------------------------------------------------===//

/// PyTorch's `x[torch.arange(B), idx]` (CLIP's pooler, a classifier
/// reading each sequence's last token): the exporter flattens x [B, T, ...]
/// to [B * T, ...] and gathers the rows idx + arange(B) * T, a gather that
/// mixes the batch. Returns (x, idx) when `data` and `indices` are that, or
/// nulls. The rewrite assumes each idx is a row of its own sample, in
/// [0, T) (an argmax, a length - 1), as the idiom means: an index outside
/// gives a zero row where the Gather would read a neighbour's.
std::pair<Value, Value> matchBatchRowGather(Value data, Value indices,
                                            int64_t axis) {
  auto reshape = data.getDefiningOp<ReshapeOp>();
  auto add = indices.getDefiningOp<AddOp>();
  if (axis != 0 || !reshape || !add)
    return {};
  Value x = reshape.getInput();
  auto xt = cast<RankedTensorType>(x.getType());
  auto dt = cast<RankedTensorType>(data.getType());
  auto it = cast<RankedTensorType>(indices.getType());
  if (xt.getRank() < 2 || dt.getRank() < 1 || it.getRank() != 1 ||
      !xt.hasStaticShape() || !isa<FloatType>(xt.getElementType()))
    return {};
  int64_t batch = xt.getDimSize(0), rows = xt.getDimSize(1);
  if (batch * rows == 0 || dt.getDimSize(0) != batch * rows ||
      it.getDimSize(0) != batch)
    return {};
  for (int k = 0; k < 2; ++k) {
    Value idx = add->getOperand(k);
    auto c = add->getOperand(1 - k).getDefiningOp<ConstantOp>();
    auto values = c ? dyn_cast<DenseIntElementsAttr>(c.getValue()) : nullptr;
    if (!values || values.getNumElements() != batch ||
        cast<RankedTensorType>(idx.getType()) != it)
      continue;
    int64_t b = 0;
    bool offsets = true;
    for (const APInt &v : values.getValues<APInt>())
      offsets &= v.getSExtValue() == rows * b++;
    if (offsets)
      return {x, idx};
  }
  return {};
}

/// A gather of the same positions from every sample through the flattened
/// batch: `x.flatten()[arange(B)[:, None] * R + j]` with constant indices
/// (PyTorch 2's TorchScript exporter writes transformers 5's padding mask,
/// `mask[arange(B)[:, None], kv_idx]`, so). Returns x viewed as [B, R, rest]
/// and the positions j of one sample, a constant of the indices' shape
/// without their first dimension, when `data` and `indices` are that; else
/// nulls. A Gather along dimension 1 of that view keeps the samples apart,
/// so that data parallelism and micro-batches split it like any other.
std::pair<Value, Value> matchPerSampleGather(OpBuilder &b, Location loc,
                                             Value data, Value indices,
                                             int64_t axis) {
  auto reshape = data.getDefiningOp<ReshapeOp>();
  auto c = indices.getDefiningOp<ConstantOp>();
  auto values = c ? dyn_cast<DenseIntElementsAttr>(c.getValue()) : nullptr;
  if (axis != 0 || !reshape || !values)
    return {};
  Value x = reshape.getInput();
  auto xt = cast<RankedTensorType>(x.getType());
  auto dt = cast<RankedTensorType>(data.getType());
  auto it = cast<RankedTensorType>(indices.getType());
  if (xt.getRank() < 2 || dt.getRank() < 1 || it.getRank() < 2 ||
      !xt.hasStaticShape() || !dt.hasStaticShape() || !it.hasStaticShape())
    return {};
  int64_t batch = xt.getDimSize(0);
  if (batch < 2 || it.getDimSize(0) != batch || dt.getDimSize(0) % batch != 0)
    return {};
  // The flatten merges x's leading dimensions into the gathered one.
  int64_t rows = dt.getDimSize(0) / batch, merged = 1;
  for (int64_t d = 1; d < xt.getRank() && merged < rows; ++d)
    merged *= xt.getDimSize(d);
  if (merged != rows)
    return {};
  int64_t per = it.getNumElements() / batch;
  std::vector<int64_t> flat;
  flat.reserve(values.getNumElements());
  for (const APInt &v : values.getValues<APInt>())
    flat.push_back(v.getSExtValue());
  for (int64_t i = 0; i < per; ++i) {
    if (flat[i] < 0 || flat[i] >= rows)
      return {};
    for (int64_t s = 1; s < batch; ++s)
      if (flat[s * per + i] != flat[i] + s * rows)
        return {};
  }
  SmallVector<int64_t> viewShape = {batch, rows};
  llvm::append_range(viewShape, dt.getShape().drop_front());
  Value view = b.create<ReshapeOp>(
      loc, RankedTensorType::get(viewShape, xt.getElementType()), x);
  auto posType =
      RankedTensorType::get(it.getShape().drop_front(), it.getElementType());
  SmallVector<APInt> pos;
  for (int64_t i = 0; i < per; ++i)
    pos.push_back(APInt(it.getElementType().getIntOrFloatBitWidth(), flat[i],
                        /*isSigned=*/true));
  Value positions = b.create<ConstantOp>(
      loc, posType, DenseIntElementsAttr::get(posType, pos));
  return {view, positions};
}

LogicalResult convertGather(Importer &im, const onnx::NodeProto &node) {
  auto data = im.getInput(node, 0);
  auto indices = im.getInput(node, 1);
  auto type = im.getResultType(node, 0);
  if (failed(data) || failed(indices) || failed(type))
    return failure();
  OpBuilder &b = im.builder();
  if (auto [x, idx] =
          matchBatchRowGather(*data, *indices, getIntAttr(node, "axis", 0));
      x) {
    // Each sample's row as a product with its one-hot row selector,
    // [B, 1, T] x [B, T, R]: the batch is a dimension of its own again, so
    // data parallelism and micro-batches split it like any other, and the
    // gradient is the product's.
    auto xt = cast<RankedTensorType>(x.getType());
    Type elem = xt.getElementType();
    int64_t batch = xt.getDimSize(0), rows = xt.getDimSize(1);
    int64_t rest = xt.getNumElements() / (batch * rows);
    Location loc = im.loc();
    auto valuesType = RankedTensorType::get({2}, elem);
    Value values = b.create<ConstantOp>(
        loc, valuesType,
        DenseElementsAttr::get(valuesType,
                               ArrayRef<Attribute>{b.getFloatAttr(elem, 0.0),
                                                   b.getFloatAttr(elem, 1.0)}));
    Value oneHot =
        b.create<OnnxOp>(
             loc, TypeRange{RankedTensorType::get({batch, rows}, elem)},
             b.getStringAttr("OneHot"),
             b.getDictionaryAttr(
                 {b.getNamedAttr("depth", b.getI64IntegerAttr(rows)),
                  b.getNamedAttr("axis", b.getI64IntegerAttr(-1))}),
             ValueRange{idx, values})
            ->getResult(0);
    Value selector = b.create<ReshapeOp>(
        loc, RankedTensorType::get({batch, 1, rows}, elem), oneHot);
    Value x3 =
        xt.getRank() == 3
            ? x
            : b.create<ReshapeOp>(
                  loc, RankedTensorType::get({batch, rows, rest}, elem), x);
    Value picked = b.create<MatMulOp>(
        loc, RankedTensorType::get({batch, 1, rest}, elem), selector, x3);
    im.setResult(node, 0, b.create<ReshapeOp>(loc, *type, picked));
    return success();
  }
  if (auto [view, positions] = matchPerSampleGather(
          b, im.loc(), *data, *indices, getIntAttr(node, "axis", 0));
      view) {
    im.setResult(node, 0,
                 b.create<GatherOp>(im.loc(), *type, view, positions,
                                    b.getI64IntegerAttr(1), ArrayAttr(),
                                    IntegerAttr()));
    return success();
  }
  im.setResult(
      node, 0,
      b.create<GatherOp>(im.loc(), *type, *data, *indices,
                         b.getI64IntegerAttr(getIntAttr(node, "axis", 0)),
                         ArrayAttr(), IntegerAttr()));
  return success();
}

//===----------------------------------------------------------------------===//
// Reshape, Transpose
//===----------------------------------------------------------------------===//

LogicalResult convertReshape(Importer &im, const onnx::NodeProto &node) {
  // The shape operand is folded into the result type; it must be known at
  // compile time even though shape inference already used it.
  auto shape = im.getConstantInts(node, 1, "shape");
  if (failed(shape))
    return failure();
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  if (static_cast<int64_t>(shape->size()) != type->getRank())
    return im.nodeError() << "shape has " << shape->size()
                          << " entries but the inferred result has rank "
                          << type->getRank();
  im.setResult(node, 0,
               im.builder().create<ReshapeOp>(im.loc(), *type, *input));
  return success();
}

LogicalResult convertTranspose(Importer &im, const onnx::NodeProto &node) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  SmallVector<int64_t> perm;
  if (auto attr = getIntsAttr(node, "perm")) {
    perm = *attr;
  } else {
    // ONNX's default reverses the dimensions.
    perm.resize(cast<RankedTensorType>(input->getType()).getRank());
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  OpBuilder &b = im.builder();
  im.setResult(node, 0,
               b.create<TransposeOp>(im.loc(), *type, *input,
                                     b.getDenseI64ArrayAttr(perm)));
  return success();
}

//===----------------------------------------------------------------------===//
// ReduceMean, ReduceSum
//===----------------------------------------------------------------------===//

template <typename OpTy>
LogicalResult buildReduce(Importer &im, const onnx::NodeProto &node,
                          std::optional<SmallVector<int64_t>> axes) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  if (!axes || axes->empty()) {
    // No axes: reduce over every dimension.
    axes.emplace(cast<RankedTensorType>(input->getType()).getRank());
    std::iota(axes->begin(), axes->end(), 0);
  }
  OpBuilder &b = im.builder();
  im.setResult(
      node, 0,
      b.create<OpTy>(im.loc(), *type, *input, b.getDenseI64ArrayAttr(*axes),
                     b.getBoolAttr(getIntAttr(node, "keepdims", 1) != 0)));
  return success();
}

LogicalResult convertReduceMean(Importer &im, const onnx::NodeProto &node) {
  // Opsets 13-17 give ReduceMean's axes as an attribute.
  return buildReduce<ReduceMeanOp>(im, node, getIntsAttr(node, "axes"));
}

LogicalResult convertReduceSum(Importer &im, const onnx::NodeProto &node) {
  // Since opset 13 ReduceSum's axes are an optional input.
  std::optional<SmallVector<int64_t>> axes;
  if (Importer::hasInput(node, 1)) {
    auto ints = im.getConstantInts(node, 1, "axes");
    if (failed(ints))
      return failure();
    axes = std::move(*ints);
  }
  if ((!axes || axes->empty()) &&
      getIntAttr(node, "noop_with_empty_axes", 0) != 0) {
    im.setAlias(node, 0, 0);
    return success();
  }
  return buildReduce<ReduceSumOp>(im, node, std::move(axes));
}

//===----------------------------------------------------------------------===//
// Constant, Identity
//===----------------------------------------------------------------------===//

LogicalResult convertConstant(Importer &im, const onnx::NodeProto &node) {
  const onnx::TensorProto *tensor = im.getConstantNodeTensor(node);
  if (!tensor)
    return failure();
  auto value = im.convertTensorData(*tensor);
  if (failed(value))
    return failure();
  im.registerConstant(node, tensor);
  im.setResult(
      node, 0,
      im.builder().create<ConstantOp>(im.loc(), value->getType(), *value));
  return success();
}

LogicalResult convertIdentity(Importer &im, const onnx::NodeProto &node) {
  im.setAlias(node, 0, 0);
  return success();
}

//===----------------------------------------------------------------------===//
// More elementwise, Cast, reshapes
//===----------------------------------------------------------------------===//

/// Max/Min are variadic in ONNX; one or two inputs map to shoal ops.
LogicalResult convertGeneric(Importer &im, const onnx::NodeProto &node);

template <typename OpTy>
LogicalResult convertVariadic(Importer &im, const onnx::NodeProto &node) {
  if (node.input_size() == 1) {
    im.setAlias(node, 0, 0);
    return success();
  }
  if (node.input_size() != 2)
    return convertGeneric(im, node); // the runtime takes any number
  return convertBinary<OpTy>(im, node);
}

LogicalResult convertWhere(Importer &im, const onnx::NodeProto &node) {
  auto c = im.getInput(node, 0);
  auto x = im.getInput(node, 1);
  auto y = im.getInput(node, 2);
  auto type = im.getResultType(node, 0);
  if (failed(c) || failed(x) || failed(y) || failed(type))
    return failure();
  im.setResult(node, 0,
               im.builder().create<WhereOp>(im.loc(), *type, *c, *x, *y));
  return success();
}

/// Clip(x, min?, max?) = Min(Max(x, min), max), NaN kept as Max/Min keep
/// it; an absent bound is left out (none: the identity). The bounds may be
/// constants or values. Opset 6's min/max attributes reach here as inputs
/// (the version converter turns them into Constants).
LogicalResult convertClip(Importer &im, const onnx::NodeProto &node) {
  auto x = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(x) || failed(type))
    return failure();
  Value result = *x;
  for (int i : {1, 2}) {
    if (!Importer::hasInput(node, i))
      continue;
    auto bound = im.getInput(node, i);
    if (failed(bound))
      return failure();
    if (cast<RankedTensorType>(bound->getType()).getNumElements() != 1)
      return im.nodeError() << (i == 1 ? "min" : "max") << " '" << node.input(i)
                            << "' must be a scalar";
    if (i == 1)
      result = im.builder().create<MaxOp>(im.loc(), *type, result, *bound);
    else
      result = im.builder().create<MinOp>(im.loc(), *type, result, *bound);
  }
  if (result == *x) {
    im.setAlias(node, 0, 0);
    return success();
  }
  im.setResult(node, 0, result);
  return success();
}

/// Pad(data, pads, constant_value?, axes?) {mode}: pads, constant_value and
/// axes must be constants (an exporter with static shapes writes them so);
/// they become the attributes of a shoal.onnx "Pad".
LogicalResult convertPad(Importer &im, const onnx::NodeProto &node) {
  OpBuilder &b = im.builder();
  auto x = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(x) || failed(type))
    return failure();
  SmallVector<NamedAttribute> attrs;
  auto pads = im.getConstantInts(node, 1, "pads");
  if (failed(pads))
    return failure();
  attrs.push_back(b.getNamedAttr("pads", b.getDenseI64ArrayAttr(*pads)));
  std::string mode = "constant";
  if (const onnx::AttributeProto *m = findAttr(node, "mode"))
    mode = m->s();
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return im.nodeError() << "mode '" << mode
                          << "' is not supported (constant, reflect or edge)";
  attrs.push_back(b.getNamedAttr("mode", b.getStringAttr(mode)));
  if (Importer::hasInput(node, 2)) {
    auto v = im.getConstantScalar(node, 2, "constant_value");
    if (failed(v))
      return failure();
    attrs.push_back(b.getNamedAttr("constant_value", b.getF32FloatAttr(*v)));
  }
  if (Importer::hasInput(node, 3)) {
    auto axes = im.getConstantInts(node, 3, "axes");
    if (failed(axes))
      return failure();
    attrs.push_back(b.getNamedAttr("axes", b.getDenseI64ArrayAttr(*axes)));
  }
  auto op = b.create<OnnxOp>(im.loc(), TypeRange{*type}, b.getStringAttr("Pad"),
                             b.getDictionaryAttr(attrs), ValueRange{*x});
  im.setResult(node, 0, op->getResult(0));
  return success();
}

/// Dropout in inference: the identity; a used mask output is all true.
/// training_mode must be a constant false (or absent), or true with a
/// constant ratio of 0; otherwise the ratio is not read.
LogicalResult convertDropout(Importer &im, const onnx::NodeProto &node) {
  if (Importer::hasInput(node, 2)) {
    auto value = im.getConstantData(node, 2, "training_mode");
    if (failed(value))
      return failure();
    if (!value->getElementType().isInteger(1))
      return im.nodeError() << "training_mode must be a bool";
    bool training =
        llvm::any_of(value->getValues<bool>(), [](bool b) { return b; });
    // Training with a constant ratio of 0 drops nothing: the identity too.
    bool zeroRatio = false;
    if (const onnx::TensorProto *ratio = im.getConstantTensor(node, 1)) {
      auto r = im.convertTensorData(*ratio);
      if (failed(r))
        return failure();
      zeroRatio = isa<FloatType>(r->getElementType()) &&
                  llvm::all_of(r->getValues<APFloat>(),
                               [](const APFloat &f) { return f.isZero(); });
    }
    if (training && !zeroRatio)
      return im.nodeError() << "Dropout in training mode (training_mode = "
                               "true) is not supported yet; export the model "
                               "in eval mode";
  }
  im.setAlias(node, 0, 0);
  if (node.output_size() > 1 && !node.output(1).empty() &&
      im.isOutputUsed(node, 1)) {
    auto type = im.getResultType(node, 1);
    if (failed(type))
      return failure();
    OpBuilder &b = im.builder();
    auto scalar = RankedTensorType::get({}, b.getI1Type());
    bool t = true;
    Value yes = b.create<ConstantOp>(
        im.loc(), scalar, DenseElementsAttr::get(scalar, llvm::ArrayRef(t)));
    auto mask =
        b.create<OnnxOp>(im.loc(), TypeRange{*type}, b.getStringAttr("Expand"),
                         b.getDictionaryAttr({}), ValueRange{yes});
    im.setResult(node, 1, mask->getResult(0));
  }
  return success();
}

/// OneHot: `depth` (a one-element constant of any numeric type) becomes an
/// attribute; `indices` and `values` stay operands.
LogicalResult convertOneHot(Importer &im, const onnx::NodeProto &node) {
  OpBuilder &b = im.builder();
  auto indices = im.getInput(node, 0);
  auto values = im.getInput(node, 2);
  if (failed(indices) || failed(values))
    return failure();
  auto depth = im.getConstantScalar(node, 1, "depth");
  if (failed(depth))
    return failure();
  // (Checked as a double: a NaN or huge depth must not reach the cast.)
  if (!(*depth > -9.0e15 && *depth < 9.0e15))
    return im.nodeError() << "depth must be a number of classes, got "
                          << *depth;
  auto d = static_cast<int64_t>(*depth);
  if (d < 1)
    return im.nodeError() << "depth must be at least 1, got " << d;
  // The result type from depth (ONNX's shape inference leaves that
  // dimension unknown).
  SmallVector<int64_t> shape(
      cast<RankedTensorType>(indices->getType()).getShape());
  int64_t rank = static_cast<int64_t>(shape.size()) + 1;
  int64_t axis = getIntAttr(node, "axis", -1);
  if (axis < -rank || axis >= rank)
    return im.nodeError() << "axis " << axis << " is out of range for a "
                          << "result of rank " << rank;
  if (axis < 0)
    axis += rank;
  shape.insert(shape.begin() + axis, d);
  auto type = RankedTensorType::get(
      shape, cast<RankedTensorType>(values->getType()).getElementType());
  SmallVector<NamedAttribute> attrs{
      b.getNamedAttr("depth", b.getI64IntegerAttr(d)),
      b.getNamedAttr("axis", b.getI64IntegerAttr(axis))};
  auto op = b.create<OnnxOp>(
      im.loc(), TypeRange{type}, b.getStringAttr("OneHot"),
      b.getDictionaryAttr(attrs), ValueRange{*indices, *values});
  im.setResult(node, 0, op->getResult(0));
  return success();
}

/// Squeeze, Unsqueeze and Flatten only change the shape.
LogicalResult convertReshapeLike(Importer &im, const onnx::NodeProto &node) {
  auto input = im.getInput(node, 0);
  auto type = im.getResultType(node, 0);
  if (failed(input) || failed(type))
    return failure();
  im.setResult(node, 0,
               im.builder().create<ReshapeOp>(im.loc(), *type, *input));
  return success();
}

//===----------------------------------------------------------------------===//
// Other ops: shoal.onnx with the node's attributes
//===----------------------------------------------------------------------===//

/// Compile-time inputs folded into attributes: (input index, attribute).
SmallVector<std::pair<int, StringRef>> foldedInputs(StringRef opType) {
  if (opType == "Slice")
    return {{1, "starts"}, {2, "ends"}, {3, "axes"}, {4, "steps"}};
  if (opType == "Split")
    return {{1, "split"}};
  if (opType == "TopK" || opType == "Trilu")
    return {{1, "k"}};
  if (opType == "Expand")
    return {{1, ""}}; // the result type holds the shape
  if (opType == "Tile")
    return {{1, "repeats"}};
  if (opType == "CumSum")
    return {{1, "axis"}}; // a scalar
  return {};
}

/// Outputs shoal can compute (training outputs and pool indices are not).
int maxOutputs(StringRef opType) {
  if (opType == "MaxPool" || opType == "BatchNormalization")
    return 1;
  return INT_MAX;
}

LogicalResult convertGeneric(Importer &im, const onnx::NodeProto &node) {
  OpBuilder &b = im.builder();
  StringRef type = node.op_type();
  SmallVector<NamedAttribute> attrs;
  for (const onnx::AttributeProto &a : node.attribute()) {
    Attribute value;
    switch (a.type()) {
    case onnx::AttributeProto::INT:
      value = b.getI64IntegerAttr(a.i());
      break;
    case onnx::AttributeProto::FLOAT:
      value = b.getF32FloatAttr(a.f());
      break;
    case onnx::AttributeProto::STRING:
      value = b.getStringAttr(a.s());
      break;
    case onnx::AttributeProto::INTS:
      value = b.getDenseI64ArrayAttr(
          SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
      break;
    case onnx::AttributeProto::FLOATS:
      value = b.getDenseF32ArrayAttr(
          SmallVector<float>(a.floats().begin(), a.floats().end()));
      break;
    default:
      return im.nodeError() << "attribute '" << a.name()
                            << "' has a type shoal does not support";
    }
    attrs.push_back(b.getNamedAttr(a.name(), value));
  }
  if (auto pad = findAttr(node, "auto_pad"); pad && pad->s() != "NOTSET") {
    // Resolve SAME_UPPER / SAME_LOWER / VALID into explicit pads, as the
    // runtime takes them.
    auto x = im.getInput(node, 0);
    if (failed(x))
      return failure();
    ArrayRef<int64_t> in = cast<RankedTensorType>(x->getType()).getShape();
    size_t spatial = in.size() >= 2 ? in.size() - 2 : 0;
    SmallVector<int64_t> kernel;
    if (auto k = getIntsAttr(node, "kernel_shape"))
      kernel.assign(k->begin(), k->end());
    else if (type == "Conv") {
      auto w = im.getInput(node, 1);
      if (failed(w))
        return failure();
      ArrayRef<int64_t> ws = cast<RankedTensorType>(w->getType()).getShape();
      kernel.assign(ws.begin() + 2, ws.end());
    }
    auto ints = [&](StringRef name) {
      SmallVector<int64_t> v(spatial, 1);
      if (auto a = getIntsAttr(node, name))
        v.assign(a->begin(), a->end());
      return v;
    };
    SmallVector<int64_t> strides = ints("strides"), dil = ints("dilations");
    if (kernel.size() != spatial || strides.size() != spatial ||
        dil.size() != spatial)
      return im.nodeError() << "auto_pad '" << pad->s()
                            << "' needs kernel_shape, strides and dilations "
                               "of one entry per spatial dimension";
    SmallVector<int64_t> pads(2 * spatial, 0);
    if (pad->s() == "SAME_UPPER" || pad->s() == "SAME_LOWER") {
      for (size_t d = 0; d < spatial; ++d) {
        int64_t size = in[2 + d];
        int64_t out = (size + strides[d] - 1) / strides[d];
        int64_t total = std::max<int64_t>(
            (out - 1) * strides[d] + (kernel[d] - 1) * dil[d] + 1 - size, 0);
        int64_t small = total / 2, big = total - small;
        pads[d] = pad->s() == "SAME_UPPER" ? small : big;
        pads[spatial + d] = pad->s() == "SAME_UPPER" ? big : small;
      }
    } else if (pad->s() != "VALID") {
      return im.nodeError() << "unknown auto_pad '" << pad->s() << "'";
    }
    llvm::erase_if(attrs, [](NamedAttribute a) {
      return a.getName() == "auto_pad" || a.getName() == "pads";
    });
    attrs.push_back(b.getNamedAttr("pads", b.getDenseI64ArrayAttr(pads)));
  }
  SmallVector<std::pair<int, StringRef>> folded = foldedInputs(type);
  SmallVector<Value> inputs;
  for (int i = 0; i < node.input_size(); ++i) {
    auto it = llvm::find_if(folded, [&](auto &f) { return f.first == i; });
    if (it != folded.end()) {
      if (!Importer::hasInput(node, i) || it->second.empty())
        continue;
      auto ints = im.getConstantInts(node, i, it->second);
      if (failed(ints))
        return failure();
      if (it->second == "k" || it->second == "axis") {
        if (ints->size() != 1)
          return im.nodeError()
                 << "input " << i << " ('" << it->second
                 << "') must hold one integer, not " << ints->size();
        attrs.push_back(
            b.getNamedAttr(it->second, b.getI64IntegerAttr(ints->front())));
      } else {
        attrs.push_back(
            b.getNamedAttr(it->second, b.getDenseI64ArrayAttr(*ints)));
      }
      continue;
    }
    if (!Importer::hasInput(node, i))
      return im.nodeError() << "optional input " << i
                            << " left out in the middle is not supported";
    auto v = im.getInput(node, i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  SmallVector<Type> types;
  SmallVector<int> outputs;
  for (int i = 0; i < node.output_size(); ++i) {
    if (node.output(i).empty())
      continue;
    if (i >= maxOutputs(type)) {
      if (im.isOutputUsed(node, i))
        return im.nodeError() << "output " << i << " of " << type
                              << " is used; shoal computes only the first "
                              << maxOutputs(type);
      continue;
    }
    auto t = im.getResultType(node, i);
    if (failed(t))
      return failure();
    types.push_back(*t);
    outputs.push_back(i);
  }
  auto op = b.create<OnnxOp>(im.loc(), types, b.getStringAttr(type),
                             b.getDictionaryAttr(attrs), inputs);
  for (auto [k, i] : llvm::enumerate(outputs))
    im.setResult(node, i, op->getResult(k));
  return success();
}

/// The first `n` inputs of `node`, each required (an error names the op
/// and the missing input).
FailureOr<SmallVector<Value>>
requiredInputs(Importer &im, const onnx::NodeProto &node, int n) {
  SmallVector<Value> in;
  for (int i = 0; i < n; ++i) {
    if (!Importer::hasInput(node, i))
      return im.nodeError() << node.op_type() << " needs input " << i;
    auto v = im.getInput(node, i);
    if (failed(v))
      return failure();
    in.push_back(*v);
  }
  return in;
}

/// BatchNormalization in inference mode stays a shoal.onnx op; in training
/// mode (training_mode = 1) it is written with graph ops over the batch
/// statistics (biased variance), so that it has a gradient and, with the
/// batch split, its sums are reductions that the partitioner completes by
/// an all-reduce: every replica normalizes with the global batch's
/// statistics (SyncBatchNorm). The running-statistics outputs, when read,
/// are ONNX's `input * momentum + batch * (1 - momentum)` with the
/// variance unbiased (PyTorch's buffers).
LogicalResult convertBatchNorm(Importer &im, const onnx::NodeProto &node) {
  if (!getIntAttr(node, "training_mode", 0))
    return convertGeneric(im, node);
  auto inputs = requiredInputs(im, node, 5);
  if (failed(inputs))
    return failure();
  SmallVector<Value> in = *inputs;
  auto type = im.getResultType(node, 0);
  if (failed(type))
    return failure();
  auto xType = cast<RankedTensorType>(in[0].getType());
  ArrayRef<int64_t> xs = xType.getShape();
  if (xs.size() < 2 || ShapedType::isDynamicShape(xs))
    return im.nodeError() << "BatchNormalization in training mode needs a "
                             "static input [N, C, ...], got "
                          << xType;
  int64_t c = xs[1];
  for (int i = 1; i < 5; ++i)
    if (cast<RankedTensorType>(in[i].getType()).getShape() !=
        ArrayRef<int64_t>{c})
      return im.nodeError() << "input " << i << " must have shape [" << c
                            << "], got " << in[i].getType();
  // With G groups (micro-batches) the samples are viewed as [G, N / G]
  // and the statistics taken per group: the global function a pipeline
  // with G micro-batches computes, and one whose micro-batch cut
  // (dimension 0) is a parallel factor, so no statistic crosses it.
  int64_t groups = im.batchNormGroups;
  if (groups < 1 || xs[0] % groups != 0)
    return im.nodeError() << "BatchNormalization in training mode: batch "
                          << xs[0] << " cannot be cut into " << groups
                          << " micro-batches";
  OpBuilder &b = im.builder();
  Location loc = im.loc();
  Type elem = xType.getElementType();
  int64_t off = groups > 1 ? 1 : 0;
  SmallVector<int64_t> gs;
  if (groups > 1)
    gs.push_back(groups);
  gs.push_back(xs[0] / groups);
  gs.append(xs.begin() + 1, xs.end());
  int64_t rank = gs.size();
  SmallVector<int64_t> axes{off}, kept(rank, 1), chan(rank, 1);
  if (groups > 1)
    kept[0] = groups;
  kept[1 + off] = c;
  chan[1 + off] = c;
  int64_t count = xs[0] / groups;
  for (int64_t d = 2 + off; d < rank; ++d) {
    axes.push_back(d);
    count *= gs[d];
  }
  auto keptType = RankedTensorType::get(kept, elem);
  auto chanType = RankedTensorType::get(chan, elem);
  auto scalarType = RankedTensorType::get({}, elem);
  auto scalar = [&](double v) -> Value {
    return b.create<ConstantOp>(
        loc, scalarType,
        DenseElementsAttr::get(scalarType, b.getFloatAttr(elem, v)));
  };
  auto binary = [&](auto tag, Value x, Value y) -> Value {
    using OpT = decltype(tag);
    Type t = cast<RankedTensorType>(x.getType()).getRank() >=
                     cast<RankedTensorType>(y.getType()).getRank()
                 ? x.getType()
                 : y.getType();
    return b.create<OpT>(loc, t, x, y);
  };
  auto meanOf = [&](Value v) -> Value {
    Value sum = b.create<ReduceSumOp>(
        loc, keptType, v, b.getDenseI64ArrayAttr(axes), b.getBoolAttr(true));
    return binary(MulOp(), sum, scalar(1.0 / std::max<int64_t>(count, 1)));
  };
  float epsilon = getFloatAttr(node, "epsilon", 1e-5f);
  Value x = in[0];
  if (groups > 1)
    x = b.create<ReshapeOp>(loc, RankedTensorType::get(gs, elem), x);
  Value mean = meanOf(x);
  mean.getDefiningOp<MulOp>().getLhs().getDefiningOp()->setAttr(
      ShoalDialect::kBatchNormGroupsAttr, b.getI64IntegerAttr(groups));
  Value centered = binary(SubOp(), x, mean);
  Value var = meanOf(binary(MulOp(), centered, centered));
  Value std =
      b.create<SqrtOp>(loc, keptType, binary(AddOp(), var, scalar(epsilon)));
  Value inv = b.create<ReciprocalOp>(loc, keptType, std);
  Value scale = b.create<ReshapeOp>(loc, chanType, in[1]);
  Value bias = b.create<ReshapeOp>(loc, chanType, in[2]);
  Value y = binary(
      AddOp(), binary(MulOp(), binary(MulOp(), centered, inv), scale), bias);
  if (groups > 1)
    y = b.create<ReshapeOp>(loc, xType, y);
  if (y.getType() != *type)
    return im.nodeError() << "output Y has type " << *type << ", expected "
                          << y.getType();
  im.setResult(node, 0, y);
  // Running statistics, when the graph reads them: PyTorch's update once
  // per group in order, r <- m r + (1 - m) b_j (ONNX's momentum m), is
  // m^G r + sum_j (1 - m) m^(G-1-j) b_j.
  double momentum = getFloatAttr(node, "momentum", 0.9f);
  double unbiased = count > 1 ? double(count) / double(count - 1) : 1.0;
  // Running statistics held by initializers are written back each step
  // (shoal.assign, placed in the optimizer phase by shoal-optimizer).
  for (int i = 1; i < 3; ++i) {
    bool used = i < node.output_size() && !node.output(i).empty() &&
                im.isOutputUsed(node, i);
    auto weight = in[2 + i].getDefiningOp<WeightOp>();
    if (!used && !weight)
      continue;
    Value stat = i == 1 ? mean : var;
    double factor = (1 - momentum) * (i == 1 ? 1.0 : unbiased);
    Value weighted;
    if (groups > 1) {
      SmallVector<int64_t> wShape(rank, 1);
      wShape[0] = groups;
      auto wType = RankedTensorType::get(wShape, elem);
      SmallVector<Attribute> ws;
      for (int64_t j = 0; j < groups; ++j)
        ws.push_back(b.getFloatAttr(
            elem, factor * std::pow(momentum, double(groups - 1 - j))));
      Value w =
          b.create<ConstantOp>(loc, wType, DenseElementsAttr::get(wType, ws));
      SmallVector<int64_t> one(rank, 1);
      one[1 + off] = c;
      weighted = b.create<ReduceSumOp>(
          loc, RankedTensorType::get(one, elem), binary(MulOp(), stat, w),
          b.getDenseI64ArrayAttr({0}), b.getBoolAttr(true));
      weighted = b.create<ReshapeOp>(loc, in[3].getType(), weighted);
    } else {
      Value flat = b.create<ReshapeOp>(loc, in[3].getType(), stat);
      weighted = binary(MulOp(), flat, scalar(factor));
    }
    Value updated = binary(
        AddOp(),
        binary(MulOp(), in[2 + i], scalar(std::pow(momentum, double(groups)))),
        weighted);
    if (used)
      im.setResult(node, i, updated);
    if (weight)
      b.create<AssignOp>(loc, in[2 + i], updated);
  }
  return success();
}

/// InstanceNormalization(X [N, C, ...], scale [C], bias [C]) written with
/// graph ops: mean and (biased) variance over the spatial dimensions of each
/// sample and channel, then scale and bias per channel. PyTorch exports
/// nn.GroupNorm and nn.InstanceNorm* through it. The batch and the channels
/// stay splittable.
LogicalResult convertInstanceNorm(Importer &im, const onnx::NodeProto &node) {
  auto inputs = requiredInputs(im, node, 3);
  if (failed(inputs))
    return failure();
  SmallVector<Value> in = *inputs;
  auto type = im.getResultType(node, 0);
  if (failed(type))
    return failure();
  auto xType = cast<RankedTensorType>(in[0].getType());
  ArrayRef<int64_t> xs = xType.getShape();
  if (xs.size() < 3)
    return im.nodeError() << "InstanceNormalization needs an input [N, C, "
                             "D1, ...] of rank 3 or more, got "
                          << xType;
  int64_t c = xs[1];
  for (int i = 1; i < 3; ++i)
    if (cast<RankedTensorType>(in[i].getType()).getShape() !=
        ArrayRef<int64_t>{c})
      return im.nodeError() << "input " << i << " must have shape [" << c
                            << "], got " << in[i].getType();
  OpBuilder &b = im.builder();
  Location loc = im.loc();
  Type elem = xType.getElementType();
  SmallVector<int64_t> axes, kept(xs.begin(), xs.end()), channel(xs.size(), 1);
  for (int64_t d = 2; d < static_cast<int64_t>(xs.size()); ++d) {
    axes.push_back(d);
    kept[d] = 1;
  }
  channel[1] = c;
  auto keptType = RankedTensorType::get(kept, elem);
  auto channelType = RankedTensorType::get(channel, elem);
  auto scalarType = RankedTensorType::get({}, elem);
  float epsilon = getFloatAttr(node, "epsilon", 1e-5f);
  auto mean = [&](Value v) -> Value {
    return b.create<ReduceMeanOp>(
        loc, keptType, v, b.getDenseI64ArrayAttr(axes), b.getBoolAttr(true));
  };
  Value centered = b.create<SubOp>(loc, xType, in[0], mean(in[0]));
  Value var = mean(b.create<MulOp>(loc, xType, centered, centered));
  Value eps = b.create<ConstantOp>(
      loc, scalarType,
      DenseElementsAttr::get(scalarType, b.getFloatAttr(elem, epsilon)));
  Value std =
      b.create<SqrtOp>(loc, keptType, b.create<AddOp>(loc, keptType, var, eps));
  Value normalized = b.create<DivOp>(loc, xType, centered, std);
  Value scale = b.create<ReshapeOp>(loc, channelType, in[1]);
  Value bias = b.create<ReshapeOp>(loc, channelType, in[2]);
  Value y = b.create<AddOp>(
      loc, xType, b.create<MulOp>(loc, xType, normalized, scale), bias);
  if (y.getType() != *type)
    return im.nodeError() << "output has type " << *type << ", expected "
                          << y.getType();
  im.setResult(node, 0, y);
  return success();
}

} // namespace

ConvertFn onnx_import::lookupConverter(StringRef opType) {
  return llvm::StringSwitch<ConvertFn>(opType)
      .Case("Add", convertBinary<AddOp>)
      .Case("Sub", convertBinary<SubOp>)
      .Case("Mul", convertBinary<MulOp>)
      .Case("Div", convertBinary<DivOp>)
      .Case("Pow", convertBinary<PowOp>)
      .Case("Erf", convertUnary<ErfOp>)
      .Case("Tanh", convertUnary<TanhOp>)
      .Case("Relu", convertUnary<ReluOp>)
      .Case("Sqrt", convertUnary<SqrtOp>)
      .Case("Exp", convertUnary<ExpOp>)
      .Case("Neg", convertUnary<NegOp>)
      .Case("Sigmoid", convertUnary<SigmoidOp>)
      .Case("Sin", convertUnary<SinOp>)
      .Case("Cos", convertUnary<CosOp>)
      .Case("Abs", convertUnary<AbsOp>)
      .Case("Log", convertUnary<LogOp>)
      .Case("Reciprocal", convertUnary<ReciprocalOp>)
      .Case("Floor", convertUnary<FloorOp>)
      .Case("Ceil", convertUnary<CeilOp>)
      .Case("Not", convertUnary<NotOp>)
      .Case("IsNaN", convertIsNaN)
      .Case("Cast", convertCast)
      // The result type (the second input's element type) comes from shape
      // inference; the second input's values are not read.
      .Case("CastLike", convertCast)
      .Case("Max", convertVariadic<MaxOp>)
      .Case("Min", convertVariadic<MinOp>)
      .Case("Equal", convertBinary<EqualOp>)
      .Case("Less", convertBinary<LessOp>)
      .Case("Greater", convertBinary<GreaterOp>)
      .Case("LessOrEqual", convertBinary<LessOrEqualOp>)
      .Case("GreaterOrEqual", convertBinary<GreaterOrEqualOp>)
      .Case("And", convertBinary<AndOp>)
      .Case("Or", convertBinary<OrOp>)
      .Case("Xor", convertBinary<XorOp>)
      .Case("Where", convertWhere)
      .Case("Pad", convertPad)
      .Case("Clip", convertClip)
      .Case("Dropout", convertDropout)
      .Cases("HardSigmoid", "HardSwish", "Mod", "ArgMax", "ArgMin", "CumSum",
             convertGeneric)
      .Case("Squeeze", convertReshapeLike)
      .Case("Unsqueeze", convertReshapeLike)
      .Case("Flatten", convertReshapeLike)
      .Cases("Concat", "Split", "Slice", "Expand", "Conv", convertGeneric)
      .Case("BatchNormalization", convertBatchNorm)
      .Case("InstanceNormalization", convertInstanceNorm)
      .Cases("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool",
             convertGeneric)
      .Cases("GatherElements", "ScatterElements", "ScatterND", "TopK", "Trilu",
             "Tile", convertGeneric)
      .Case("OneHot", convertOneHot)
      .Case("Einsum", convertEinsum)
      .Case("LSTM", convertLSTM)
      .Case("GRU", convertGRU)
      .Case("Resize", convertResize)
      .Case("MatMul", convertMatMul)
      .Case("Gemm", convertGemm)
      .Case("Softmax", convertSoftmax)
      .Case("LayerNormalization", convertLayerNorm)
      .Case("Gather", convertGather)
      .Case("Reshape", convertReshape)
      .Case("Transpose", convertTranspose)
      .Case("ReduceMean", convertReduceMean)
      .Case("ReduceSum", convertReduceSum)
      .Case("Constant", convertConstant)
      .Case("Identity", convertIdentity)
      .Default(nullptr);
}
