//===- Fuse.cpp - Fuse exporter op chains into fused ops --------*- C++ -*-===//
//
// PyTorch exports GELU, residual + LayerNorm and attention as chains of
// small ops. Each chain reads and writes its tensors several times; the fused
// ops let a backend do it in one pass (and, for attention, without storing
// the scores).
//
//===----------------------------------------------------------------------===//

#include "Recompute.h"
#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"
#include <cmath>
#include <optional>

namespace shoal {
#define GEN_PASS_DEF_FUSEPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// The value of a splat floating-point constant, if `v` is one.
std::optional<double> splatValue(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

/// Whether `v` is a splat constant equal to `want` as its element type
/// holds it (f16 keeps sqrt(2) as 1.4140625): within a few of its ulps.
bool near(Value v, double want) {
  std::optional<double> x = splatValue(v);
  if (!x)
    return false;
  const llvm::fltSemantics &sem =
      cast<FloatType>(getElementTypeOrSelf(v.getType())).getFloatSemantics();
  double ulp = std::ldexp(1.0, 1 - int(llvm::APFloat::semanticsPrecision(sem)));
  return std::fabs(*x - want) <= std::max(1e-6, 2 * ulp) * std::fabs(want);
}

/// One user, and no other before shoal-recompute moved backward readers to
/// clones: fusion then matches what it would without recomputation.
bool singleUse(Value v) { return hasOneUseBeforeRecompute(v); }

/// Matches `Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)` at the outer Mul.
LogicalResult fuseGelu(MulOp outer, IRRewriter &rewriter) {
  Value inner;
  if (near(outer.getRhs(), 0.5))
    inner = outer.getLhs();
  else if (near(outer.getLhs(), 0.5))
    inner = outer.getRhs();
  auto mul = inner ? inner.getDefiningOp<MulOp>() : MulOp();
  if (!mul || !singleUse(mul))
    return failure();
  for (int i = 0; i < 2; ++i) {
    Value x = mul->getOperand(i);
    auto add = mul->getOperand(1 - i).getDefiningOp<AddOp>();
    if (!add || !singleUse(add))
      continue;
    Value erfValue;
    if (near(add.getRhs(), 1.0))
      erfValue = add.getLhs();
    else if (near(add.getLhs(), 1.0))
      erfValue = add.getRhs();
    auto erf = erfValue ? erfValue.getDefiningOp<ErfOp>() : ErfOp();
    if (!erf || !singleUse(erf))
      continue;
    Operation *scale = erf.getInput().getDefiningOp();
    bool scaled =
        scale && scale->getNumOperands() == 2 && scale->getOperand(0) == x &&
        ((isa<DivOp>(scale) && near(scale->getOperand(1), std::sqrt(2.0))) ||
         (isa<MulOp>(scale) &&
          near(scale->getOperand(1), 1.0 / std::sqrt(2.0))));
    if (!scaled || !singleUse(scale->getResult(0)) ||
        x.getType() != outer.getType())
      continue;
    // A bias add right before it, used only here, joins the fused op.
    Value input = x, bias;
    if (auto biasAdd = x.getDefiningOp<AddOp>();
        biasAdd && std::distance(x.use_begin(), x.use_end()) == 2) {
      for (int j = 0; j < 2; ++j) {
        Value a = biasAdd->getOperand(j), b = biasAdd->getOperand(1 - j);
        if (a.getType() == x.getType() && b.getDefiningOp<WeightOp>()) {
          input = a;
          bias = b;
          break;
        }
      }
    }
    rewriter.setInsertionPoint(outer);
    auto gelu =
        rewriter.create<GeluOp>(outer.getLoc(), outer.getType(), input, bias);
    Operation *biasAdd = bias ? x.getDefiningOp() : nullptr;
    copyUnevenLayout(outer.getResult(), gelu.getResult());
    rewriter.replaceOp(outer, gelu.getResult());
    rewriter.eraseOp(mul);
    rewriter.eraseOp(add);
    rewriter.eraseOp(erf);
    rewriter.eraseOp(scale);
    if (biasAdd)
      rewriter.eraseOp(biasAdd);
    return success();
  }
  return failure();
}

/// Matches `LayerNorm(Add(a, b))` with equal shapes.
LogicalResult fuseAddLayerNorm(LayerNormOp ln, IRRewriter &rewriter) {
  auto add = ln.getInput().getDefiningOp<AddOp>();
  if (!add || add.getLhs().getType() != add.getType() ||
      add.getRhs().getType() != add.getType())
    return failure();
  rewriter.setInsertionPoint(ln);
  auto fused = rewriter.create<AddLayerNormOp>(
      ln.getLoc(), TypeRange{add.getType(), ln.getType()}, add.getLhs(),
      add.getRhs(), ln.getScale(), ln.getBias(), ln.getAxisAttr(),
      ln.getEpsilonAttr());
  copyUnevenLayout(ln.getResult(), fused.getResult());
  copyUnevenLayout(add.getResult(), fused.getSum());
  rewriter.replaceOp(ln, fused.getResult());
  rewriter.replaceOp(add, fused.getSum());
  return success();
}

/// Matches `MatMul(Softmax(Add?(Mul|Div(MatMul(q, kt), c), mask)), v)` at
/// the outer MatMul.
LogicalResult fuseAttention(MatMulOp out, IRRewriter &rewriter) {
  auto softmax = out.getLhs().getDefiningOp<SoftmaxOp>();
  if (!softmax || !singleUse(softmax))
    return failure();
  auto probsType = cast<RankedTensorType>(softmax.getType());
  int64_t rank = probsType.getRank();
  int64_t axis = static_cast<int64_t>(softmax.getAxis());
  if (rank < 2 || (axis != -1 && axis != rank - 1))
    return failure();
  Value scores = softmax.getInput(), mask;
  Operation *maskAdd = nullptr;
  if (auto add = scores.getDefiningOp<AddOp>(); add && singleUse(add)) {
    for (int i = 0; i < 2; ++i) {
      Operation *def = add->getOperand(i).getDefiningOp();
      if (def && isa<MulOp, DivOp>(def) &&
          add->getOperand(i).getType() == add.getType()) {
        maskAdd = add;
        mask = add->getOperand(1 - i);
        scores = add->getOperand(i);
        break;
      }
    }
  }
  Operation *scaleOp = scores.getDefiningOp();
  if (!scaleOp || !isa<MulOp, DivOp>(scaleOp) || !singleUse(scores))
    return failure();
  std::optional<double> c = splatValue(scaleOp->getOperand(1));
  Value raw = scaleOp->getOperand(0);
  if (!c && isa<MulOp>(scaleOp)) {
    c = splatValue(scaleOp->getOperand(0));
    raw = scaleOp->getOperand(1);
  }
  if (!c || *c == 0)
    return failure();
  double scale = isa<DivOp>(scaleOp) ? 1.0 / *c : *c;
  auto qk = raw.getDefiningOp<MatMulOp>();
  if (!qk || !singleUse(qk) || raw.getType() != probsType)
    return failure();
  Value q = qk.getLhs(), kt = qk.getRhs(), v = out.getRhs();
  auto rankOf = [](Value x) {
    return cast<RankedTensorType>(x.getType()).getRank();
  };
  if (rankOf(q) != rank || rankOf(kt) != rank || rankOf(v) != rank)
    return failure();
  // The fused op needs equal batch dimensions (no broadcasting) and the
  // usual contraction sizes; the mask already broadcasts to the scores.
  auto shapeOf = [](Value x) {
    return cast<RankedTensorType>(x.getType()).getShape();
  };
  ArrayRef<int64_t> qs = shapeOf(q), ks = shapeOf(kt), vs = shapeOf(v);
  if (qs.drop_back(2) != ks.drop_back(2) || qs.drop_back(2) != vs.drop_back(2))
    return failure();
  rewriter.setInsertionPoint(out);
  auto attention = rewriter.create<AttentionOp>(
      out.getLoc(), out.getType(), q, kt, v, mask,
      rewriter.getF32FloatAttr(static_cast<float>(scale)));
  copyUnevenLayout(out.getResult(), attention.getResult());
  rewriter.replaceOp(out, attention.getResult());
  rewriter.eraseOp(softmax);
  if (maskAdd)
    rewriter.eraseOp(maskAdd);
  rewriter.eraseOp(scaleOp);
  rewriter.eraseOp(qk);
  return success();
}

/// Fuses every chain under `root`; `listener` sees each fused op made and
/// the ops it replaces erased.
void fuseAll(Operation *root, RewriterBase::Listener &listener,
             llvm::DenseSet<Operation *> &erased) {
  // Collect first: rewriting while walking would visit erased ops.
  SmallVector<Operation *> roots;
  root->walk([&](Operation *op) {
    if (isa<MulOp, LayerNormOp, MatMulOp>(op))
      roots.push_back(op);
  });
  IRRewriter rewriter(root->getContext());
  rewriter.setListener(&listener);
  for (Operation *op : roots) {
    if (erased.contains(op))
      continue;
    if (auto mul = dyn_cast<MulOp>(op))
      (void)fuseGelu(mul, rewriter);
    else if (auto ln = dyn_cast<LayerNormOp>(op))
      (void)fuseAddLayerNorm(ln, rewriter);
    else if (auto mm = dyn_cast<MatMulOp>(op))
      (void)fuseAttention(mm, rewriter);
  }
}

struct ErasedListener : public RewriterBase::Listener {
  llvm::DenseSet<Operation *> &erased;
  ErasedListener(llvm::DenseSet<Operation *> &e) : erased(e) {}
  void notifyOperationErased(Operation *op) override { erased.insert(op); }
};

struct FusePass : public ::shoal::impl::FusePassBase<FusePass> {
  void runOnOperation() final {
    llvm::DenseSet<Operation *> erased;
    ErasedListener listener(erased);
    fuseAll(getOperation(), listener, erased);
    // The fused chains' scalar constants are dead now.
    SmallVector<Operation *> dead;
    getOperation().walk([&](ConstantOp c) {
      if (c->use_empty())
        dead.push_back(c);
    });
    for (Operation *op : dead)
      op->erase();
  }
};

} // namespace

double shoal::resultRows(Operation *op) {
  auto t = op->getNumResults()
               ? dyn_cast<RankedTensorType>(op->getResult(0).getType())
               : RankedTensorType();
  if (!t || !t.hasStaticShape() || t.getRank() < 1)
    return 0;
  return static_cast<double>(t.getNumElements() /
                             std::max<int64_t>(1, t.getShape().back()));
}

SmallVector<shoal::FusionGroup> shoal::predictFusions(Operation *func) {
  // Fuse a clone, noting which of its ops each fused op replaces.
  IRMapping mapping;
  Operation *clone = func->clone(mapping);
  DenseMap<Operation *, Operation *> original;
  for (auto [from, to] : mapping.getOperationMap())
    original[to] = from;
  struct Recorder : public ErasedListener {
    SmallVector<std::pair<Operation *, SmallVector<Operation *>>> made;
    using ErasedListener::ErasedListener;
    void notifyOperationInserted(Operation *op,
                                 OpBuilder::InsertPoint) override {
      made.push_back({op, {}});
    }
    void notifyOperationErased(Operation *op) override {
      ErasedListener::notifyOperationErased(op);
      if (!made.empty())
        made.back().second.push_back(op);
    }
  };
  llvm::DenseSet<Operation *> erased;
  Recorder recorder(erased);
  fuseAll(clone, recorder, erased);
  SmallVector<FusionGroup> groups;
  for (auto &[fused, replaced] : recorder.made) {
    FusionGroup g;
    g.fused = fused->getName().getStringRef().str();
    if (auto cost = dyn_cast<CostOpInterface>(fused)) {
      g.flops = cost.getFlops();
      g.bytes = cost.getBytes();
    }
    g.rows = resultRows(fused);
    for (Operation *op : replaced)
      if (Operation *o = original.lookup(op))
        g.ops.push_back(o);
    if (!g.ops.empty())
      groups.push_back(std::move(g));
  }
  clone->erase();
  return groups;
}
