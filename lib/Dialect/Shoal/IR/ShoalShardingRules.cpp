//===- ShoalShardingRules.cpp - The ops' sharding rules ---------*- C++ -*-===//
//
// Every op's sharding rule (ShardingRuleOpInterface; as Shardy's
// op_sharding_rule_registry.cc): the factors of its operands' and results'
// dimensions and how each may be split (ShardingRule.h). The ops' verifiers
// are in ShoalOps.cpp. shoal-opt --shoal-test-print-sharding-rules prints
// them (test/Dialect/Shoal/sharding-rules-*.mlir).
//
//===----------------------------------------------------------------------===//

#include "ShoalOpsUtils.h"
#include "shoal/Dialect/Shoal/IR/ShoalOps.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;
using namespace shoal;
using namespace shoal::detail;

namespace {
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

//===----------------------------------------------------------------------===//
// ShardingRule
//===----------------------------------------------------------------------===//

namespace {
/// Shardy's factor names: i, j, ..., z, then z_1, z_2, ...
std::string factorName(int factor) {
  if (factor <= 'z' - 'i')
    return std::string(1, static_cast<char>('i' + factor));
  return "z_" + std::to_string(factor - ('z' - 'i'));
}
} // namespace

void ShardingRule::print(llvm::raw_ostream &os) const {
  auto printTensors = [&](ArrayRef<TensorFactors> tensors) {
    os << "(";
    llvm::interleaveComma(tensors, os, [&](const TensorFactors &tf) {
      os << "[";
      llvm::interleaveComma(tf, os, [&](const DimFactors &df) {
        if (df.empty())
          os << "1";
        for (int f : df)
          os << factorName(f);
      });
      os << "]";
    });
    os << ")";
  };
  printTensors(operands);
  os << " -> ";
  printTensors(results);
  os << " {";
  for (unsigned f = 0; f < getNumFactors(); ++f)
    os << (f ? ", " : "") << factorName(f) << "=" << factorSizes[f];
  os << "}";
  for (auto [kind, name] : {std::pair{FactorKind::Reduction, "reduction"},
                            std::pair{FactorKind::Blocked, "blocked"},
                            std::pair{FactorKind::Vocab, "vocab"}}) {
    SmallVector<std::string> names;
    for (unsigned f = 0; f < getNumFactors(); ++f)
      if (factorKinds[f] == kind)
        names.push_back(factorName(f));
    if (!names.empty())
      os << " " << name << "={" << llvm::join(names, ", ") << "}";
  }
}

std::string ShardingRule::str() const {
  std::string s;
  llvm::raw_string_ostream os(s);
  print(os);
  return s;
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
// Elementwise, reductions, optimizer updates
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

ShardingRule shoal::getOptimizerShardingRule(Operation *op) {
  ShardingRule rule;
  TensorFactors tf;
  for (int64_t d : shapeOf(op->getOperand(0)))
    tf.push_back({rule.addFactor(d)});
  rule.operands.assign(op->getNumOperands(), tf);
  return rule;
}

//===----------------------------------------------------------------------===//
// MatMulOp / GemmOp
//===----------------------------------------------------------------------===//

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

//===----------------------------------------------------------------------===//
// SoftmaxOp / LayerNormOp
//===----------------------------------------------------------------------===//

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

ShardingRule LayerNormOp::getShardingRule() {
  return normalizationRule(getInput(), getAxis(), getScale(), getBias(), 1, 1);
}

//===----------------------------------------------------------------------===//
// GatherOp
//===----------------------------------------------------------------------===//

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

/// Split's rule (`wholeIsOperand`: one operand cut into equal results) or
/// Concat's (equal operands joined into one result) along `axis`: the whole
/// tensor's axis is [pieces, P] and each piece's axis P, so that a split of
/// P in every piece (a fused q/k/v projection split by heads) is a strided
/// split of the whole. Fails, leaving `rule` as it was, when the pieces are
/// not equal.
static LogicalResult equalPiecesRule(ShardingRule &rule, Operation *op,
                                     int64_t axis, bool wholeIsOperand) {
  Value whole = wholeIsOperand ? op->getOperand(0) : op->getResult(0);
  ValueRange pieces = wholeIsOperand ? ValueRange(op->getResults())
                                     : ValueRange(op->getOperands());
  int64_t rank = rankOf(whole);
  if (axis < 0 || axis >= rank)
    return failure();
  int64_t piece = shapeOf(pieces.front())[axis];
  int64_t n = pieces.size();
  if (piece <= 0 || piece * n != shapeOf(whole)[axis] ||
      llvm::any_of(pieces, [&](Value v) {
        return rankOf(v) != rank || shapeOf(v)[axis] != piece;
      }))
    return failure();
  rule.operands.clear();
  rule.results.clear();
  shareOutsideAxis(rule, op, axis);
  int count = rule.addFactor(n, FactorKind::Blocked);
  int p = rule.addFactor(piece);
  auto &wholeTf = wholeIsOperand ? rule.operands : rule.results;
  auto &pieceTf = wholeIsOperand ? rule.results : rule.operands;
  wholeTf[0][axis] = {count, p};
  for (TensorFactors &tf : pieceTf)
    tf[axis] = {p};
  return success();
}

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
  if (type == "Split" && op->getNumOperands() == 1 && op->getNumResults() > 1 &&
      succeeded(equalPiecesRule(rule, op, getOnnxAxis(*this, rank, 0),
                                /*wholeIsOperand=*/true)))
    return rule;
  // Concat the other way (the gradient of a fused q/k/v projection's Split).
  if (type == "Concat" && op->getNumOperands() > 1 &&
      succeeded(equalPiecesRule(rule, op, getOnnxAxis(*this, rank, 0),
                                /*wholeIsOperand=*/false)))
    return rule;
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
  if (llvm::is_contained({"Concat", "Split", "TopK", "GatherElements",
                          "ScatterElements", "CumSum"},
                         type)) {
    // The axis is whole (a running sum reads every earlier element); the
    // other dimensions pass through.
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

ShardingRule GeluOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}

ShardingRule GeluGradOp::getShardingRule() {
  return getElementwiseShardingRule(*this);
}

ShardingRule AddLayerNormOp::getShardingRule() {
  return normalizationRule(getLhs(), getAxis(), getScale(), getBias(), 2, 2);
}

namespace {
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

//===----------------------------------------------------------------------===//
// Training ops
//===----------------------------------------------------------------------===//

namespace {
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

ShardingRule SoftmaxCrossEntropyOp::getShardingRule() {
  return crossEntropyRule(getLogits(), 1, false);
}

ShardingRule SoftmaxCrossEntropyGradOp::getShardingRule() {
  return crossEntropyRule(getLogits(), 2, true);
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

ShardingRule LayerNormGradOp::getShardingRule() {
  ShardingRule rule =
      normalizationRule(getInput(), getAxis(), getScale(), Value(), 1, 1);
  // Operands are (input, scale, grad); the grad is laid out as the input.
  rule.operands.push_back(rule.operands.front());
  return rule;
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

ShardingRule VocabCrossEntropyOp::getShardingRule() {
  return getVocabShardingRule(getOperation());
}
