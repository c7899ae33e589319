//===- ShoalOps.cpp - shoal operations, verifiers, sharding rules -*- C++ -*-=//

#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"

using namespace mlir;
using namespace shoal;

#include "shoal/Dialect/Shoal/IR/ShoalInterfaces.cpp.inc"

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

namespace {
ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
int64_t rankOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getRank();
}

/// Prints a shape as `[4, 8]` in diagnostics.
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

/// Normalizes a possibly negative axis; returns -1 if out of range.
int64_t normalizeAxis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return -1;
  return axis < 0 ? axis + rank : axis;
}

/// Numpy broadcast of `shapes`; fails if incompatible.
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

/// Maps the dimensions of `operand` to the factors of the broadcast result
/// dimensions `resultFactors` (right-aligned); size-1 dims broadcast.
TensorFactors alignBroadcast(ArrayRef<int64_t> operand,
                             ArrayRef<int64_t> result,
                             ArrayRef<int> resultFactors) {
  TensorFactors tf(operand.size());
  size_t off = result.size() - operand.size();
  for (size_t i = 0; i < operand.size(); ++i)
    if (operand[i] == result[off + i] && operand[i] != 1)
      tf[i] = {resultFactors[off + i]};
  return tf;
}
} // namespace

int64_t shoal::getTensorBytes(TypeRange types) {
  int64_t bytes = 0;
  for (Type t : types)
    if (auto rt = dyn_cast<RankedTensorType>(t))
      if (rt.hasStaticShape())
        bytes += rt.getNumElements() *
                 std::max<int64_t>(1, rt.getElementTypeBitWidth() / 8);
  return bytes;
}

bool ShardingRule::isMinorSomewhere(int factor) const {
  for (const auto *group : {&operands, &results})
    for (const TensorFactors &tf : *group)
      for (const DimFactors &df : tf)
        for (size_t i = 1; i < df.size(); ++i)
          if (df[i] == factor)
            return true;
  return false;
}

//===----------------------------------------------------------------------===//
// Elementwise and reductions
//===----------------------------------------------------------------------===//

ShardingRule shoal::getElementwiseShardingRule(Operation *op) {
  ShardingRule rule;
  ArrayRef<int64_t> result = shapeOf(op->getResult(0));
  SmallVector<int> factors;
  TensorFactors resultFactors;
  for (int64_t d : result) {
    factors.push_back(rule.addFactor(d));
    resultFactors.push_back({factors.back()});
  }
  for (Value operand : op->getOperands())
    rule.operands.push_back(alignBroadcast(shapeOf(operand), result, factors));
  rule.results.push_back(resultFactors);
  return rule;
}

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

ShardingRule shoal::getReduceShardingRule(Operation *op, ArrayRef<int64_t> axes,
                                          bool keepdims) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
  int64_t rank = in.size();
  TensorFactors inF, outF;
  for (int64_t i = 0; i < rank; ++i) {
    bool reduced = llvm::any_of(
        axes, [&](int64_t a) { return normalizeAxis(a, rank) == i; });
    // A sum over a split dimension is a sum of partial sums; a mean (or
    // anything else) needs the dimension whole.
    int f = rule.addFactor(in[i], !reduced               ? FactorKind::Parallel
                                  : isa<ReduceSumOp>(op) ? FactorKind::Reduction
                                                         : FactorKind::Blocked);
    inF.push_back({f});
    if (!reduced)
      outF.push_back({f});
    else if (keepdims)
      outF.push_back({});
  }
  rule.operands.push_back(inF);
  rule.results.push_back(outF);
  return rule;
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
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// MatMulOp
//===----------------------------------------------------------------------===//

namespace {
/// Batch, M, K, N of a numpy matmul; fails with a diagnostic.
struct MatMulDims {
  SmallVector<int64_t> batch;
  bool hasM, hasN;
  int64_t m, k, n;
};

FailureOr<MatMulDims> getMatMulDims(Operation *op, ArrayRef<int64_t> a,
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
} // namespace

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

ShardingRule MatMulOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> a = shapeOf(getLhs()), b = shapeOf(getRhs());
  MatMulDims d = *getMatMulDims(*this, a, b);
  SmallVector<int> batchF;
  TensorFactors resultF;
  for (int64_t s : d.batch) {
    batchF.push_back(rule.addFactor(s));
    resultF.push_back({batchF.back()});
  }
  int m = rule.addFactor(d.m), n = rule.addFactor(d.n);
  int k = rule.addFactor(d.k, FactorKind::Reduction);
  ArrayRef<int64_t> ab = a.drop_back(d.hasM ? 2 : 1);
  ArrayRef<int64_t> bb = b.drop_back(d.hasN ? 2 : 1);
  TensorFactors aF = alignBroadcast(ab, d.batch, batchF);
  TensorFactors bF = alignBroadcast(bb, d.batch, batchF);
  if (d.hasM) {
    aF.push_back({m});
    resultF.push_back({m});
  }
  aF.push_back({k});
  bF.push_back({k});
  if (d.hasN) {
    bF.push_back({n});
    resultF.push_back({n});
  }
  rule.operands = {aF, bF};
  rule.results = {resultF};
  return rule;
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

ShardingRule GemmOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> res = shapeOf(getResult());
  int m = rule.addFactor(res[0]), n = rule.addFactor(res[1]);
  int k = rule.addFactor(shapeOf(getA())[getTransA() ? 0 : 1],
                         FactorKind::Reduction);
  TensorFactors aF =
      getTransA() ? TensorFactors{{k}, {m}} : TensorFactors{{m}, {k}};
  TensorFactors bF =
      getTransB() ? TensorFactors{{n}, {k}} : TensorFactors{{k}, {n}};
  rule.operands = {aF, bF};
  if (getC())
    rule.operands.push_back(alignBroadcast(shapeOf(getC()), res, {m, n}));
  rule.results = {TensorFactors{{m}, {n}}};
  return rule;
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

ShardingRule SoftmaxOp::getShardingRule() {
  ShardingRule rule;
  int64_t axis = normalizeAxis(getAxis(), rankOf(getInput()));
  TensorFactors tf;
  for (auto [i, d] : llvm::enumerate(shapeOf(getInput())))
    tf.push_back({rule.addFactor(
        d, (int64_t)i == axis ? FactorKind::Blocked : FactorKind::Parallel)});
  rule.operands = {tf};
  rule.results = {tf};
  return rule;
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

/// Sharding rule of a layer normalization: `numData` operands and
/// `numResults` results shaped like `x`, whose normalized dimensions stay
/// whole, then the scale and bias.
ShardingRule normalizationRule(Value x, int64_t axisAttr, Value scale,
                               Value bias, int numData, int numResults) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(x);
  int64_t axis = normalizeAxis(axisAttr, in.size());
  TensorFactors tf;
  SmallVector<int> factors;
  for (auto [i, d] : llvm::enumerate(in)) {
    factors.push_back(rule.addFactor(
        d, (int64_t)i >= axis ? FactorKind::Blocked : FactorKind::Parallel));
    tf.push_back({factors.back()});
  }
  rule.operands.assign(numData, tf);
  for (Value v : {scale, bias})
    if (v)
      rule.operands.push_back(alignBroadcast(shapeOf(v), in, factors));
  rule.results.assign(numResults, tf);
  return rule;
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

ShardingRule LayerNormOp::getShardingRule() {
  return normalizationRule(getInput(), getAxis(), getScale(), getBias(), 1, 1);
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

ShardingRule GatherOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> data = shapeOf(getData()), idx = shapeOf(getIndices());
  int64_t axis = normalizeAxis(getAxis(), data.size());
  TensorFactors dataF, idxF, resF;
  // The rows of a table looked up along axis 0 are a vocabulary: split,
  // each rank looks up its rows (shoal-partition).
  for (auto [i, d] : llvm::enumerate(data))
    dataF.push_back({rule.addFactor(d, (int64_t)i != axis ? FactorKind::Parallel
                                       : axis == 0        ? FactorKind::Vocab
                                                   : FactorKind::Blocked)});
  for (int64_t d : idx)
    idxF.push_back({rule.addFactor(d)});
  resF.append(dataF.begin(), dataF.begin() + axis);
  resF.append(idxF.begin(), idxF.end());
  resF.append(dataF.begin() + axis + 1, dataF.end());
  rule.operands = {dataF, idxF};
  rule.results = {resF};
  return rule;
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

ShardingRule ReshapeOp::getShardingRule() {
  // Groups of input and output dimensions with equal products share factors:
  // a split dimension is made of the factors of the dimensions it splits
  // into (major first), and a merged dimension of the factors it merges.
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput()), out = shapeOf(getResult());
  TensorFactors inF(in.size()), outF(out.size());
  size_t i = 0, j = 0;
  while (i < in.size() || j < out.size()) {
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (j < out.size() && out[j] == 1) {
      ++j;
      continue;
    }
    if (i >= in.size() || j >= out.size())
      break;
    SmallVector<size_t> gi{i}, gj{j};
    int64_t pi = in[i++], pj = out[j++];
    while (pi != pj) {
      if (pi < pj && i < in.size()) {
        gi.push_back(i);
        pi *= in[i++];
      } else if (pj < pi && j < out.size()) {
        gj.push_back(j);
        pj *= out[j++];
      } else {
        break;
      }
    }
    // Factor the group into sizes that each lie whole in one input and one
    // output dimension (Shardy's compound factors): walking both sides
    // major first, the smaller remainder divides the larger. [B, H*D] ->
    // [B*H, D] gives B, H, D, so a batch split of B survives as the major
    // factor of B*H. Sizes that do not divide (6x4 -> 4x6) stay whole.
    struct Common {
      int64_t size;
      size_t inDim, outDim;
    };
    SmallVector<Common> common;
    bool divides = true;
    size_t a = 0, c = 0;
    int64_t ra = in[gi[0]], rc = out[gj[0]];
    while (a < gi.size() && c < gj.size()) {
      if (ra == 1) {
        if (++a < gi.size())
          ra = in[gi[a]];
        continue;
      }
      if (rc == 1) {
        if (++c < gj.size())
          rc = out[gj[c]];
        continue;
      }
      int64_t f = ra % rc == 0 ? rc : rc % ra == 0 ? ra : 0;
      if (f == 0) {
        divides = false;
        break;
      }
      common.push_back({f, gi[a], gj[c]});
      ra /= f;
      rc /= f;
    }
    if (divides) {
      for (const Common &k : common) {
        int f = rule.addFactor(k.size);
        inF[k.inDim].push_back(f);
        outF[k.outDim].push_back(f);
      }
    } else {
      for (size_t d : gi)
        if (in[d] != 1)
          inF[d].push_back(rule.addFactor(in[d], FactorKind::Blocked));
      for (size_t d : gj)
        if (out[d] != 1)
          outF[d].push_back(rule.addFactor(out[d], FactorKind::Blocked));
    }
  }
  rule.operands = {inF};
  rule.results = {outF};
  return rule;
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

ShardingRule TransposeOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput());
  TensorFactors inF, outF;
  for (int64_t d : in)
    inF.push_back({rule.addFactor(d)});
  for (int64_t p : getPerm())
    outF.push_back(inF[p]);
  rule.operands = {inF};
  rule.results = {outF};
  return rule;
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

namespace {

/// Every dimension of every operand and result gets its own blocked factor.
void blockEverything(ShardingRule &rule, Operation *op, size_t firstOperand = 0,
                     size_t firstResult = 0) {
  for (size_t k = firstOperand; k < op->getNumOperands(); ++k) {
    TensorFactors &tf = rule.operands[k];
    tf.clear();
    for (int64_t d : shapeOf(op->getOperand(k)))
      tf.push_back({rule.addFactor(d, FactorKind::Blocked)});
  }
  for (size_t k = firstResult; k < op->getNumResults(); ++k) {
    TensorFactors &tf = rule.results[k];
    tf.clear();
    for (int64_t d : shapeOf(op->getResult(k)))
      tf.push_back({rule.addFactor(d, FactorKind::Blocked)});
  }
}

/// Tensors whose dimensions match outside `axis` share those as parallel
/// factors; `axis` (and any dimension whose sizes differ) stays whole.
void shareOutsideAxis(ShardingRule &rule, Operation *op, int64_t axis) {
  SmallVector<Value> all(op->getOperands());
  all.append(op->getResults().begin(), op->getResults().end());
  ArrayRef<int64_t> ref = shapeOf(op->getResult(0));
  int64_t rank = ref.size();
  SmallVector<int> shared(rank, -1);
  for (int64_t d = 0; d < rank; ++d) {
    if (d == axis)
      continue;
    bool same = llvm::all_of(all, [&](Value v) {
      return rankOf(v) == rank && shapeOf(v)[d] == ref[d];
    });
    if (same)
      shared[d] = rule.addFactor(ref[d]);
  }
  auto factorsOf = [&](Value v) {
    TensorFactors tf;
    for (auto [d, size] : llvm::enumerate(shapeOf(v)))
      tf.push_back({(int64_t)d < rank && shared[d] >= 0 && rankOf(v) == rank
                        ? shared[d]
                        : rule.addFactor(size, FactorKind::Blocked)});
    return tf;
  };
  for (Value v : op->getOperands())
    rule.operands.push_back(factorsOf(v));
  for (Value v : op->getResults())
    rule.results.push_back(factorsOf(v));
}

/// Conv, its gradients, the pools and inference-mode BatchNormalization on
/// [N, C, spatial...]: samples are independent, and so are channels, except
/// where a Conv sums over them. With `group` = 1 a Conv's input channels C
/// are a contraction and its output channels M a parallel factor (its
/// weight's dimension 0: Megatron's column split); ConvInputGrad swaps the
/// two and ConvWeightGrad sums over the batch. With `group` > 1 the
/// channels are [group, C / group] and only the groups may be split (each
/// rank then runs `group / n` whole groups; shoal-partition localizes the
/// attribute). Space (and kernel) dimensions stay whole: a block of an
/// image would need its neighbours' borders. Fails when the shapes do not
/// fit that pattern (the caller falls back to batch-only).
LogicalResult getChannelShardingRule(OnnxOp onnx, ShardingRule &rule) {
  Operation *op = onnx.getOperation();
  StringRef type = onnx.getOpType();
  bool conv = type == "Conv", inGrad = type == "ConvInputGrad",
       wGrad = type == "ConvWeightGrad";
  bool pool = llvm::is_contained({"MaxPool", "AveragePool", "GlobalAveragePool",
                                  "GlobalMaxPool", "MaxPoolGrad",
                                  "AveragePoolGrad", "BatchNormalization"},
                                 type);
  if (!conv && !inGrad && !wGrad && !pool)
    return failure();
  int64_t rank = rankOf(op->getOperand(0));
  if (rank < 3)
    return failure();
  ArrayRef<int64_t> x = shapeOf(op->getOperand(0));
  auto isImage = [&](Value v) {
    return rankOf(v) == rank && shapeOf(v)[0] == x[0];
  };
  // Every dimension blocked first; the batch and channels are then shared.
  blockEverything(rule, op);
  if (pool) {
    int64_t c = x[1];
    int batch = rule.addFactor(x[0]);
    int chan = rule.addFactor(c);
    auto setImage = [&](TensorFactors &tf, Value v) {
      if (!isImage(v) || shapeOf(v)[1] != c)
        return false;
      tf[0] = {batch};
      tf[1] = {chan};
      return true;
    };
    for (auto [k, v] : llvm::enumerate(op->getOperands())) {
      if (setImage(rule.operands[k], v))
        continue;
      // BatchNormalization's scale, bias, mean and variance.
      if (type != "BatchNormalization" || rankOf(v) != 1 || shapeOf(v)[0] != c)
        return failure();
      rule.operands[k][0] = {chan};
    }
    for (auto [k, v] : llvm::enumerate(op->getResults())) {
      if (setImage(rule.results[k], v))
        continue;
      if (type != "BatchNormalization" || rankOf(v) != 1 || shapeOf(v)[0] != c)
        return failure();
      rule.results[k][0] = {chan};
    }
    return success();
  }
  int64_t group = 1;
  if (auto g = onnx.getOnnxAttrs().getAs<IntegerAttr>("group"))
    group = g.getInt();
  // X, W and Y (dy) of the Conv, whichever op of the family this is.
  Value xv = op->getOperand(0);
  Value wv = conv || inGrad ? op->getOperand(1) : op->getResult(0);
  Value yv = conv ? op->getResult(0) : op->getOperands().back();
  if (group < 1 || !isImage(yv) || rankOf(wv) != rank ||
      (conv && op->getNumOperands() > 3) ||
      (inGrad && !isImage(op->getResult(0))))
    return failure();
  int64_t c = x[1], m = shapeOf(wv)[0];
  if (c % group != 0 || m % group != 0 || shapeOf(wv)[1] * group != c ||
      shapeOf(yv)[1] != m)
    return failure();
  int batch = rule.addFactor(x[0], wGrad ? FactorKind::Reduction
                                         : FactorKind::Parallel);
  DimFactors xc, wm, wc;
  if (group == 1) {
    int cin =
        rule.addFactor(c, conv ? FactorKind::Reduction : FactorKind::Parallel);
    int cout = rule.addFactor(m, inGrad ? FactorKind::Reduction
                                        : FactorKind::Parallel);
    xc = {cin};
    wc = {cin};
    wm = {cout};
  } else {
    int g = rule.addFactor(group);
    xc = {g};
    wm = {g};
    if (c / group > 1) {
      int cin = rule.addFactor(c / group, FactorKind::Blocked);
      xc.push_back(cin);
      wc = {cin};
    } else {
      wc = {rule.addFactor(1, FactorKind::Blocked)};
    }
    if (m / group > 1)
      wm.push_back(rule.addFactor(m / group, FactorKind::Blocked));
  }
  auto place = [&](Value v, DimFactors batchF, DimFactors chanF) {
    TensorFactors *tf = nullptr;
    for (auto [k, o] : llvm::enumerate(op->getOperands()))
      if (o == v)
        tf = &rule.operands[k];
    for (auto [k, r] : llvm::enumerate(op->getResults()))
      if (r == v)
        tf = &rule.results[k];
    (*tf)[0] = batchF;
    (*tf)[1] = chanF;
  };
  place(xv, {batch}, xc);
  place(wv, wm, wc);
  place(yv, {batch}, wm);
  if (inGrad)
    place(op->getResult(0), {batch}, xc);
  if (conv && op->getNumOperands() == 3) {
    if (rankOf(op->getOperand(2)) != 1 || shapeOf(op->getOperand(2))[0] != m)
      return failure();
    rule.operands[2][0] = wm;
  }
  return success();
}
} // namespace

/// A rule for a one-operand op of the result's rank whose dimensions
/// either pass through unchanged (`same(d)`: one factor for both sides)
/// or are rewritten whole (Tile's repeats, Resize's scaled dimensions).
static ShardingRule passUnchangedDims(Operation *op,
                                      function_ref<bool(int64_t)> same) {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(op->getOperand(0)),
                    out = shapeOf(op->getResult(0));
  TensorFactors inF, outF;
  for (int64_t d = 0, e = in.size(); d < e; ++d) {
    if (same(d)) {
      int f = rule.addFactor(in[d]);
      inF.push_back({f});
      outF.push_back({f});
    } else {
      inF.push_back({rule.addFactor(in[d], FactorKind::Blocked)});
      outF.push_back({rule.addFactor(out[d], FactorKind::Blocked)});
    }
  }
  rule.operands.push_back(inF);
  rule.results.push_back(outF);
  return rule;
}

ShardingRule OnnxOp::getShardingRule() {
  ShardingRule rule;
  StringRef type = getOpType();
  Operation *op = getOperation();
  rule.operands.resize(op->getNumOperands());
  rule.results.resize(op->getNumResults());
  int64_t rank = rankOf(op->getResult(0));
  if (succeeded(getChannelShardingRule(*this, rule)))
    return rule;
  rule = ShardingRule();
  rule.operands.resize(op->getNumOperands());
  rule.results.resize(op->getNumResults());
  if (llvm::is_contained({"Conv", "BatchNormalization", "MaxPool",
                          "AveragePool", "GlobalAveragePool", "GlobalMaxPool"},
                         type) &&
      rank > 0 && rankOf(op->getOperand(0)) == rank &&
      shapeOf(op->getOperand(0))[0] == shapeOf(op->getResult(0))[0]) {
    // Batch-major: samples are independent; channels and space stay whole.
    blockEverything(rule, op);
    int batch = rule.addFactor(shapeOf(op->getResult(0))[0]);
    rule.operands[0][0] = {batch};
    for (TensorFactors &tf : rule.results)
      tf[0] = {batch};
    return rule;
  }
  if (llvm::is_contained(
          {"ConvInputGrad", "MaxPoolGrad", "AveragePoolGrad", "ConvWeightGrad"},
          type) &&
      op->getNumOperands() >= 2 && rankOf(op->getOperand(0)) > 0) {
    // Gradients of the batch-major ops (operand 0 is the forward's X, the
    // last dy): dX is per sample; ConvWeightGrad sums over the batch, which
    // a split leaves as partial sums (the data-parallel all-reduce).
    blockEverything(rule, op);
    Value dy = op->getOperands().back();
    int64_t n = shapeOf(op->getOperand(0))[0];
    if (rankOf(dy) > 0 && shapeOf(dy)[0] == n) {
      bool weight = type == "ConvWeightGrad";
      int batch = rule.addFactor(n, weight ? FactorKind::Reduction
                                           : FactorKind::Parallel);
      rule.operands[0][0] = {batch};
      rule.operands[op->getNumOperands() - 1][0] = {batch};
      if (!weight)
        rule.results[0][0] = {batch};
    }
    return rule;
  }
  if (type == "Split" && op->getNumOperands() == 1 && op->getNumResults() > 1) {
    // Equal pieces: the split axis is [pieces, P], each result's axis the
    // factor P, so a split of P in every piece (a strided split with
    // `pieces` runs, as a fused q/k/v projection split by heads has) gives
    // every result a plain split.
    int64_t axis = getOnnxAxis(*this, rank, 0);
    int64_t size = shapeOf(op->getOperand(0))[axis];
    int64_t piece = shapeOf(op->getResult(0))[axis];
    int64_t n = op->getNumResults();
    bool equal =
        piece * n == size && llvm::all_of(op->getResults(), [&](Value r) {
          return rankOf(r) == rank && shapeOf(r)[axis] == piece;
        });
    if (equal) {
      rule.operands.clear();
      rule.results.clear();
      shareOutsideAxis(rule, op, axis);
      int pieces = rule.addFactor(n, FactorKind::Blocked);
      int p = rule.addFactor(piece);
      rule.operands[0][axis] = {pieces, p};
      for (TensorFactors &tf : rule.results)
        tf[axis] = {p};
      return rule;
    }
  }
  if (type == "Slice" && op->getNumOperands() == 1) {
    // One piece of equal pieces along one axis, unit steps: the axis is
    // [pieces, P] and the result's axis is P, as for Split.
    auto starts = getOnnxAttrs().getAs<DenseI64ArrayAttr>("starts");
    auto ends = getOnnxAttrs().getAs<DenseI64ArrayAttr>("ends");
    auto axes = getOnnxAttrs().getAs<DenseI64ArrayAttr>("axes");
    auto steps = getOnnxAttrs().getAs<DenseI64ArrayAttr>("steps");
    if (starts && ends && axes && starts.size() == 1 && ends.size() == 1 &&
        axes.size() == 1 && (!steps || (steps.size() == 1 && steps[0] == 1))) {
      int64_t axis = normalizeAxis(axes[0], rank);
      ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
      int64_t piece = shapeOf(op->getResult(0))[axis];
      int64_t start = starts[0] < 0 ? starts[0] + in[axis] : starts[0];
      if (piece > 0 && in[axis] % piece == 0 && start >= 0 &&
          start % piece == 0 && start + piece <= in[axis] &&
          in[axis] / piece > 1) {
        rule.operands.clear();
        rule.results.clear();
        TensorFactors inF, outF;
        for (int64_t d = 0; d < rank; ++d) {
          if (d == axis) {
            int pieces = rule.addFactor(in[d] / piece, FactorKind::Blocked);
            int p = rule.addFactor(piece);
            inF.push_back({pieces, p});
            outF.push_back({p});
          } else {
            int f = rule.addFactor(in[d]);
            inF.push_back({f});
            outF.push_back({f});
          }
        }
        rule.operands.push_back(inF);
        rule.results.push_back(outF);
        return rule;
      }
    }
  }
  if (llvm::is_contained(
          {"Concat", "Split", "TopK", "GatherElements", "ScatterElements"},
          type)) {
    rule.operands.clear();
    rule.results.clear();
    shareOutsideAxis(rule, op,
                     getOnnxAxis(*this, rank, type == "TopK" ? -1 : 0));
    return rule;
  }
  if (type == "Slice") {
    // Sliced axes stay whole; the others pass through.
    rule.operands.clear();
    rule.results.clear();
    SmallVector<int64_t> axes;
    if (auto a = getOnnxAttrs().getAs<DenseI64ArrayAttr>("axes"))
      axes.assign(a.asArrayRef().begin(), a.asArrayRef().end());
    else
      for (int64_t d = 0; d < rank; ++d)
        axes.push_back(d);
    ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
    TensorFactors inF, outF;
    for (int64_t d = 0; d < rank; ++d) {
      bool sliced = llvm::any_of(
          axes, [&](int64_t a) { return normalizeAxis(a, rank) == d; });
      if (sliced) {
        inF.push_back({rule.addFactor(in[d], FactorKind::Blocked)});
        outF.push_back({rule.addFactor(shapeOf(op->getResult(0))[d],
                                       FactorKind::Blocked)});
      } else {
        int f = rule.addFactor(in[d]);
        inF.push_back({f});
        outF.push_back({f});
      }
    }
    rule.operands.push_back(inF);
    rule.results.push_back(outF);
    return rule;
  }
  if (type == "Pad" && op->getNumOperands() == 1) {
    // Padded dimensions stay whole; the others pass through.
    rule.operands.clear();
    rule.results.clear();
    ArrayRef<int64_t> in = shapeOf(op->getOperand(0)),
                      out = shapeOf(op->getResult(0));
    SmallVector<int64_t> axes, pads;
    if (auto p = getOnnxAttrs().getAs<DenseI64ArrayAttr>("pads"))
      pads.assign(p.asArrayRef().begin(), p.asArrayRef().end());
    if (auto a = getOnnxAttrs().getAs<DenseI64ArrayAttr>("axes"))
      for (int64_t x : a.asArrayRef())
        axes.push_back(normalizeAxis(x, rank));
    else
      for (int64_t d = 0; d < rank; ++d)
        axes.push_back(d);
    SmallVector<bool> padded(rank, false);
    size_t n = axes.size();
    for (size_t k = 0; k < n && k + n < pads.size(); ++k)
      if (pads[k] != 0 || pads[k + n] != 0)
        padded[axes[k]] = true;
    // Constant (zero) padding that puts the input as one of equal pieces
    // (the gradient of a Slice of one piece): the output's axis is
    // [pieces, P] like the Slice's input, so a split of P survives (a
    // strided split with `pieces` runs).
    auto mode = getOnnxAttrs().getAs<StringAttr>("mode");
    bool zeros = (!mode || mode.getValue() == "constant") &&
                 !getOnnxAttrs().get("value");
    auto onePiece = [&](int64_t d) -> bool {
      if (!zeros || in[d] <= 0 || out[d] % in[d] != 0 || out[d] == in[d])
        return false;
      for (size_t k = 0; k < n && k + n < pads.size(); ++k)
        if (axes[k] == d && (pads[k] < 0 || pads[k + n] < 0 ||
                             pads[k] % in[d] != 0 || pads[k + n] % in[d] != 0))
          return false;
      return true;
    };
    TensorFactors inF, outF;
    for (int64_t d = 0; d < rank; ++d) {
      if (padded[d] && onePiece(d)) {
        int p = rule.addFactor(in[d]);
        inF.push_back({p});
        outF.push_back(
            {rule.addFactor(out[d] / in[d], FactorKind::Blocked), p});
      } else if (padded[d] || in[d] != out[d]) {
        inF.push_back({rule.addFactor(in[d], FactorKind::Blocked)});
        outF.push_back({rule.addFactor(out[d], FactorKind::Blocked)});
      } else {
        int f = rule.addFactor(in[d]);
        inF.push_back({f});
        outF.push_back({f});
      }
    }
    rule.operands.push_back(inF);
    rule.results.push_back(outF);
    return rule;
  }
  if (type == "Expand" && op->getNumOperands() == 1)
    return getElementwiseShardingRule(op);
  if (type == "Tile" && op->getNumOperands() == 1 &&
      rankOf(op->getOperand(0)) == rank) {
    // Dimensions repeated once pass through; tiled ones stay whole (a
    // block of the result is not the tile of a block of the input).
    ArrayRef<int64_t> in = shapeOf(op->getOperand(0)),
                      out = shapeOf(op->getResult(0));
    return passUnchangedDims(op, [&](int64_t d) { return in[d] == out[d]; });
  }
  if ((type == "Resize" || type == "ResizeGrad") && op->getNumOperands() == 1 &&
      rankOf(op->getOperand(0)) == rank) {
    // A dimension that is not resized (same size, scale 1) passes through:
    // its coordinates map to themselves under every transform but
    // tf_half_pixel_for_nn (whose ceil modes look one element ahead). The
    // resized ones stay whole: a block of the output reads input elements
    // from outside the matching block of the input.
    ArrayRef<int64_t> in = shapeOf(op->getOperand(0)),
                      out = shapeOf(op->getResult(0));
    SmallVector<float> scales;
    if (auto s = getOnnxAttrs().getAs<DenseF32ArrayAttr>("scales"))
      scales.assign(s.asArrayRef().begin(), s.asArrayRef().end());
    auto transform =
        getOnnxAttrs().getAs<StringAttr>("coordinate_transformation_mode");
    bool shifts = transform && transform.getValue() == "tf_half_pixel_for_nn";
    return passUnchangedDims(op, [&](int64_t d) {
      return in[d] == out[d] && !shifts &&
             (scales.size() != static_cast<size_t>(rank) || scales[d] == 1.0f);
    });
  }
  if (type == "OneHot" && op->getNumOperands() == 2 &&
      rankOf(op->getOperand(0)) + 1 == rank) {
    // Every index gives its own row: the indices' dimensions pass through,
    // the new one (depth) and the values stay whole.
    blockEverything(rule, op);
    int64_t axis = getOnnxAxis(*this, rank, -1);
    ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
    for (int64_t d = 0, o = 0; d < rank - 1; ++d, ++o) {
      if (o == axis)
        ++o;
      int f = rule.addFactor(in[d]);
      rule.operands[0][d] = {f};
      rule.results[0][o] = {f};
    }
    return rule;
  }
  if (llvm::is_contained({"HardSigmoid", "HardSwish", "Mod"}, type))
    return getElementwiseShardingRule(op);
  if ((type == "ArgMax" || type == "ArgMin") && op->getNumOperands() == 1) {
    // The reduced axis stays whole (an index into a block would be wrong);
    // the other dimensions pass through.
    rule.operands.clear();
    rule.results.clear();
    ArrayRef<int64_t> in = shapeOf(op->getOperand(0));
    int64_t inRank = in.size();
    int64_t axis = getOnnxAxis(*this, inRank, 0);
    bool keep = true;
    if (auto k = getOnnxAttrs().getAs<IntegerAttr>("keepdims"))
      keep = k.getInt() != 0;
    TensorFactors inF, outF;
    for (int64_t d = 0; d < inRank; ++d) {
      if (d == axis) {
        inF.push_back({rule.addFactor(in[d], FactorKind::Blocked)});
        if (keep)
          outF.push_back({rule.addFactor(1, FactorKind::Blocked)});
        continue;
      }
      int f = rule.addFactor(in[d]);
      inF.push_back({f});
      outF.push_back({f});
    }
    if (axis < 0 || (int64_t)outF.size() != rank) {
      rule.operands.assign(1, {});
      rule.results.assign(1, {});
      blockEverything(rule, op);
      return rule;
    }
    rule.operands.push_back(inF);
    rule.results.push_back(outF);
    return rule;
  }
  // Anything else: computed whole on every rank.
  blockEverything(rule, op);
  return rule;
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

ShardingRule GeluOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
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

ShardingRule GeluGradOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}

LogicalResult AddLayerNormOp::verify() {
  Type t = getLhs().getType();
  if (getRhs().getType() != t || getSum().getType() != t ||
      getResult().getType() != t)
    return emitOpError() << "operands and results must all have type " << t;
  return verifyNormalization(*this, getLhs(), getAxis(), getScale(), getBias());
}

ShardingRule AddLayerNormOp::getShardingRule() {
  return normalizationRule(getLhs(), getAxis(), getScale(), getBias(), 2, 2);
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

/// The factors of attention over q [.., T, D], kt [.., D, S], v [.., S, E]:
/// the batch dimensions (parallel), then t, d, sk and e, of which d and sk
/// are always whole (contracted; softmax's axis) and t and e parallel
/// unless `gradient` (the gradient sums over the queries in dkt and dv and
/// over e in dP).
struct AttentionFactors {
  ShardingRule rule;
  SmallVector<int> batch;
  int t, d, sk, e;

  AttentionFactors(Value qv, Value ktv, Value vv, bool gradient) {
    ArrayRef<int64_t> q = shapeOf(qv), kt = shapeOf(ktv), v = shapeOf(vv);
    size_t r = q.size();
    for (size_t i = 0; i + 2 < r; ++i)
      batch.push_back(rule.addFactor(q[i]));
    FactorKind free = gradient ? FactorKind::Blocked : FactorKind::Parallel;
    t = rule.addFactor(q[r - 2], free);
    d = rule.addFactor(q[r - 1], FactorKind::Blocked);
    sk = rule.addFactor(kt[r - 1], FactorKind::Blocked);
    e = rule.addFactor(v[r - 1], free);
  }
  /// A [.., a, b] tensor's factors.
  TensorFactors with(int a, int b) const {
    TensorFactors tf;
    for (int f : batch)
      tf.push_back({f});
    tf.push_back({a});
    tf.push_back({b});
    return tf;
  }
  /// The mask's factors, broadcast to the scores [.., T, S].
  TensorFactors mask(Value m, Value qv, Value ktv) const {
    SmallVector<int64_t> scores(shapeOf(qv).drop_back(1));
    scores.push_back(shapeOf(ktv).back());
    SmallVector<int> sf(batch.begin(), batch.end());
    sf.push_back(t);
    sf.push_back(sk);
    return alignBroadcast(shapeOf(m), scores, sf);
  }
};
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

ShardingRule AttentionOp::getShardingRule() {
  // Batch dimensions and queries split freely; the head dimension and the
  // keys stay whole (softmax over keys), the value dimension splits.
  AttentionFactors f(getQ(), getKt(), getV(), /*gradient=*/false);
  f.rule.operands = {f.with(f.t, f.d), f.with(f.d, f.sk), f.with(f.sk, f.e)};
  if (getMask())
    f.rule.operands.push_back(f.mask(getMask(), getQ(), getKt()));
  f.rule.results = {f.with(f.t, f.e)};
  return f.rule;
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

ShardingRule AttentionGradOp::getShardingRule() {
  // Only the batch dimensions split: the queries are summed over in dkt
  // and dv, the value dimension in dP, and the keys are softmax's axis.
  AttentionFactors f(getQ(), getKt(), getV(), /*gradient=*/true);
  f.rule.operands = {f.with(f.t, f.e), f.with(f.t, f.d), f.with(f.d, f.sk),
                     f.with(f.sk, f.e)};
  if (getMask())
    f.rule.operands.push_back(f.mask(getMask(), getQ(), getKt()));
  f.rule.results = {f.with(f.t, f.d), f.with(f.d, f.sk), f.with(f.sk, f.e)};
  return f.rule;
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

/// Factors of a loss over `logits` [..., V]: the positions are parallel, the
/// class axis a vocabulary (split, shoal-partition makes the loss
/// vocabulary-parallel).
ShardingRule crossEntropyRule(Value logits, int numPositionOperands,
                              bool gradResult) {
  ShardingRule rule;
  ArrayRef<int64_t> l = shapeOf(logits);
  TensorFactors pos, full;
  for (int64_t d : l.drop_back())
    pos.push_back({rule.addFactor(d)});
  full = pos;
  full.push_back({rule.addFactor(l.back(), FactorKind::Vocab)});
  rule.operands.push_back(full);
  for (int i = 0; i < numPositionOperands; ++i)
    rule.operands.push_back(pos);
  rule.results.push_back(gradResult ? full : pos);
  return rule;
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

ShardingRule SoftmaxCrossEntropyOp::getShardingRule() {
  return crossEntropyRule(getLogits(), 1, false);
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

ShardingRule SoftmaxCrossEntropyGradOp::getShardingRule() {
  return crossEntropyRule(getLogits(), 2, true);
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

ShardingRule shoal::getVocabShardingRule(Operation *op) {
  // Operands and results are [positions..., classes], [positions...] or
  // [positions..., 2]: the positions are one set of parallel factors.
  ShardingRule rule;
  ArrayRef<int64_t> pos = isa<VocabMaxOp, VocabCrossEntropyOp>(op)
                              ? shapeOf(op->getResult(0))
                              : shapeOf(op->getOperand(1));
  TensorFactors posF;
  for (int64_t d : pos)
    posF.push_back({rule.addFactor(d)});
  auto factorsOf = [&](Value v) {
    TensorFactors tf = posF;
    ArrayRef<int64_t> shape = shapeOf(v);
    for (int64_t d : shape.drop_front(pos.size()))
      tf.push_back({rule.addFactor(d, FactorKind::Blocked)});
    return tf;
  };
  for (Value v : op->getOperands())
    rule.operands.push_back(factorsOf(v));
  for (Value v : op->getResults())
    rule.results.push_back(factorsOf(v));
  return rule;
}

/// Shared checks: logits [P..., C], positions P, stats [P..., 2].
static LogicalResult verifyVocabPieces(Operation *op, Value logits,
                                       Value labels, Value max, Value stats) {
  ArrayRef<int64_t> pos = shapeOf(max);
  auto f32 = [](Value v) {
    return cast<RankedTensorType>(v.getType()).getElementType().isF32();
  };
  if (logits && (shapeOf(logits).size() != pos.size() + 1 ||
                 shapeOf(logits).drop_back() != pos || !f32(logits)))
    return op->emitOpError() << "logits " << fmtShape(shapeOf(logits))
                             << " must be f32 with the positions "
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

ShardingRule VocabCrossEntropyOp::getShardingRule() {
  return getVocabShardingRule(getOperation());
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

ShardingRule SoftmaxGradOp::getShardingRule() {
  ShardingRule rule;
  int64_t axis = normalizeAxis(getAxis(), rankOf(getOutput()));
  TensorFactors tf;
  for (auto [i, d] : llvm::enumerate(shapeOf(getOutput())))
    tf.push_back({rule.addFactor(
        d, (int64_t)i == axis ? FactorKind::Blocked : FactorKind::Parallel)});
  rule.operands = {tf, tf};
  rule.results = {tf};
  return rule;
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

ShardingRule LayerNormGradOp::getShardingRule() {
  ShardingRule rule =
      normalizationRule(getInput(), getAxis(), getScale(), Value(), 1, 1);
  // Operands are (input, scale, grad); the grad is laid out as the input.
  rule.operands.push_back(rule.operands.front());
  return rule;
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

ShardingRule LayerNormScaleGradOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> in = shapeOf(getInput());
  int64_t axis = normalizeAxis(getAxis(), in.size());
  TensorFactors tf, res;
  for (auto [i, d] : llvm::enumerate(in)) {
    bool normalized = (int64_t)i >= axis;
    tf.push_back({rule.addFactor(d, normalized ? FactorKind::Blocked
                                               : FactorKind::Reduction)});
    if (normalized)
      res.push_back(tf.back());
  }
  rule.operands = {tf, tf};
  rule.results = {res};
  return rule;
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

ShardingRule GatherGradOp::getShardingRule() {
  ShardingRule rule;
  ArrayRef<int64_t> idx = shapeOf(getIndices()), out = shapeOf(getResult());
  TensorFactors idxF, gF, outF;
  for (int64_t d : idx)
    idxF.push_back({rule.addFactor(d, FactorKind::Reduction)});
  outF.push_back({rule.addFactor(out[0], FactorKind::Vocab)});
  gF = idxF;
  for (int64_t d : out.drop_front()) {
    outF.push_back({rule.addFactor(d)});
    gF.push_back(outF.back());
  }
  rule.operands = {idxF, gF};
  rule.results = {outF};
  return rule;
}

ShardingRule shoal::getOptimizerShardingRule(Operation *op) {
  ShardingRule rule;
  TensorFactors tf;
  for (int64_t d : shapeOf(op->getOperand(0)))
    tf.push_back({rule.addFactor(d)});
  rule.operands.assign(op->getNumOperands(), tf);
  return rule;
}

LogicalResult shoal::verifyOptimizerOp(Operation *op) {
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
