//===- Fuse.cpp - Fuse exporter op chains into fused ops --------*- C++ -*-===//
//
// PyTorch exports GELU, residual + LayerNorm and attention as chains of
// small ops. Each chain reads and writes its tensors several times; the fused
// ops let a backend do it in one pass (and, for attention, without storing
// the scores).
//
//===----------------------------------------------------------------------===//

#include "Fuse.h"
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

/// Whether `x` is `want` within `ulps` ulps of `like`'s element type (f16
/// keeps sqrt(2) as 1.4140625; a product of several rounded constants
/// needs a few more).
bool nearValue(double x, double want, Value like, int ulps = 4) {
  const llvm::fltSemantics &sem =
      cast<FloatType>(getElementTypeOrSelf(like.getType())).getFloatSemantics();
  double ulp = std::ldexp(1.0, 1 - int(llvm::APFloat::semanticsPrecision(sem)));
  return std::fabs(x - want) <= std::max(1e-6, ulps * ulp) * std::fabs(want);
}

/// Whether `v` is a splat constant equal to `want` as its element type
/// holds it: within a few of its ulps.
bool near(Value v, double want) {
  std::optional<double> x = splatValue(v);
  return x && nearValue(*x, want, v, 2);
}

/// One user, and no other before shoal-recompute moved backward readers to
/// clones: fusion then matches what it would without recomputation.
bool singleUse(Value v) { return hasOneUseBeforeRecompute(v); }

/// A product as a tree of Muls flattens: the splat constants multiplied
/// into `scale` (a Div by one divides it), the other factors listed, a
/// `Pow(x, 3)` as x three times; `ops` are the tree's ops.
struct Product {
  double scale = 1;
  SmallVector<Value> factors;
  SmallVector<Operation *> ops;
};

/// More ops than any GELU product has: a longer product (a model's chain
/// of thousands of Muls) is not one, and is not walked to its end from
/// each of its Muls.
constexpr size_t kMaxProductOps = 8;

/// Flattens the product `v`: its own op always, an inner one only when its
/// single use is in the tree; past kMaxProductOps the rest is one factor.
void flatten(Value v, bool root, Product &p) {
  Operation *def = v.getDefiningOp();
  if (def && (root || singleUse(v)) && p.ops.size() < kMaxProductOps) {
    if (auto mul = dyn_cast<MulOp>(def)) {
      p.ops.push_back(def);
      flatten(mul.getLhs(), false, p);
      flatten(mul.getRhs(), false, p);
      return;
    }
    if (auto div = dyn_cast<DivOp>(def)) {
      if (std::optional<double> c = splatValue(div.getRhs()); c && *c != 0) {
        p.ops.push_back(def);
        p.scale /= *c;
        flatten(div.getLhs(), false, p);
        return;
      }
    }
    if (auto pow = dyn_cast<PowOp>(def)) {
      if (std::optional<double> c = splatValue(pow.getRhs()); c && *c == 3) {
        p.ops.push_back(def);
        p.factors.append(3, pow.getLhs());
        return;
      }
    }
  }
  if (std::optional<double> c = splatValue(v)) {
    p.scale *= *c;
    return;
  }
  p.factors.push_back(v);
}

/// The other operand of `add` when one of them is a splat `want`.
Value addendOf(AddOp add, double want) {
  for (int i = 0; i < 2; ++i)
    if (near(add->getOperand(i), want))
      return add->getOperand(1 - i);
  return Value();
}

/// The ops of a GELU chain and its argument.
struct GeluChain {
  Value x;
  StringRef form; // "none" (erf) or "tanh"
  SmallVector<Operation *> ops;
};

/// Whether `s` (used only by the chain) is `x * scale`, its ops added.
bool isScaled(Value s, Value x, double scale, GeluChain &chain) {
  if (!singleUse(s))
    return false;
  Product p;
  flatten(s, /*root=*/true, p);
  if (p.factors.size() != 1 || p.factors[0] != x ||
      !nearValue(p.scale, scale, x))
    return false;
  chain.ops.append(p.ops);
  return true;
}

/// Matches GELU at the root Mul `y`, the factors in any order and
/// association: `0.5 * x * (1 + erf(x / sqrt 2))` (PyTorch's `nn.GELU`) or
/// `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))` (its
/// `approximate="tanh"` and Hugging Face's `NewGELUActivation`, x^3 as
/// `Pow(x, 3)` or `x * x * x`).
std::optional<GeluChain> matchGelu(MulOp root) {
  Product outer;
  flatten(root.getResult(), /*root=*/true, outer);
  if (outer.factors.size() != 2 || !nearValue(outer.scale, 0.5, root))
    return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    GeluChain chain;
    chain.x = outer.factors[i];
    chain.ops = outer.ops;
    auto onePlus = outer.factors[1 - i].getDefiningOp<AddOp>();
    if (chain.x.getType() != root.getType() || !onePlus ||
        !singleUse(onePlus) || !addendOf(onePlus, 1.0))
      continue;
    chain.ops.push_back(onePlus);
    Operation *f = addendOf(onePlus, 1.0).getDefiningOp();
    if (!f || !singleUse(f->getResult(0)))
      continue;
    chain.ops.push_back(f);
    if (auto erf = dyn_cast<ErfOp>(f)) {
      chain.form = "none";
      if (isScaled(erf.getInput(), chain.x, 1.0 / std::sqrt(2.0), chain))
        return chain;
      continue;
    }
    auto tanh = dyn_cast<TanhOp>(f);
    if (!tanh || !singleUse(tanh.getInput()))
      continue;
    // u = sqrt(2/pi) * (x + 0.044715 * x^3)
    chain.form = "tanh";
    Product u;
    flatten(tanh.getInput(), /*root=*/true, u);
    auto sum =
        u.factors.size() == 1 ? u.factors[0].getDefiningOp<AddOp>() : AddOp();
    if (!sum || !singleUse(sum) ||
        !nearValue(u.scale, std::sqrt(2.0 / M_PI), root))
      continue;
    chain.ops.append(u.ops);
    chain.ops.push_back(sum);
    for (int j = 0; j < 2; ++j) {
      if (sum->getOperand(j) != chain.x || !singleUse(sum->getOperand(1 - j)))
        continue;
      Product cube;
      flatten(sum->getOperand(1 - j), /*root=*/true, cube);
      if (cube.factors.size() == 3 &&
          llvm::all_of(cube.factors, [&](Value v) { return v == chain.x; }) &&
          nearValue(cube.scale, 0.044715, root)) {
        chain.ops.append(cube.ops);
        return chain;
      }
    }
  }
  return std::nullopt;
}

/// The attributes that place an op (its scope, its training phase): a fused
/// op takes its root's, and fuses only ops that share them.
constexpr StringLiteral kPlaceAttrs[] = {ShoalDialect::kScopeAttr,
                                         ShoalDialect::kPhaseAttr};

bool samePlace(Operation *a, Operation *b) {
  return llvm::all_of(kPlaceAttrs, [&](StringRef attr) {
    return a->getAttr(attr) == b->getAttr(attr);
  });
}

/// Replaces the chain's `root` by `fused` (which takes the root's scope and
/// phase, and its uneven layout), then erases the ops of `chain` (the root
/// and duplicates skipped) that nothing reads any more, users before their
/// operands; one that something outside still reads stays.
void replaceChain(Operation *root, Operation *fused,
                  ArrayRef<Operation *> chain, IRRewriter &rewriter) {
  for (StringRef attr : kPlaceAttrs)
    if (Attribute a = root->getAttr(attr))
      fused->setAttr(attr, a);
  copyUnevenLayout(root->getResult(0), fused->getResult(0));
  rewriter.replaceOp(root, fused->getResults());
  SmallVector<Operation *> dead;
  for (Operation *op : chain)
    if (op != root && !llvm::is_contained(dead, op))
      dead.push_back(op);
  while (true) {
    auto it =
        llvm::find_if(dead, [](Operation *op) { return op->use_empty(); });
    if (it == dead.end())
      break;
    rewriter.eraseOp(*it);
    dead.erase(it);
  }
}

/// Fuses the GELU chain rooted at `root` (matchGelu), with a bias add right
/// before it that only the chain reads, into shoal.gelu. The chain's ops
/// must all be in one scope and phase: the fused op takes the root's.
LogicalResult fuseGelu(MulOp root, IRRewriter &rewriter, bool tanhForm) {
  std::optional<GeluChain> chain = matchGelu(root);
  if (!chain || (chain->form == "tanh" && !tanhForm))
    return failure();
  llvm::SmallPtrSet<Operation *, 16> ops(chain->ops.begin(), chain->ops.end());
  if (!llvm::all_of(ops, [&](Operation *op) { return samePlace(op, root); }))
    return failure();
  // A bias add whose result only the chain reads joins the fused op.
  Value x = chain->x, input = x, bias;
  auto biasAdd = x.getDefiningOp<AddOp>();
  if (biasAdd && samePlace(biasAdd, root) &&
      llvm::all_of(x.getUsers(),
                   [&](Operation *user) { return ops.contains(user); })) {
    for (int j = 0; j < 2; ++j) {
      Value a = biasAdd->getOperand(j), b = biasAdd->getOperand(1 - j);
      if (a.getType() == x.getType() && b.getDefiningOp<WeightOp>()) {
        input = a;
        bias = b;
        break;
      }
    }
  }
  rewriter.setInsertionPoint(root);
  auto gelu =
      rewriter.create<GeluOp>(root.getLoc(), root.getType(), input, bias,
                              rewriter.getStringAttr(chain->form));
  // The rest of the chain and the bias add.
  SmallVector<Operation *> rest(chain->ops);
  if (bias)
    rest.push_back(biasAdd);
  replaceChain(root, gelu, rest, rewriter);
  return success();
}

/// `v` through Casts to its own type (Hugging Face's `.to(torch.float32)`
/// of a float32 tensor exports as one), which it adds to `casts`.
Value throughIdentityCasts(Value v, SmallVectorImpl<Operation *> &casts) {
  while (auto c = v.getDefiningOp<CastOp>()) {
    if (c.getInput().getType() != c.getType())
      break;
    casts.push_back(c);
    v = c.getInput();
  }
  return v;
}

/// The ops of an RMSNorm chain: `x` normalized over its last dimension,
/// times `scale`.
struct RmsNormChain {
  Value x, scale;
  double epsilon = 0;
  SmallVector<Operation *> ops;
  /// Identity casts of x the chain reads; erased when nothing else does.
  SmallVector<Operation *> casts;
};

/// Matches RMSNorm at the root Mul `y = scale * n` (either order), as
/// Hugging Face's LlamaRMSNorm and T5LayerNorm export it: `n = x * (1 /
/// sqrt(mean(x^2) + eps))` with the reciprocal as `Div(1, s)` or
/// `Reciprocal(s)`, or `n = x / sqrt(...)`; x^2 as `Pow(x, 2)` or `x * x`;
/// the mean a ReduceMean over the last axis keeping it; identity casts
/// anywhere on x and n. `scale` is a vector of the last dimension's size.
std::optional<RmsNormChain> matchRmsNorm(MulOp root) {
  auto type = cast<RankedTensorType>(root.getType());
  if (type.getRank() < 1 || !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  int64_t rank = type.getRank(), last = type.getShape().back();
  for (int i = 0; i < 2; ++i) {
    RmsNormChain chain;
    chain.scale = root->getOperand(i);
    auto st = dyn_cast<RankedTensorType>(chain.scale.getType());
    if (!st || st.getRank() != 1 || st.getShape()[0] != last ||
        st.getElementType() != type.getElementType())
      continue;
    chain.ops.push_back(root);
    Value n = root->getOperand(1 - i);
    while (auto c = n.getDefiningOp<CastOp>()) {
      if (c.getInput().getType() != c.getType() || !singleUse(n))
        break;
      chain.ops.push_back(c);
      n = c.getInput();
    }
    Operation *norm = n.getDefiningOp();
    if (n.getType() != type || !norm || !singleUse(n))
      continue;
    // n = xa * (1 / s), xa * Reciprocal(s) or xa / s.
    Value xa, s;
    if (auto mul = dyn_cast<MulOp>(norm)) {
      for (int j = 0; j < 2 && !s; ++j) {
        Value r = mul->getOperand(j);
        Operation *inv = r.getDefiningOp();
        if (!inv || !singleUse(r))
          continue;
        if (auto div = dyn_cast<DivOp>(inv); div && near(div.getLhs(), 1.0))
          s = div.getRhs();
        else if (auto rec = dyn_cast<ReciprocalOp>(inv))
          s = rec.getInput();
        if (s) {
          xa = mul->getOperand(1 - j);
          chain.ops.push_back(inv);
        }
      }
    } else if (auto div = dyn_cast<DivOp>(norm)) {
      xa = div.getLhs();
      s = div.getRhs();
    }
    if (!s)
      continue;
    chain.ops.push_back(norm);
    auto sqrt = s.getDefiningOp<SqrtOp>();
    if (!sqrt || !singleUse(s))
      continue;
    chain.ops.push_back(sqrt);
    auto add = sqrt.getInput().getDefiningOp<AddOp>();
    if (!add || !singleUse(add))
      continue;
    Value ms;
    for (int j = 0; j < 2 && !ms; ++j)
      if (std::optional<double> eps = splatValue(add->getOperand(j));
          eps && *eps >= 0) {
        chain.epsilon = *eps;
        ms = add->getOperand(1 - j);
      }
    if (!ms)
      continue;
    chain.ops.push_back(add);
    auto mean = ms.getDefiningOp<ReduceMeanOp>();
    if (!mean || !singleUse(ms) || !mean.getKeepdims() ||
        mean.getAxes().size() != 1 ||
        (mean.getAxes()[0] != -1 && mean.getAxes()[0] != rank - 1))
      continue;
    chain.ops.push_back(mean);
    Value sq = mean.getInput(), xb;
    Operation *square = sq.getDefiningOp();
    if (!square || !singleUse(sq))
      continue;
    if (auto pow = dyn_cast<PowOp>(square); pow && near(pow.getRhs(), 2.0))
      xb = pow.getLhs();
    else if (auto m = dyn_cast<MulOp>(square); m && m.getLhs() == m.getRhs())
      xb = m.getLhs();
    if (!xb)
      continue;
    chain.ops.push_back(square);
    chain.x = throughIdentityCasts(xa, chain.casts);
    if (chain.x != throughIdentityCasts(xb, chain.casts) ||
        chain.x.getType() != type)
      continue;
    return chain;
  }
  return std::nullopt;
}

/// Fuses the RMSNorm chain at `root` (matchRmsNorm) into a shoal.layer_norm
/// with `rms = true`, when its ops share the root's scope and phase.
LogicalResult fuseRmsNorm(MulOp root, IRRewriter &rewriter) {
  std::optional<RmsNormChain> chain = matchRmsNorm(root);
  if (!chain || !llvm::all_of(chain->ops, [&](Operation *op) {
        return samePlace(op, root);
      }))
    return failure();
  rewriter.setInsertionPoint(root);
  auto norm = rewriter.create<LayerNormOp>(
      root.getLoc(), root.getType(), chain->x, chain->scale, Value(),
      rewriter.getI64IntegerAttr(-1),
      rewriter.getF32FloatAttr(static_cast<float>(chain->epsilon)),
      rewriter.getBoolAttr(true));
  // The identity casts of x too, unless something else reads them.
  SmallVector<Operation *> rest(chain->ops);
  rest.append(chain->casts);
  replaceChain(root, norm, rest, rewriter);
  return success();
}

/// Matches `LayerNorm(Add(a, b))` with equal shapes.
LogicalResult fuseAddLayerNorm(LayerNormOp ln, IRRewriter &rewriter) {
  auto add = ln.getInput().getDefiningOp<AddOp>();
  if (ln.getRms() || !add || add.getLhs().getType() != add.getType() ||
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
/// the outer MatMul (identity Casts allowed before it), when its ops share
/// the root's scope and phase.
LogicalResult fuseAttention(MatMulOp out, IRRewriter &rewriter) {
  // Identity casts between the softmax and the product (Hugging Face
  // LLaMA's `softmax(..., dtype=float32).to(q.dtype)` in float32).
  SmallVector<Operation *> casts;
  Value probs = throughIdentityCasts(out.getLhs(), casts);
  if (llvm::any_of(casts,
                   [](Operation *c) { return !singleUse(c->getResult(0)); }))
    return failure();
  auto softmax = probs.getDefiningOp<SoftmaxOp>();
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
  SmallVector<Operation *> chain{softmax, scaleOp, qk};
  if (maskAdd)
    chain.push_back(maskAdd);
  chain.append(casts);
  if (!llvm::all_of(chain, [&](Operation *op) { return samePlace(op, out); }))
    return failure();
  rewriter.setInsertionPoint(out);
  auto attention = rewriter.create<AttentionOp>(
      out.getLoc(), out.getType(), q, kt, v, mask,
      rewriter.getF32FloatAttr(static_cast<float>(scale)));
  replaceChain(out, attention, chain, rewriter);
  return success();
}

/// Which chains to fuse.
struct Chains {
  bool gelu = true, addLayerNorm = true, attention = true, rmsNorm = true;
  /// With `gelu`: the tanh form too (else only the erf form).
  bool geluTanh = true;
};

/// Fuses every chain under `root`; `listener` sees each fused op made and
/// the ops it replaces erased.
void fuseAll(Operation *root, RewriterBase::Listener &listener,
             llvm::DenseSet<Operation *> &erased, Chains chains = {}) {
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
    if (auto mul = dyn_cast<MulOp>(op)) {
      if (!(chains.gelu &&
            succeeded(fuseGelu(mul, rewriter, chains.geluTanh))) &&
          chains.rmsNorm)
        (void)fuseRmsNorm(mul, rewriter);
    } else if (auto ln = dyn_cast<LayerNormOp>(op); ln && chains.addLayerNorm)
      (void)fuseAddLayerNorm(ln, rewriter);
    else if (auto mm = dyn_cast<MatMulOp>(op); mm && chains.attention)
      (void)fuseAttention(mm, rewriter);
  }
}

struct ErasedListener : public RewriterBase::Listener {
  llvm::DenseSet<Operation *> &erased;
  ErasedListener(llvm::DenseSet<Operation *> &e) : erased(e) {}
  void notifyOperationErased(Operation *op) override { erased.insert(op); }
};

struct FusePass : public ::shoal::impl::FusePassBase<FusePass> {
  using FusePassBase::FusePassBase;

  void runOnOperation() final {
    Chains which;
    if (!chains.empty()) {
      which = Chains{false, false, false, false, false};
      for (const std::string &c : chains) {
        if (c == "gelu")
          which.gelu = which.geluTanh = true;
        else if (c == "gelu-erf")
          which.gelu = true;
        else if (c == "add-layer-norm")
          which.addLayerNorm = true;
        else if (c == "attention")
          which.attention = true;
        else if (c == "rms-norm")
          which.rmsNorm = true;
        else {
          getOperation().emitError()
              << "shoal-fuse: unknown chain '" << c
              << "' in chains= (expected gelu, gelu-erf, add-layer-norm, "
                 "attention or rms-norm)";
          return signalPassFailure();
        }
      }
    }
    llvm::DenseSet<Operation *> erased;
    ErasedListener listener(erased);
    fuseAll(getOperation(), listener, erased, which);
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
