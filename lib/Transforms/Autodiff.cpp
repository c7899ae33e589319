//===- Autodiff.cpp - Loss and backward graph -------------------*- C++ -*-===//
//
// Appends a loss to the forward graph and builds its gradient with respect to
// every trained weight by reverse-mode differentiation: the ops are visited
// from the loss back, each one's gradient rule (GradientOpInterface) turns
// its results' gradients into its operands', and gradients reaching one
// value from several uses are summed. Only values that depend on a trained
// weight are differentiated, and a float initializer that no gradient
// reaches is not trained. See docs/Training.md.
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/Support/GlobPattern.h"

namespace shoal {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {
/// Replaces `att` by its chain, `MatMul(q, kt) * scale + mask -> Softmax ->
/// MatMul(., v)`, in its place and with its scope and phase; returns the
/// chain's ops in order.
SmallVector<Operation *> unfuseAttention(AttentionOp att) {
  OpBuilder b(att);
  Location loc = att.getLoc();
  auto qt = cast<RankedTensorType>(att.getQ().getType());
  Type elem = qt.getElementType();
  SmallVector<int64_t> scores(qt.getShape().drop_back());
  scores.push_back(
      cast<RankedTensorType>(att.getKt().getType()).getShape().back());
  auto st = RankedTensorType::get(scores, elem);
  auto scalar = RankedTensorType::get({}, elem);
  auto s = b.create<MatMulOp>(loc, st, att.getQ(), att.getKt());
  auto c = b.create<ConstantOp>(
      loc, scalar,
      DenseElementsAttr::get(
          scalar, b.getFloatAttr(elem, att.getScale().convertToDouble())));
  auto scaled = b.create<MulOp>(loc, st, s, c);
  auto masked = b.create<AddOp>(loc, st, scaled, att.getMask());
  auto p = b.create<SoftmaxOp>(loc, st, masked, b.getI64IntegerAttr(-1));
  auto o = b.create<MatMulOp>(loc, att.getType(), p, att.getV());
  SmallVector<Operation *> chain{s, c, scaled, masked, p, o};
  for (Operation *op : chain)
    for (StringRef name : {ShoalDialect::kScopeAttr, ShoalDialect::kPhaseAttr})
      if (Attribute a = att->getAttr(name))
        op->setAttr(name, a);
  att.replaceAllUsesWith(o.getResult());
  att.erase();
  return chain;
}

bool isFloatTensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && isa<FloatType>(t.getElementType());
}

/// 'a', 'b', 'c' and 2 more: at most `shown` names.
std::string formatNames(ArrayRef<StringRef> names, size_t shown = 8) {
  std::string text;
  for (auto [i, n] : llvm::enumerate(names.take_front(shown)))
    text += (i ? ", '" : "'") + n.str() + "'";
  if (names.size() > shown)
    text += " and " + std::to_string(names.size() - shown) + " more";
  return text;
}

/// In a pipeline, puts every forward op of no scope in the stage that
/// shoal-form-task-graphs would give it, so that its backward ops and its
/// weights' updates, which take their forward op's scope, land on the same
/// stage: the latest stage it reads from, or if it reads from none (an
/// embedding's Gather of a graph input) the earliest stage reading it.
/// Left alone, the backward of such an op (an encoder's final LayerNorm
/// between two stages, say) would join the stage its incoming gradient
/// comes from, and its weight's update would run there, on a copy the
/// forward never reads. Weights, constants and weight views stay free:
/// they are cloned into every stage that reads them.
void pinToStages(func::FuncOp func, ArrayAttr scopes) {
  llvm::StringMap<unsigned> order;
  for (auto [i, s] : llvm::enumerate(scopes.getAsRange<ScopeAttr>()))
    order[s.getName().getValue()] = i;
  auto scopeOf = [&](Operation *op) {
    auto s = op ? op->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr)
                : StringAttr();
    return s && order.count(s.getValue()) ? s : StringAttr();
  };
  auto pin = [&](Operation &op, ValueRange operands,
                 Operation::user_range users) {
    StringAttr best;
    auto consider = [&](StringAttr s, bool later) {
      if (s &&
          (!best || (later ? order[s.getValue()] > order[best.getValue()]
                           : order[s.getValue()] < order[best.getValue()])))
        best = s;
    };
    for (Value v : operands)
      consider(scopeOf(v.getDefiningOp()), /*later=*/true);
    if (!best)
      for (Operation *user : users)
        consider(scopeOf(user), /*later=*/false);
    if (best)
      op.setAttr(ShoalDialect::kScopeAttr, best);
  };
  Block &body = func.getBody().front();
  auto free = [](Operation &op) {
    return !op.hasAttr(ShoalDialect::kScopeAttr) &&
           !isa<WeightOp, ConstantOp>(op) && !isWeightView(&op);
  };
  // Forward: by what an op reads; then backward: by its readers.
  for (Operation &op : body.without_terminator())
    if (free(op))
      pin(op, op.getOperands(), {op.user_begin(), op.user_end()});
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (free(op))
      pin(op, ValueRange(), {op.user_begin(), op.user_end()});
}

struct AutodiffPass : public ::shoal::impl::AutodiffPassBase<AutodiffPass> {
  using AutodiffPassBase::AutodiffPassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    func::FuncOp func;
    for (auto f : module.getOps<func::FuncOp>()) {
      if (f.isExternal())
        continue;
      if (func) {
        module.emitError() << "shoal-autodiff expects one function, found '"
                           << func.getSymName() << "' and '" << f.getSymName()
                           << "'";
        return signalPassFailure();
      }
      func = f;
    }
    if (!func)
      return;
    if (module->hasAttr(ShoalDialect::kTrainingAttr)) {
      module.emitError() << "the module is already a training graph";
      return signalPassFailure();
    }
    if (loss != "cross_entropy" && loss != "mse") {
      module.emitError() << "unknown loss '" << loss
                         << "' (expected cross_entropy or mse)";
      return signalPassFailure();
    }
    SmallVector<llvm::GlobPattern> frozenPatterns;
    for (const std::string &p : frozen) {
      auto pat = llvm::GlobPattern::create(p);
      if (!pat) {
        module.emitError() << "bad frozen pattern '" << p
                           << "': " << llvm::toString(pat.takeError());
        return signalPassFailure();
      }
      frozenPatterns.push_back(std::move(*pat));
    }
    if (auto scopes =
            module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr);
        scopes && isStaged(module))
      pinToStages(func, scopes);
    SmallVector<StringRef> untrained;
    if (failed(differentiate(func, frozenPatterns, untrained)))
      return signalPassFailure();
    Builder b(module.getContext());
    SmallVector<NamedAttribute> attrs = {
        b.getNamedAttr("loss", b.getStringAttr("loss")),
        b.getNamedAttr("labels", b.getStringAttr(labels))};
    // For the parallelism report (docs/Report.md).
    if (!untrained.empty())
      attrs.push_back(
          b.getNamedAttr("untrained", b.getStrArrayAttr(untrained)));
    module->setAttr(ShoalDialect::kTrainingAttr, b.getDictionaryAttr(attrs));
  }

  /// Appends the loss of `out`; returns the scalar loss.
  FailureOr<Value> buildLoss(func::FuncOp func, Value out, StringAttr scope) {
    MLIRContext *ctx = func.getContext();
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();
    OpBuilder b(ret);
    Location loc = NameLoc::get(StringAttr::get(ctx, "loss"));
    auto outType = cast<RankedTensorType>(out.getType());
    if (!isa<FloatType>(outType.getElementType()))
      return func.emitError()
             << "the loss needs a float output, but it is " << outType;
    // A model in bf16 or f16: the loss in float32 (cross-entropy reads the
    // 16-bit logits and computes in float32; mse reads them through a cast).
    Type elem = outType.getElementType();
    bool half = elem.isBF16() || elem.isF16();
    if (half && loss == "mse") {
      out = b.create<CastOp>(loc, outType.clone(b.getF32Type()), out);
      outType = cast<RankedTensorType>(out.getType());
    }
    for (unsigned i = 0; i < func.getNumArguments(); ++i)
      if (auto n = func.getArgAttrOfType<StringAttr>(i, "shoal.name");
          n && n.getValue() == labels)
        return func.emitError() << "the graph already has an input named '"
                                << labels << "' (choose another labels name)";
    RankedTensorType labelsType =
        loss == "mse" ? outType
                      : RankedTensorType::get(outType.getShape().drop_back(),
                                              b.getI64Type());
    if (loss == "cross_entropy" && outType.getRank() == 0)
      return func.emitError()
             << "cross_entropy needs logits with a class axis, got " << outType;
    unsigned argIndex = func.getNumArguments();
    (void)func.insertArgument(argIndex, labelsType,
                              b.getDictionaryAttr({b.getNamedAttr(
                                  "shoal.name", b.getStringAttr(labels))}),
                              loc);
    Value labelsArg = body.getArgument(argIndex);
    SmallVector<Operation *> made;
    auto track = [&](Value v) {
      made.push_back(v.getDefiningOp());
      return v;
    };
    Value perElement;
    if (loss == "cross_entropy") {
      perElement = track(b.create<SoftmaxCrossEntropyOp>(
          loc,
          labelsType.clone(half ? b.getF32Type() : outType.getElementType()),
          out, labelsArg, b.getI64IntegerAttr(ignoreIndex)));
    } else {
      Value diff = track(b.create<SubOp>(loc, outType, out, labelsArg));
      perElement = track(b.create<MulOp>(loc, outType, diff, diff));
    }
    auto peType = cast<RankedTensorType>(perElement.getType());
    SmallVector<int64_t> axes;
    for (int64_t i = 0; i < peType.getRank(); ++i)
      axes.push_back(i);
    auto scalarType = RankedTensorType::get({}, peType.getElementType());
    Value sum = perElement;
    if (!axes.empty())
      sum = track(b.create<ReduceSumOp>(loc, scalarType, perElement,
                                        b.getDenseI64ArrayAttr(axes),
                                        b.getBoolAttr(false)));
    Value inv = b.create<ConstantOp>(
        loc, scalarType,
        DenseElementsAttr::get(scalarType,
                               b.getFloatAttr(peType.getElementType(),
                                              1.0 / peType.getNumElements())));
    Value lossValue = track(b.create<MulOp>(loc, scalarType, sum, inv));
    if (scope)
      for (Operation *op : made)
        op->setAttr(ShoalDialect::kScopeAttr, scope);
    ret->setOperands({lossValue});
    func.setType(
        FunctionType::get(ctx, func.getArgumentTypes(), {lossValue.getType()}));
    func.setAllResultAttrs(ArrayRef<DictionaryAttr>{b.getDictionaryAttr(
        {b.getNamedAttr("shoal.name", b.getStringAttr("loss"))})});
    return lossValue;
  }

  /// Builds the loss and the backward graph; `untrained` gets the float
  /// initializers, not frozen, that no gradient reaches.
  LogicalResult differentiate(func::FuncOp func,
                              ArrayRef<llvm::GlobPattern> frozenPatterns,
                              SmallVectorImpl<StringRef> &untrained) {
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();
    if (ret->getNumOperands() == 0)
      return func.emitError() << "the graph has no output to train on";
    // The output the loss reads.
    unsigned outIndex = 0;
    if (!output.empty()) {
      bool found = false;
      for (unsigned i = 0; i < func.getNumResults(); ++i)
        if (auto n = func.getResultAttrOfType<StringAttr>(i, "shoal.name");
            n && n.getValue() == output) {
          outIndex = i;
          found = true;
        }
      if (!found) {
        std::string names;
        for (unsigned i = 0; i < func.getNumResults(); ++i)
          if (auto n = func.getResultAttrOfType<StringAttr>(i, "shoal.name"))
            names += (names.empty() ? "" : ", ") + n.getValue().str();
        return func.emitError() << "the loss reads output '" << output
                                << "', but the graph's outputs are " << names;
      }
    }
    Value out = ret->getOperand(outIndex);
    StringAttr scope;
    if (Operation *def = out.getDefiningOp())
      scope = def->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr);

    // The forward ops, before the loss and backward ops are added.
    SmallVector<Operation *> forward;
    for (Operation &op : body.without_terminator())
      forward.push_back(&op);

    FailureOr<Value> lossValue = buildLoss(func, out, scope);
    if (failed(lossValue))
      return failure();
    for (Operation &op : body.without_terminator())
      if (!llvm::is_contained(forward, &op))
        forward.push_back(&op);

    // Values that depend on a trained weight.
    llvm::DenseSet<Value> active;
    SmallVector<WeightOp> trained;
    SmallVector<bool> matched(frozenPatterns.size(), false);
    for (Operation *op : forward) {
      if (auto w = dyn_cast<WeightOp>(op)) {
        bool isFrozen = false;
        for (auto [i, p] : llvm::enumerate(frozenPatterns))
          if (p.match(getSourceName(w)))
            isFrozen = matched[i] = true;
        if (!isFrozen && isFloatTensor(w.getResult())) {
          active.insert(w.getResult());
          trained.push_back(w);
        }
        continue;
      }
      if (llvm::any_of(op->getOperands(),
                       [&](Value v) { return active.contains(v); }))
        for (Value r : op->getResults())
          if (isFloatTensor(r))
            active.insert(r);
    }
    // A fused attention whose mask is computed from a trained weight (a
    // learned position bias) goes back to its chain: shoal.attention_grad
    // gives the mask no gradient, the chain's rules do.
    for (std::size_t i = 0; i < forward.size(); ++i) {
      auto att = dyn_cast<AttentionOp>(forward[i]);
      if (!att || !att.getMask() || !active.contains(att.getMask()))
        continue;
      SmallVector<Operation *> chain = unfuseAttention(att);
      forward.erase(forward.begin() + i);
      forward.insert(forward.begin() + i, chain.begin(), chain.end());
      for (Operation *op : chain)
        for (Value r : op->getResults())
          if (isFloatTensor(r) && !isa<ConstantOp>(op))
            active.insert(r);
      i += chain.size() - 1;
    }
    // A pattern that freezes nothing is a mistake in the config (a typo,
    // a renamed initializer): the weights it meant would be trained.
    for (auto [i, hit] : llvm::enumerate(matched)) {
      if (hit)
        continue;
      std::string names;
      int shown = 0;
      for (Operation *op : forward)
        if (auto w = dyn_cast<WeightOp>(op); w && shown < 4) {
          names += (shown++ ? ", '" : "'") + w.getName().str() + "'";
        }
      InFlightDiagnostic d = func.emitError();
      if (i < frozenWhere.size())
        d << frozenWhere[i] << ": ";
      d << "the frozen pattern '" << frozen[i]
        << "' matches no initializer (they are named like " << names << ")";
      return d;
    }
    if (trained.empty())
      return func.emitError() << "nothing to train: every weight is frozen "
                                 "or not a float tensor";
    // A model stored in bf16 or f16 trains float32 master copies of its
    // weights (the runtime widens them when it loads them); the model reads
    // each through a cast to its own type, whose gradient is float32.
    for (WeightOp w : trained) {
      auto t = cast<RankedTensorType>(w.getType());
      if (!t.getElementType().isBF16() && !t.getElementType().isF16())
        continue;
      w.getResult().setType(t.clone(Float32Type::get(func.getContext())));
      OpBuilder wb(w->getContext());
      wb.setInsertionPointAfter(w);
      auto c = wb.create<CastOp>(w.getLoc(), t, w.getResult());
      if (Attribute scope = w->getAttr(ShoalDialect::kScopeAttr))
        c->setAttr(ShoalDialect::kScopeAttr, scope);
      w.getResult().replaceAllUsesExcept(c, c);
      auto it = llvm::find(forward, w.getOperation());
      forward.insert(std::next(it), c);
      active.insert(c.getResult());
    }
    if (!active.contains(*lossValue))
      return func.emitError() << "the loss does not depend on any trained "
                                 "weight";

    MLIRContext *ctx = func.getContext();
    OpBuilder b(ret);
    StringAttr backward = StringAttr::get(ctx, "backward");
    llvm::DenseMap<Value, Value> grads;
    // Marks the ops made since `before` as backward ops of `op`.
    auto tagSince = [&](Operation *before, Operation *op) {
      StringAttr s = op->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr);
      for (Operation *o = before ? before->getNextNode() : &body.front();
           o != ret; o = o->getNextNode()) {
        o->setAttr(ShoalDialect::kPhaseAttr, backward);
        if (s)
          o->setAttr(ShoalDialect::kScopeAttr, s);
      }
    };
    {
      Operation *before = ret->getPrevNode();
      auto type = cast<RankedTensorType>(lossValue->getType());
      auto seed = b.create<ConstantOp>(
          lossValue->getLoc(), type,
          DenseElementsAttr::get(type,
                                 b.getFloatAttr(type.getElementType(), 1.0)));
      // fp16 with loss scaling: shoal-run sets the seed to the current loss
      // scale every step and divides the gradients by it.
      if (lossScaleSeed)
        seed->setAttr(ShoalDialect::kLossScaleAttr, b.getUnitAttr());
      grads[*lossValue] = seed;
      tagSince(before, lossValue->getDefiningOp());
    }
    for (Operation *op : llvm::reverse(forward)) {
      if (isa<WeightOp, ConstantOp>(op))
        continue;
      SmallVector<Value> resultGrads;
      bool any = false;
      for (Value r : op->getResults()) {
        resultGrads.push_back(grads.lookup(r));
        any |= static_cast<bool>(resultGrads.back());
      }
      if (!any)
        continue;
      auto iface = dyn_cast<GradientOpInterface>(op);
      if (!iface)
        return op->emitError()
               << "'" << op->getName()
               << "' has no gradient rule, but the loss depends on it "
                  "through a trained weight";
      Operation *before = ret->getPrevNode();
      SmallVector<Value> operandGrads;
      if (failed(iface.buildGradient(b, resultGrads, operandGrads)))
        return failure();
      for (auto [v, gv] : llvm::zip(op->getOperands(), operandGrads)) {
        if (!gv || !active.contains(v))
          continue;
        if (gv.getType() != v.getType())
          return op->emitError()
                 << "gradient rule made a gradient of type " << gv.getType()
                 << " for an operand of type " << v.getType();
        Value &acc = grads[v];
        acc = acc ? b.create<AddOp>(op->getLoc(), v.getType(), acc, gv)
                        .getResult()
                  : gv;
      }
      tagSince(before, op);
    }

    // Mark the weights' gradients for shoal-optimizer. A float initializer
    // that no gradient reaches (a mask read through a comparison, position
    // ids cast to integers, a buffer of an output the loss does not read)
    // is not trained: it gets no update and no optimizer state. PyTorch
    // trains its nn.Parameters and never its buffers; ONNX keeps no such
    // mark, so "a gradient reaches it" stands in for "a parameter".
    Builder ab(ctx);
    llvm::SetVector<StringRef> reached, unreached;
    for (WeightOp w : trained) {
      Value gw = grads.lookup(w.getResult());
      if (!gw) {
        unreached.insert(w.getName());
        continue;
      }
      reached.insert(w.getName());
      Operation *def = gw.getDefiningOp();
      SmallVector<Attribute> names;
      if (auto list = def->getAttrOfType<ArrayAttr>(ShoalDialect::kGradOfAttr))
        names.append(list.begin(), list.end());
      names.push_back(ab.getStringAttr(w.getName()));
      def->setAttr(ShoalDialect::kGradOfAttr, ab.getArrayAttr(names));
      // An op of several results: which one each name's gradient is.
      if (def->getNumResults() > 1) {
        SmallVector<int64_t> results;
        if (auto list = def->getAttrOfType<DenseI64ArrayAttr>(
                ShoalDialect::kGradOfResultsAttr))
          llvm::append_range(results, list.asArrayRef());
        results.resize(names.size() - 1, 0);
        results.push_back(cast<OpResult>(gw).getResultNumber());
        def->setAttr(ShoalDialect::kGradOfResultsAttr,
                     ab.getDenseI64ArrayAttr(results));
      }
    }
    unreached.set_subtract(reached);
    if (reached.empty())
      return func.emitError()
             << "nothing to train: no gradient reaches any float "
                "initializer (the loss depends on them only through ops "
                "whose gradient is zero, such as comparisons, Floor or "
                "casts to integers)";
    if (!unreached.empty()) {
      untrained.assign(unreached.begin(), unreached.end());
      InFlightDiagnostic d = mlir::emitRemark(func.getLoc());
      d << "shoal-autodiff: " << unreached.size() << " float initializer"
        << (unreached.size() == 1 ? " gets" : "s get") << " no gradient and "
        << (unreached.size() == 1 ? "is" : "are")
        << " not trained (no differentiable path to the loss): "
        << formatNames(untrained);
    }

    // Drop the backward ops nothing reads (gradients of values that need
    // none, such as the inputs').
    SmallVector<Operation *> all;
    for (Operation &op : body.without_terminator())
      all.push_back(&op);
    for (Operation *op : llvm::reverse(all))
      if (op->hasAttr(ShoalDialect::kPhaseAttr) && op->use_empty() &&
          !op->hasAttr(ShoalDialect::kGradOfAttr))
        op->erase();
    return success();
  }
};

} // namespace
