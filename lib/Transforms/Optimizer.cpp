//===- Optimizer.cpp - Optimizer updates of trained weights -----*- C++ -*-===//
//
// For every weight gradient shoal-autodiff marked, adds the optimizer state
// (zero-initialized weights) and an in-place update op. Updates follow their
// weight's first user into its TaskGraph, in a phase of their own, so that
// in a pipeline they run once per step, after every micro-batch's backward.
// The importer's shoal.assign ops (BatchNorm running statistics) join that
// phase.
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/GlobPattern.h"

namespace shoal {
#define GEN_PASS_DEF_OPTIMIZERPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

struct OptimizerPass : public ::shoal::impl::OptimizerPassBase<OptimizerPass> {
  using OptimizerPassBase::OptimizerPassBase;

  SmallVector<llvm::GlobPattern> noDecayPatterns;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    auto training =
        module->getAttrOfType<DictionaryAttr>(ShoalDialect::kTrainingAttr);
    if (!training) {
      module.emitError() << "shoal-optimizer needs a training graph; run "
                            "shoal-autodiff first";
      return signalPassFailure();
    }
    if (optimizer != "adamw" && optimizer != "sgd") {
      module.emitError() << "unknown optimizer '" << optimizer
                         << "' (expected adamw or sgd)";
      return signalPassFailure();
    }
    auto positive = [&](StringRef name, double v, bool strict) {
      if (v > 0 || (!strict && v == 0))
        return true;
      module.emitError() << "optimizer option " << name << " must be "
                         << (strict ? "> 0" : ">= 0") << ", got " << v;
      return false;
    };
    if (!positive("lr", lr, true) || !positive("eps", eps, false) ||
        !positive("weight-decay", weightDecay, false) ||
        !positive("clip-norm", clipNorm, false) ||
        !positive("momentum", momentum, false) ||
        !positive("min-lr", minLr, false) ||
        !positive("warmup-steps", warmupSteps, false) ||
        !positive("total-steps", totalSteps, false))
      return signalPassFailure();
    if (lrSchedule != "cosine" && lrSchedule != "linear" &&
        lrSchedule != "constant") {
      module.emitError() << "unknown learning-rate schedule '" << lrSchedule
                         << "' (expected cosine, linear or constant)";
      return signalPassFailure();
    }
    for (const std::string &p : noDecay) {
      auto glob = llvm::GlobPattern::create(p);
      if (!glob) {
        module.emitError() << "no-decay pattern '" << p
                           << "': " << llvm::toString(glob.takeError());
        return signalPassFailure();
      }
      noDecayPatterns.push_back(std::move(*glob));
    }
    if (beta1 < 0 || beta1 >= 1 || beta2 < 0 || beta2 >= 1) {
      module.emitError() << "AdamW betas must be in [0, 1), got " << beta1
                         << " and " << beta2;
      return signalPassFailure();
    }
    for (auto func : module.getOps<func::FuncOp>())
      if (!func.isExternal())
        addUpdates(func);
    Builder b(module.getContext());
    NamedAttrList attrs(training);
    attrs.set("optimizer", b.getStringAttr(optimizer));
    attrs.set("grad_bucket_mb", b.getF64FloatAttr(gradBucketMb));
    module->setAttr(ShoalDialect::kTrainingAttr,
                    attrs.getDictionary(module.getContext()));
  }

  /// Calls `fn` on each forward op reading `w`, looking through weight
  /// views (shoal-fused-weight-views' reshapes) to their readers.
  static void forEachForwardUser(Operation *w,
                                 function_ref<void(Operation *)> fn) {
    for (Operation *user : w->getUsers()) {
      if (user->hasAttr(ShoalDialect::kPhaseAttr))
        continue;
      if (isWeightView(user))
        forEachForwardUser(user, fn);
      else
        fn(user);
    }
  }

  /// Weight decay applies to `w`: not to biases and norms (a weight of one
  /// dimension in the source model, or named *bias) unless decayAll, and
  /// not to a weight a no-decay pattern matches.
  bool decays(WeightOp w) const {
    // A block of an initializer (a fused projection computed by pieces) is
    // matched by its initializer's name.
    StringRef name = getSourceName(w);
    for (const llvm::GlobPattern &p : noDecayPatterns)
      if (p.match(name))
        return false;
    if (decayAll)
      return true;
    int64_t rank = cast<RankedTensorType>(w.getType()).getRank();
    if (auto source =
            w->getAttrOfType<DenseI64ArrayAttr>(ShoalDialect::kSourceShapeAttr))
      rank = static_cast<int64_t>(source.size());
    return rank > 1 && !name.ends_with("bias");
  }

  /// The optimizer's update of `w` by its gradient `g`, with state weights
  /// of its own.
  Operation *createUpdate(OpBuilder &b, WeightOp w, Value g) {
    double weightDecay = decays(w) ? this->weightDecay : 0.0;
    auto f64 = [&](double v) { return b.getF64FloatAttr(v); };
    auto i64 = [&](int64_t v) { return b.getI64IntegerAttr(v); };
    auto state = [&](StringRef prefix) {
      auto s = b.create<WeightOp>(w.getLoc(), w.getType(),
                                  (prefix + "/" + w.getName()).str());
      s->setAttr(ShoalDialect::kZeroInitAttr, b.getUnitAttr());
      return s.getResult();
    };
    if (optimizer == "adamw") {
      Value m = state("adam.m");
      Value v = state("adam.v");
      return b.create<AdamWOp>(
          w.getLoc(), w.getResult(), g, m, v, f64(lr), f64(beta1), f64(beta2),
          f64(eps), f64(weightDecay), f64(clipNorm), i64(warmupSteps),
          i64(totalSteps), f64(minLr), b.getStringAttr(lrSchedule));
    }
    return b.create<SGDOp>(w.getLoc(), w.getResult(), g, state("sgd.momentum"),
                           f64(lr), f64(momentum), f64(weightDecay),
                           f64(clipNorm), i64(warmupSteps), i64(totalSteps),
                           f64(minLr), b.getStringAttr(lrSchedule));
  }

  void addUpdates(func::FuncOp func) {
    Block &body = func.getBody().front();
    Operation *ret = body.getTerminator();
    MLIRContext *ctx = func.getContext();
    llvm::StringMap<WeightOp> weights;
    for (auto w : body.getOps<WeightOp>())
      weights.try_emplace(w.getName(), w);
    SmallVector<std::pair<WeightOp, Value>> updates;
    for (Operation &op : body.without_terminator()) {
      auto names = op.getAttrOfType<ArrayAttr>(ShoalDialect::kGradOfAttr);
      if (!names)
        continue;
      auto results =
          op.getAttrOfType<DenseI64ArrayAttr>(ShoalDialect::kGradOfResultsAttr);
      for (auto [i, name] : llvm::enumerate(names.getAsRange<StringAttr>())) {
        int64_t r = results && i < results.size() ? results[i] : 0;
        updates.push_back({weights.lookup(name.getValue()), op.getResult(r)});
      }
      op.removeAttr(ShoalDialect::kGradOfAttr);
      op.removeAttr(ShoalDialect::kGradOfResultsAttr);
    }
    OpBuilder b(ret);
    StringAttr phase = StringAttr::get(ctx, "optimizer");
    // In-place writes of untrained weights (BatchNorm's running statistics,
    // from the importer) run with the updates: once per step, after every
    // micro-batch's backward, in the scope of the weight's first reader.
    SmallVector<AssignOp> assigns(body.getOps<AssignOp>());
    for (AssignOp a : assigns)
      a->setAttr(ShoalDialect::kPhaseAttr, phase);
    for (AssignOp a : assigns) {
      a->moveBefore(ret);
      StringAttr scope;
      if (Operation *w = a.getWeight().getDefiningOp())
        forEachForwardUser(w, [&](Operation *user) {
          if (!scope)
            scope = user->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr);
        });
      if (scope)
        a->setAttr(ShoalDialect::kScopeAttr, scope);
    }
    auto module = func->getParentOfType<ModuleOp>();
    bool staged = isStaged(module);
    llvm::DenseMap<StringAttr, unsigned> stageOrder;
    if (auto list = module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr))
      for (auto [i, scope] : llvm::enumerate(list.getAsRange<ScopeAttr>()))
        stageOrder[scope.getName()] = i;
    for (auto [w, g] : updates) {
      // The scope of the weight's first forward user; in a pipeline, also
      // every other stage that reads the weight (tied embeddings), each of
      // which updates its own copy.
      SmallVector<StringAttr> scopes;
      bool first = true;
      forEachForwardUser(w, [&](Operation *user) {
        auto s = user->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr);
        if (first || (staged && s && !llvm::is_contained(scopes, s)))
          scopes.push_back(s);
        first = false;
      });
      if (scopes.empty())
        scopes.push_back(StringAttr());
      // The first stage's update is the primary one, the others mirror it.
      if (scopes.size() > 1)
        llvm::stable_sort(scopes, [&](StringAttr a, StringAttr b) {
          return stageOrder.lookup(a) < stageOrder.lookup(b);
        });
      for (auto [i, scope] : llvm::enumerate(scopes)) {
        Operation *update = createUpdate(b, w, g);
        update->setAttr(ShoalDialect::kPhaseAttr, phase);
        if (scope)
          update->setAttr(ShoalDialect::kScopeAttr, scope);
        if (i > 0)
          update->setAttr(ShoalDialect::kMirrorAttr, b.getUnitAttr());
      }
    }
  }
};

} // namespace
