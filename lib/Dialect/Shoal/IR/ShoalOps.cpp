//===- ShoalOps.cpp - shoal operations and verifiers ------------*- C++ -*-===//
//
// The ops' verifiers, folders and costs. Their sharding rules are in
// ShoalShardingRules.cpp, their gradient rules in ShoalGradients.cpp.
//
//===----------------------------------------------------------------------===//

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"
#include "ShoalOpsUtils.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::detail;

#include "shoal/Dialect/Shoal/IR/ShoalInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace shoal::detail {
std::string fmtShape(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleaveComma(shape, os, [&](int64_t d) {
    if (ShapedType::isDynamic(d))
      os << "?";
    else
      os << d;
  });
  return os.str() + "]";
}

FailureOr<SmallVector<int64_t>>
broadcastShapes(ArrayRef<ArrayRef<int64_t>> shapes) {
  size_t rank = 0;
  for (auto s : shapes)
    rank = std::max(rank, s.size());
  SmallVector<int64_t> out(rank, 1);
  for (auto s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[rank - s.size() + i];
      int64_t d = s[i];
      if (d == 1)
        continue;
      if (o == 1 || o == d)
        o = d;
      else
        return failure();
    }
  }
  return out;
}
} // namespace shoal::detail

int64_t shoal::getTensorBytes(TypeRange types) {
  int64_t bytes = 0;
  for (Type t : types)
    if (auto rt = dyn_cast<RankedTensorType>(t))
      if (rt.hasStaticShape())
        bytes += rt.getNumElements() *
                 std::max<int64_t>(1, rt.getElementTypeBitWidth() / 8);
  return bytes;
}

//===----------------------------------------------------------------------===//
// Elementwise and reductions
//===----------------------------------------------------------------------===//

LogicalResult shoal::verifyElementwiseOp(Operation *op) {
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value v : op->getOperands())
    shapes.push_back(shapeOf(v));
  auto expected = broadcastShapes(shapes);
  if (failed(expected)) {
    auto diag = op->emitOpError() << "operand shapes ";
    llvm::interleave(
        shapes, [&](ArrayRef<int64_t> s) { diag << fmtShape(s); },
        [&] { diag << " and "; });
    return diag << " are not broadcast-compatible";
  }
  ArrayRef<int64_t> result = shapeOf(op->getResult(0));
  if (ArrayRef<int64_t>(*expected) != result)
    return op->emitOpError()
           << "result shape " << fmtShape(result)
           << " does not match the broadcast shape " << fmtShape(*expected);
  return success();
}

LogicalResult shoal::verifyReduceOp(Operation *op, ArrayRef<int64_t> axes,
                                    bool keepdims) {
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  int64_t rank = in.size();
  SmallVector<int64_t> expected;
  for (int64_t a : axes)
    if (normalizeAxis(a, rank) < 0)
      return op->emitOpError()
             << "reduction axis " << a << " out of range for rank " << rank;
  for (int64_t i = 0; i < rank; ++i) {
    bool reduced = llvm::any_of(
        axes, [&](int64_t a) { return normalizeAxis(a, rank) == i; });
    if (!reduced)
      expected.push_back(in[i]);
    else if (keepdims)
      expected.push_back(1);
  }
  if (ArrayRef<int64_t>(expected) != shapeOf(op->getResult(0)))
    return op->emitOpError()
           << "result shape " << fmtShape(shapeOf(op->getResult(0)))
           << " does not match the reduced shape " << fmtShape(expected);
  return success();
}

//===----------------------------------------------------------------------===//
// WeightOp / ConstantOp
//===----------------------------------------------------------------------===//

LogicalResult WeightOp::verify() {
  if (getName().empty())
    return emitOpError() << "needs the name of an initializer";
  if (!getType().hasStaticShape())
    return emitOpError() << "weight '" << getName()
                         << "' must have a static shape";
  if (auto src = (*this)->getAttrOfType<DenseI64ArrayAttr>(
          ShoalDialect::kSourceShapeAttr)) {
    // After partitioning, the type is a shard; the global shape is kept.
    SmallVector<int64_t> shape(getType().getShape());
    if (auto g =
            (*this)->getAttrOfType<DenseI64ArrayAttr>("shoal.global_shape"))
      shape.assign(g.asArrayRef().begin(), g.asArrayRef().end());
    int64_t n = 1, m = 1;
    for (int64_t d : src.asArrayRef())
      n = d < 0 ? -1 : n * d;
    for (int64_t d : shape)
      m *= d;
    if (n != m)
      return emitOpError() << "weight '" << getName()
                           << "' views an initializer of shape "
                           << fmtShape(src.asArrayRef()) << " as "
                           << fmtShape(shape)
                           << ", which has another number of elements";
  }
  if (auto range = (*this)->getAttrOfType<DictionaryAttr>(
          ShoalDialect::kSourceRangeAttr)) {
    auto name = range.getAs<StringAttr>("initializer");
    auto shape = range.getAs<DenseI64ArrayAttr>("shape");
    auto axis = range.getAs<IntegerAttr>("axis");
    auto start = range.getAs<IntegerAttr>("start");
    if (!name || name.getValue().empty() || !shape || !axis || !start)
      return emitOpError() << "weight '" << getName()
                           << "': shoal.source_range needs initializer, "
                              "shape, axis and start";
    if ((*this)->hasAttr(ShoalDialect::kSourceShapeAttr))
      return emitOpError() << "weight '" << getName()
                           << "' has both shoal.source_range and "
                              "shoal.source_shape";
    SmallVector<int64_t> own(getType().getShape());
    if (auto g =
            (*this)->getAttrOfType<DenseI64ArrayAttr>("shoal.global_shape"))
      own.assign(g.asArrayRef().begin(), g.asArrayRef().end());
    int64_t a = axis.getInt(), s = start.getInt();
    ArrayRef<int64_t> src = shape.asArrayRef();
    bool ok = src.size() == own.size() && a >= 0 &&
              a < static_cast<int64_t>(own.size()) && s >= 0 &&
              s + own[a] <= src[a];
    for (size_t d = 0; ok && d < own.size(); ++d)
      ok = static_cast<int64_t>(d) == a || src[d] == own[d];
    if (!ok)
      return emitOpError() << "weight '" << getName() << "' of shape "
                           << fmtShape(own) << " is no block of initializer '"
                           << name.getValue() << "' of shape " << fmtShape(src)
                           << " starting at " << s << " along axis " << a;
  }
  return success();
}

StringRef shoal::getSourceName(WeightOp w) {
  if (auto range =
          w->getAttrOfType<DictionaryAttr>(ShoalDialect::kSourceRangeAttr))
    if (auto name = range.getAs<StringAttr>("initializer"))
      return name.getValue();
  return w.getName();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// MatMulOp
//===----------------------------------------------------------------------===//

FailureOr<MatMulDims> shoal::detail::getMatMulDims(Operation *op,
                                                   ArrayRef<int64_t> a,
                                                   ArrayRef<int64_t> b) {
  if (a.empty() || b.empty())
    return op->emitOpError() << "operands must have rank at least 1";
  MatMulDims d;
  d.hasM = a.size() >= 2;
  d.hasN = b.size() >= 2;
  d.m = d.hasM ? a[a.size() - 2] : 1;
  d.k = a.back();
  int64_t kb = d.hasN ? b[b.size() - 2] : b.back();
  d.n = d.hasN ? b.back() : 1;
  if (d.k != kb)
    return op->emitOpError()
           << "contracting dimensions differ: lhs " << fmtShape(a) << " has "
           << d.k << ", rhs " << fmtShape(b) << " has " << kb;
  ArrayRef<int64_t> ab = a.drop_back(d.hasM ? 2 : 1);
  ArrayRef<int64_t> bb = b.drop_back(d.hasN ? 2 : 1);
  auto batch = broadcastShapes({ab, bb});
  if (failed(batch))
    return op->emitOpError() << "batch dimensions of " << fmtShape(a) << " and "
                             << fmtShape(b) << " are not broadcast-compatible";
  d.batch = *batch;
  return d;
}

LogicalResult MatMulOp::verify() {
  auto d = getMatMulDims(*this, shapeOf(getLhs()), shapeOf(getRhs()));
  if (failed(d))
    return failure();
  SmallVector<int64_t> expected = d->batch;
  if (d->hasM)
    expected.push_back(d->m);
  if (d->hasN)
    expected.push_back(d->n);
  if (ArrayRef<int64_t>(expected) != shapeOf(getResult()))
    return emitOpError() << "result shape " << fmtShape(shapeOf(getResult()))
                         << " does not match the expected "
                         << fmtShape(expected);
  return success();
}

int64_t MatMulOp::getFlops() {
  auto rt = cast<RankedTensorType>(getType());
  return 2 * rt.getNumElements() * shapeOf(getLhs()).back();
}

//===----------------------------------------------------------------------===//
// GemmOp
//===----------------------------------------------------------------------===//

LogicalResult GemmOp::verify() {
  ArrayRef<int64_t> a = shapeOf(getA()), b = shapeOf(getB());
  if (a.size() != 2 || b.size() != 2)
    return emitOpError() << "operands A and B must be 2-D, got " << fmtShape(a)
                         << " and " << fmtShape(b);
  int64_t m = getTransA() ? a[1] : a[0], k = getTransA() ? a[0] : a[1];
  int64_t kb = getTransB() ? b[1] : b[0], n = getTransB() ? b[0] : b[1];
  if (k != kb)
    return emitOpError() << "contracting dimensions differ: " << k << " vs "
                         << kb;
  SmallVector<int64_t> expected{m, n};
  if (ArrayRef<int64_t>(expected) != shapeOf(getResult()))
    return emitOpError() << "result shape " << fmtShape(shapeOf(getResult()))
                         << " does not match the expected "
                         << fmtShape(expected);
  if (getC()) {
    auto bc = broadcastShapes({shapeOf(getC()), expected});
    if (failed(bc) || ArrayRef<int64_t>(*bc) != ArrayRef<int64_t>(expected))
      return emitOpError() << "C of shape " << fmtShape(shapeOf(getC()))
                           << " does not broadcast to " << fmtShape(expected);
  }
  return success();
}

int64_t GemmOp::getFlops() {
  ArrayRef<int64_t> res = shapeOf(getResult());
  return 2 * res[0] * res[1] * shapeOf(getA())[getTransA() ? 0 : 1];
}

//===----------------------------------------------------------------------===//
// SoftmaxOp / LayerNormOp
//===----------------------------------------------------------------------===//

LogicalResult SoftmaxOp::verify() {
  if (normalizeAxis(getAxis(), rankOf(getInput())) < 0)
    return emitOpError() << "axis " << getAxis() << " out of range for rank "
                         << rankOf(getInput());
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal the input type";
  return success();
}

namespace {
/// Checks the axis and the scale/bias shapes of a layer normalization of
/// `x` over its dimensions `axis..`.
LogicalResult verifyNormalization(Operation *op, Value x, int64_t axisAttr,
                                  Value scale, Value bias) {
  int64_t rank = rankOf(x);
  int64_t axis = normalizeAxis(axisAttr, rank);
  if (axis < 0)
    return op->emitOpError()
           << "axis " << axisAttr << " out of range for rank " << rank;
  ArrayRef<int64_t> norm = shapeOf(x).drop_front(axis);
  for (Value v : {scale, bias}) {
    if (!v)
      continue;
    auto bc = broadcastShapes({shapeOf(v), norm});
    if (failed(bc) || ArrayRef<int64_t>(*bc) != norm)
      return op->emitOpError() << "scale/bias of shape " << fmtShape(shapeOf(v))
                               << " does not broadcast to the normalized shape "
                               << fmtShape(norm);
  }
  return success();
}
} // namespace

LogicalResult LayerNormOp::verify() {
  if (failed(verifyNormalization(*this, getInput(), getAxis(), getScale(),
                                 getBias())))
    return failure();
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal the input type";
  return success();
}

//===----------------------------------------------------------------------===//
// GatherOp
//===----------------------------------------------------------------------===//

/// `shard_axes` and `shard_size` of a vocabulary-parallel op: both given,
/// and the local block (`local` rows or classes) a ceil-sized block of
/// `shard_size`.
static LogicalResult verifyVocabShard(Operation *op, ArrayAttr axes,
                                      std::optional<uint64_t> size,
                                      int64_t local) {
  if (!axes || !size)
    return op->emitOpError() << "needs both shard_axes and shard_size";
  if (axes.empty())
    return op->emitOpError() << "shard_axes needs at least one mesh axis";
  int64_t whole = static_cast<int64_t>(*size);
  if (whole <= 0 || local <= 0 || local > whole)
    return op->emitOpError()
           << "a block of " << local << " cannot be a shard of " << whole;
  return success();
}

LogicalResult GatherOp::verify() {
  ArrayRef<int64_t> data = shapeOf(getData()), idx = shapeOf(getIndices());
  int64_t axis = normalizeAxis(getAxis(), data.size());
  if (axis < 0)
    return emitOpError() << "axis " << getAxis() << " out of range for rank "
                         << data.size();
  auto et = cast<RankedTensorType>(getIndices().getType()).getElementType();
  if (!et.isInteger(64) && !et.isInteger(32))
    return emitOpError() << "indices must be i32 or i64, got " << et;
  SmallVector<int64_t> expected(data.begin(), data.begin() + axis);
  expected.append(idx.begin(), idx.end());
  expected.append(data.begin() + axis + 1, data.end());
  if (ArrayRef<int64_t>(expected) != shapeOf(getResult()))
    return emitOpError() << "result shape " << fmtShape(shapeOf(getResult()))
                         << " does not match the expected "
                         << fmtShape(expected);
  if (getShardAxesAttr() || getShardSize()) {
    if (axis != 0)
      return emitOpError() << "a vocabulary-parallel gather must be along "
                              "axis 0, not "
                           << getAxis();
    return verifyVocabShard(*this, getShardAxesAttr(), getShardSize(),
                            data.empty() ? 0 : data[0]);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ReshapeOp / TransposeOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getResult().getType());
  if (!in.hasStaticShape() || !out.hasStaticShape())
    return emitOpError() << "needs static shapes";
  if (in.getNumElements() != out.getNumElements())
    return emitOpError() << "cannot reshape " << fmtShape(in.getShape()) << " ("
                         << in.getNumElements() << " elements) to "
                         << fmtShape(out.getShape()) << " ("
                         << out.getNumElements() << " elements)";
  if (in.getElementType() != out.getElementType())
    return emitOpError() << "must keep the element type";
  return success();
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  ArrayRef<int64_t> perm = getPerm();
  if (perm.size() != in.size())
    return emitOpError() << "perm has " << perm.size()
                         << " entries for an input of rank " << in.size();
  SmallVector<bool> seen(in.size(), false);
  SmallVector<int64_t> expected;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)in.size() || seen[p])
      return emitOpError() << "perm " << fmtShape(perm)
                           << " is not a permutation of rank " << in.size();
    seen[p] = true;
    expected.push_back(in[p]);
  }
  if (ArrayRef<int64_t>(expected) != shapeOf(getResult()))
    return emitOpError() << "result shape " << fmtShape(shapeOf(getResult()))
                         << " does not match the expected "
                         << fmtShape(expected);
  return success();
}

//===----------------------------------------------------------------------===//
// OnnxOp
//===----------------------------------------------------------------------===//

LogicalResult OnnxOp::verify() {
  if (getOpType().empty())
    return emitOpError() << "needs an ONNX op type";
  if (getNumResults() == 0)
    return emitOpError() << "'" << getOpType() << "' needs at least one result";
  return success();
}

int64_t shoal::getOnnxAxis(OnnxOp op, int64_t rank, int64_t dflt) {
  int64_t axis = dflt;
  if (auto a = op.getOnnxAttrs().getAs<IntegerAttr>("axis"))
    axis = a.getInt();
  return normalizeAxis(axis, rank);
}

//===----------------------------------------------------------------------===//
// Fused ops
//===----------------------------------------------------------------------===//

static LogicalResult verifyGeluForm(Operation *op, StringRef approximate) {
  if (approximate != "none" && approximate != "tanh")
    return op->emitOpError()
           << "approximate must be \"none\" or \"tanh\", got \"" << approximate
           << "\"";
  return success();
}

LogicalResult GeluOp::verify() {
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal the input type";
  if (failed(verifyGeluForm(*this, getApproximate())))
    return failure();
  return verifyElementwiseOp(*this);
}

LogicalResult GeluGradOp::verify() {
  if (getGrad().getType() != getResult().getType())
    return emitOpError() << "result type must equal the gradient's type";
  if (cast<RankedTensorType>(getInput().getType()).getElementType() !=
      cast<RankedTensorType>(getResult().getType()).getElementType())
    return emitOpError() << "input and gradient must have one element type";
  if (failed(verifyGeluForm(*this, getApproximate())))
    return failure();
  return verifyElementwiseOp(*this);
}

LogicalResult AddLayerNormOp::verify() {
  Type t = getLhs().getType();
  if (getRhs().getType() != t || getSum().getType() != t ||
      getResult().getType() != t)
    return emitOpError() << "operands and results must all have type " << t;
  return verifyNormalization(*this, getLhs(), getAxis(), getScale(), getBias());
}

namespace {
/// Checks q [.., T, D], kt [.., D, S], v [.., S, E] and the mask (optional,
/// broadcast to the scores [.., T, S]) of shoal.attention(_grad); the
/// attention's result shape [.., T, E], or failure after an error on `op`.
FailureOr<SmallVector<int64_t>> verifyAttentionOperands(Operation *op, Value qv,
                                                        Value ktv, Value vv,
                                                        Value mask) {
  ArrayRef<int64_t> q = shapeOf(qv), kt = shapeOf(ktv), v = shapeOf(vv);
  if (q.size() < 2 || kt.size() != q.size() || v.size() != q.size())
    return op->emitOpError()
           << "q, kt and v must have the same rank (at least 2), got "
           << fmtShape(q) << ", " << fmtShape(kt) << ", " << fmtShape(v);
  size_t r = q.size();
  if (q.drop_back(2) != kt.drop_back(2) || q.drop_back(2) != v.drop_back(2))
    return op->emitOpError()
           << "q, kt and v must have the same batch dimensions";
  if (q[r - 1] != kt[r - 2])
    return op->emitOpError()
           << "q's last dimension " << q[r - 1]
           << " differs from kt's contracted dimension " << kt[r - 2];
  if (kt[r - 1] != v[r - 2])
    return op->emitOpError()
           << "kt has " << kt[r - 1] << " keys but v has " << v[r - 2];
  SmallVector<int64_t> scores(q.drop_back(1));
  scores.push_back(kt[r - 1]);
  if (mask) {
    auto bc = broadcastShapes({shapeOf(mask), scores});
    if (failed(bc) || ArrayRef<int64_t>(*bc) != ArrayRef<int64_t>(scores))
      return op->emitOpError()
             << "mask of shape " << fmtShape(shapeOf(mask))
             << " does not broadcast to the scores " << fmtShape(scores);
  }
  SmallVector<int64_t> result(q.drop_back(1));
  result.push_back(v[r - 1]);
  return result;
}
} // namespace

LogicalResult AttentionOp::verify() {
  auto expected =
      verifyAttentionOperands(*this, getQ(), getKt(), getV(), getMask());
  if (failed(expected))
    return failure();
  if (ArrayRef<int64_t>(*expected) != shapeOf(getResult()))
    return emitOpError() << "result shape " << fmtShape(shapeOf(getResult()))
                         << " does not match the expected "
                         << fmtShape(*expected);
  return success();
}

int64_t AttentionOp::getFlops() {
  ArrayRef<int64_t> q = shapeOf(getQ()), v = shapeOf(getV());
  int64_t n = 1;
  for (int64_t x : q.drop_back(1))
    n *= x;
  // Two matrix products over the keys.
  return 2 * n * v[v.size() - 2] * (q.back() + v.back());
}

LogicalResult AttentionGradOp::verify() {
  auto out = verifyAttentionOperands(*this, getQ(), getKt(), getV(), getMask());
  if (failed(out))
    return failure();
  if (shapeOf(getGrad()) != ArrayRef<int64_t>(*out))
    return emitOpError() << "grad of shape " << fmtShape(shapeOf(getGrad()))
                         << " is not the attention's result shape "
                         << fmtShape(*out);
  if (getDq().getType() != getQ().getType() ||
      getDkt().getType() != getKt().getType() ||
      getDv().getType() != getV().getType())
    return emitOpError() << "results must have the types of q, kt and v";
  return success();
}

int64_t AttentionGradOp::getFlops() {
  ArrayRef<int64_t> q = shapeOf(getQ()), v = shapeOf(getV());
  int64_t n = 1;
  for (int64_t x : q.drop_back(1))
    n *= x;
  // Five products over the keys: the scores again, dP, dq, dkt and dv.
  return 2 * n * v[v.size() - 2] * (3 * q.back() + 2 * v.back());
}

//===----------------------------------------------------------------------===//
// Training ops
//===----------------------------------------------------------------------===//

LogicalResult ExpandOp::verify() {
  auto bc = broadcastShapes({shapeOf(getInput()), shapeOf(getResult())});
  if (failed(bc) || ArrayRef<int64_t>(*bc) != shapeOf(getResult()))
    return emitOpError() << "cannot broadcast " << fmtShape(shapeOf(getInput()))
                         << " to " << fmtShape(shapeOf(getResult()));
  return success();
}

namespace {
/// Checks that `labels` is an integer tensor of the logits' shape without
/// the class axis, and returns the number of classes.
LogicalResult verifyLabels(Operation *op, Value logits, Value labels) {
  ArrayRef<int64_t> l = shapeOf(logits);
  if (l.empty())
    return op->emitOpError() << "logits must have a class axis";
  auto et = cast<RankedTensorType>(labels.getType()).getElementType();
  if (!et.isInteger(64) && !et.isInteger(32))
    return op->emitOpError() << "labels must be i32 or i64, got " << et;
  if (shapeOf(labels) != l.drop_back())
    return op->emitOpError() << "labels of shape " << fmtShape(shapeOf(labels))
                             << " do not match logits " << fmtShape(l)
                             << " without the class axis";
  return success();
}
} // namespace

LogicalResult SoftmaxCrossEntropyOp::verify() {
  if (failed(verifyLabels(*this, getLogits(), getLabels())))
    return failure();
  if (shapeOf(getResult()) != shapeOf(getLogits()).drop_back())
    return emitOpError() << "result must have the logits' shape without the "
                            "class axis";
  return success();
}

LogicalResult SoftmaxCrossEntropyGradOp::verify() {
  if (failed(verifyLabels(*this, getLogits(), getLabels())))
    return failure();
  if (shapeOf(getDloss()) != shapeOf(getLabels()))
    return emitOpError() << "dloss must have the labels' shape";
  if (getResult().getType() != getLogits().getType())
    return emitOpError() << "result type must equal the logits' type";
  return success();
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// Shared checks: logits [P..., C], positions P, stats [P..., 2].
static LogicalResult verifyVocabPieces(Operation *op, Value logits,
                                       Value labels, Value max, Value stats) {
  ArrayRef<int64_t> pos = shapeOf(max);
  auto f32 = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType().isF32();
  };
  // Logits in float32 or a 16-bit type (mixed precision: the kernels
  // compute in float32); the statistics are float32.
  auto floatLogits = [](Value v) {
    Type t = cast<RankedTensorType>(v.getType()).getElementType();
    return t.isF32() || t.isBF16() || t.isF16();
  };
  if (logits && (shapeOf(logits).size() != pos.size() + 1 ||
                 shapeOf(logits).drop_back() != pos || !floatLogits(logits)))
    return op->emitOpError() << "logits " << fmtShape(shapeOf(logits))
                             << " must be f32, bf16 or f16 with the positions "
                             << fmtShape(pos) << " and a class axis";
  if (labels && shapeOf(labels) != pos)
    return op->emitOpError()
           << "labels " << fmtShape(shapeOf(labels))
           << " must have the positions' shape " << fmtShape(pos);
  if (labels) {
    auto et = cast<RankedTensorType>(labels.getType()).getElementType();
    if (!et.isInteger(64) && !et.isInteger(32))
      return op->emitOpError() << "labels must be i32 or i64, got " << et;
  }
  if (stats) {
    SmallVector<int64_t> want(pos);
    want.push_back(2);
    if (shapeOf(stats) != ArrayRef<int64_t>(want) || !f32(stats))
      return op->emitOpError() << "stats must be f32 " << fmtShape(want)
                               << ", got " << fmtShape(shapeOf(stats));
  }
  if (!f32(max))
    return op->emitOpError() << "max must be f32";
  return success();
}

LogicalResult VocabMaxOp::verify() {
  if (failed(
          verifyVocabPieces(*this, getLogits(), Value(), getResult(), Value())))
    return failure();
  return verifyVocabShard(*this, getShardAxes(), getShardSize(),
                          shapeOf(getLogits()).back());
}

LogicalResult VocabStatsOp::verify() {
  if (failed(verifyVocabPieces(*this, getLogits(), getLabels(), getMax(),
                               getResult())))
    return failure();
  return verifyVocabShard(*this, getShardAxes(), getShardSize(),
                          shapeOf(getLogits()).back());
}

LogicalResult VocabCrossEntropyOp::verify() {
  if (failed(
          verifyVocabPieces(*this, Value(), getLabels(), getMax(), getStats())))
    return failure();
  if (getResult().getType() != getMax().getType())
    return emitOpError() << "result type must equal max's type";
  return success();
}

LogicalResult VocabCrossEntropyGradOp::verify() {
  if (failed(verifyVocabPieces(*this, getLogits(), getLabels(), getMax(),
                               getStats())))
    return failure();
  if (getDloss().getType() != getMax().getType())
    return emitOpError() << "dloss type must equal max's type";
  if (getResult().getType() != getLogits().getType())
    return emitOpError() << "result type must equal the logits' type";
  return verifyVocabShard(*this, getShardAxes(), getShardSize(),
                          shapeOf(getLogits()).back());
}

LogicalResult SoftmaxGradOp::verify() {
  if (normalizeAxis(getAxis(), rankOf(getOutput())) < 0)
    return emitOpError() << "axis " << getAxis() << " out of range for rank "
                         << rankOf(getOutput());
  if (getOutput().getType() != getGrad().getType() ||
      getOutput().getType() != getResult().getType())
    return emitOpError() << "output, grad and result types must be equal";
  return success();
}

LogicalResult LayerNormGradOp::verify() {
  if (failed(verifyNormalization(*this, getInput(), getAxis(), getScale(),
                                 Value())))
    return failure();
  if (getInput().getType() != getGrad().getType() ||
      getInput().getType() != getResult().getType())
    return emitOpError() << "input, grad and result types must be equal";
  return success();
}

LogicalResult LayerNormScaleGradOp::verify() {
  int64_t rank = rankOf(getInput());
  int64_t axis = normalizeAxis(getAxis(), rank);
  if (axis < 0)
    return emitOpError() << "axis " << getAxis() << " out of range for rank "
                         << rank;
  if (getInput().getType() != getGrad().getType())
    return emitOpError() << "input and grad types must be equal";
  if (shapeOf(getResult()) != shapeOf(getInput()).drop_front(axis))
    return emitOpError() << "result must have the normalized shape "
                         << fmtShape(shapeOf(getInput()).drop_front(axis));
  return success();
}

LogicalResult GatherGradOp::verify() {
  ArrayRef<int64_t> idx = shapeOf(getIndices()), g = shapeOf(getGrad()),
                    out = shapeOf(getResult());
  auto et = cast<RankedTensorType>(getIndices().getType()).getElementType();
  if (!et.isInteger(64) && !et.isInteger(32))
    return emitOpError() << "indices must be i32 or i64, got " << et;
  if (out.empty() || g.size() != idx.size() + out.size() - 1 ||
      g.take_front(idx.size()) != idx ||
      g.drop_front(idx.size()) != out.drop_front())
    return emitOpError() << "grad of shape " << fmtShape(g)
                         << " does not match indices " << fmtShape(idx)
                         << " gathering rows of " << fmtShape(out);
  if (getShardAxesAttr() || getShardSize())
    return verifyVocabShard(*this, getShardAxesAttr(), getShardSize(), out[0]);
  return success();
}

SmallVector<unsigned, 3> shoal::getInPlaceOperands(Operation *op) {
  if (isa<AdamWOp>(op))
    return {0, 2, 3};
  if (isa<SGDOp>(op))
    return {0, 2};
  if (isa<AssignOp>(op))
    return {0};
  return {};
}

/// In-place updates keep their state with their weight: every operand an
/// update writes is a stored weight (a value another op made, or a
/// TaskGraph's input, is a temporary that the update would write while the
/// stored weight stayed as it was), and its state has the weight's layout.
static LogicalResult verifyInPlaceOperands(Operation *op) {
  static constexpr StringLiteral kNames[] = {"weight", "grad", "exp_avg",
                                             "exp_avg_sq"};
  auto operandName = [&](unsigned i) -> StringRef {
    if (isa<SGDOp>(op) && i == 2)
      return "momentum_buffer";
    return kNames[i];
  };
  auto weight = op->getOperand(0).getDefiningOp<WeightOp>();
  auto updates = [&](InFlightDiagnostic d) {
    if (weight)
      d << "updates weight '" << weight.getName() << "' in place";
    else
      d << "updates its operand 0 in place";
    return d;
  };
  for (unsigned i : getInPlaceOperands(op)) {
    Value v = op->getOperand(i);
    Operation *def = v.getDefiningOp();
    StringRef what;
    if (def && !isa<WeightOp>(def))
      what = def->getName().getStringRef();
    else if (auto arg = dyn_cast<BlockArgument>(v);
             arg && isa<TaskGraphOp>(arg.getOwner()->getParentOp()))
      what = "an input of its TaskGraph";
    if (what.empty())
      continue;
    InFlightDiagnostic d = updates(op->emitOpError());
    d << ", but its " << operandName(i) << " (operand " << i << ") is ";
    if (def)
      d << "the result of '" << what << "'";
    else
      d << what;
    d << ", not the stored " << (i == 0 ? "weight" : "state weight")
      << ": the update would write a temporary copy";
    return d;
  }
  // The state is stored as its weight is (ZeRO 1/2, `zero_axes`, store
  // blocks of it over more axes; verified above).
  if (!weight || op->hasAttr(ShoalDialect::kZeroAxesAttr))
    return success();
  auto layout = weight->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr);
  for (unsigned i : ArrayRef(getInPlaceOperands(op)).drop_front()) {
    auto state = op->getOperand(i).getDefiningOp<WeightOp>();
    auto stateLayout =
        state ? state->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr)
              : ArrayAttr();
    if (!layout || !stateLayout || layout == stateLayout)
      continue;
    return updates(op->emitOpError())
           << ", but its " << operandName(i) << " '" << state.getName()
           << "' is laid out as " << stateLayout << " and the weight as "
           << layout
           << ": a weight's optimizer state must have the weight's layout";
  }
  return success();
}

LogicalResult shoal::verifyOptimizerOp(Operation *op) {
  if (failed(verifyInPlaceOperands(op)))
    return failure();
  Type t = op->getOperand(0).getType();
  if (auto axes = op->getAttr(ShoalDialect::kZeroAxesAttr)) {
    // ZeRO 1/2: the gradient and state are a block of dimension 0.
    auto list = dyn_cast<ArrayAttr>(axes);
    if (!list || list.empty() ||
        !llvm::all_of(list, [](Attribute a) { return isa<StringAttr>(a); }))
      return op->emitOpError() << "'" << ShoalDialect::kZeroAxesAttr
                               << "' must be a non-empty list of mesh axes";
    auto w = cast<RankedTensorType>(t);
    if (isa<AssignOp>(op) || w.getRank() == 0)
      return op->emitOpError() << "'" << ShoalDialect::kZeroAxesAttr
                               << "' needs an AdamW or SGD update of a weight "
                                  "of rank >= 1";
    for (Value v : op->getOperands().drop_front()) {
      auto b = cast<RankedTensorType>(v.getType());
      if (b.getElementType() != w.getElementType() ||
          b.getShape().drop_front() != w.getShape().drop_front() ||
          b.getDimSize(0) > w.getDimSize(0))
        return op->emitOpError()
               << "with '" << ShoalDialect::kZeroAxesAttr
               << "' every other operand must be a block of dimension 0 of "
               << t << ", got " << v.getType();
    }
  } else {
    for (Value v : op->getOperands())
      if (v.getType() != t)
        return op->emitOpError() << "every operand must have the weight's type "
                                 << t << ", got " << v.getType();
  }
  if (!cast<RankedTensorType>(t).getElementType().isF32())
    return op->emitOpError()
           << "updates f32 weights (master weights), got " << t;
  return success();
}

//===----------------------------------------------------------------------===//
// TaskGraphOp
//===----------------------------------------------------------------------===//

YieldOp TaskGraphOp::getYield() {
  return cast<YieldOp>(getBody().front().getTerminator());
}

LogicalResult TaskGraphOp::verify() {
  if (getDevices() < 1)
    return emitOpError() << "device count " << getDevices()
                         << " must be at least 1";
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError() << "body has " << body.getNumArguments()
                         << " arguments for " << getInputs().size()
                         << " inputs";
  for (auto [i, arg, in] : llvm::enumerate(body.getArguments(), getInputs()))
    if (arg.getType() != in.getType())
      return emitOpError() << "body argument " << i << " has type "
                           << arg.getType() << " but input " << i
                           << " has type " << in.getType();
  auto yield = dyn_cast<YieldOp>(body.getTerminator());
  if (!yield)
    return emitOpError() << "body must end with shoal.yield";
  if (yield.getOperandTypes() != getResultTypes())
    return emitOpError() << "yields " << yield.getNumOperands()
                         << " values whose types differ from its "
                         << getNumResults() << " results";
  if (auto mesh = getMeshAttr())
    if (mesh.getAxisSize("tp") &&
        mesh.getAxisSize("tp") != (int64_t)getDevices())
      return emitOpError() << "mesh axis 'tp' has size "
                           << mesh.getAxisSize("tp")
                           << " but the TaskGraph has " << getDevices()
                           << " devices";
  return success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

namespace {
LogicalResult verifyAxes(Operation *op, ArrayAttr axes) {
  if (axes.empty())
    return op->emitOpError() << "needs at least one mesh axis";
  return success();
}

/// all_gather grows `dim`, local_slice shrinks it; other dims stay.
LogicalResult verifyBlockOp(Operation *op, int64_t dim, ArrayAttr axes,
                            bool grows) {
  if (failed(verifyAxes(op, axes)))
    return failure();
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  ArrayRef<int64_t> out = shapeOf(op->getResult(0));
  StringRef what = grows ? "gather" : "slice";
  if (dim < 0 || dim >= (int64_t)in.size())
    return op->emitOpError()
           << what << " dim " << dim << " out of range for rank " << in.size();
  if (in.size() != out.size())
    return op->emitOpError() << "result rank " << out.size()
                             << " differs from input rank " << in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    if ((int64_t)i == dim) {
      int64_t big = grows ? out[i] : in[i], small = grows ? in[i] : out[i];
      // A slice may cut uneven (ceil-sized, zero-padded) blocks.
      if (!grows && small > big)
        return op->emitOpError() << "slice dim " << dim << " cannot grow from "
                                 << big << " to " << small;
      if (small < 0 ||
          (small == 0 ? big != 0 : (grows ? big % small != 0 : small > big)))
        return op->emitOpError() << what << " dim " << dim << ": size " << big
                                 << " is not a multiple of " << small;
    } else if (in[i] != out[i]) {
      return op->emitOpError() << "dimension " << i << " changes from " << in[i]
                               << " to " << out[i];
    }
  }
  return success();
}
} // namespace

LogicalResult AllReduceOp::verify() {
  if (getInput().getType() != getResult().getType())
    return emitOpError() << "result type must equal the input type";
  if (getReduction() != "sum" && getReduction() != "max")
    return emitOpError() << "reduction must be \"sum\" or \"max\", not \""
                         << getReduction() << "\"";
  return verifyAxes(*this, getAxes());
}

LogicalResult AllGatherOp::verify() {
  return verifyBlockOp(*this, getDim(), getAxes(), /*grows=*/true);
}

LogicalResult LocalSliceOp::verify() {
  return verifyBlockOp(*this, getDim(), getAxes(), /*grows=*/false);
}

LogicalResult ReduceScatterOp::verify() {
  return verifyBlockOp(*this, getDim(), getAxes(), /*grows=*/false);
}

LogicalResult AllToAllOp::verify() {
  if (failed(verifyAxes(*this, getAxes())))
    return failure();
  ArrayRef<int64_t> in = getInput().getType().getShape();
  ArrayRef<int64_t> out = getResult().getType().getShape();
  int64_t s = getSplitDim(), c = getConcatDim(), rank = in.size();
  if (s < 0 || s >= rank || c < 0 || c >= rank || s == c)
    return emitOpError() << "split dim " << s << " and concat dim " << c
                         << " must be two different dimensions of rank "
                         << rank;
  if ((int64_t)out.size() != rank)
    return emitOpError() << "result rank " << out.size()
                         << " differs from input rank " << rank;
  if (out[s] == 0 || in[s] % out[s] != 0 || out[c] != in[c] * (in[s] / out[s]))
    return emitOpError() << "split dim " << s << " must shrink by the factor "
                         << "concat dim " << c << " grows (" << in[s] << " -> "
                         << out[s] << ", " << in[c] << " -> " << out[c] << ")";
  for (int64_t d = 0; d < rank; ++d)
    if (d != s && d != c && in[d] != out[d])
      return emitOpError() << "dimension " << d << " changes from " << in[d]
                           << " to " << out[d];
  return success();
}

namespace {
/// A layout's sharding fits a value of `rank` dimensions on its mesh: one
/// entry per dimension, mesh axes it has, each once.
LogicalResult verifyLayouts(Operation *op, ArrayRef<LayoutAttr> layouts,
                            int64_t rank) {
  for (LayoutAttr l : layouts) {
    ShardingAttr s = l.getSharding();
    if ((int64_t)s.getDims().size() != rank)
      return op->emitOpError() << "layout sharding has " << s.getDims().size()
                               << " dimensions for a value of rank " << rank;
    for (unsigned d = 0; d < s.getDims().size(); ++d)
      for (StringRef a : s.getDimAxes(d))
        if (l.getMesh().getAxisSize(a) == 0)
          return op->emitOpError() << "layout sharding uses mesh axis '" << a
                                   << "', which its mesh does not have";
    if (l.getOffset() < 0 || l.getStride() < 0)
      return op->emitOpError() << "layout offset and stride must not be "
                                  "negative";
  }
  return success();
}
} // namespace

LogicalResult BridgeOp::verify() {
  auto in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType() ||
      in.getRank() != out.getRank())
    return emitOpError() << "changes the element type or rank (" << in << " to "
                         << out << ")";
  return verifyLayouts(*this, {getFrom(), getTo()}, in.getRank());
}

LogicalResult SendOp::verify() {
  return verifyLayouts(*this, {getFrom(), getTo()},
                       getInput().getType().getRank());
}

LogicalResult RecvOp::verify() {
  return verifyLayouts(*this, {getFrom(), getTo()},
                       getResult().getType().getRank());
}

#define GET_OP_CLASSES
#include "shoal/Dialect/Shoal/IR/ShoalOps.cpp.inc"
