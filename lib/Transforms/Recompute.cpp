//===- Recompute.cpp - Activation recomputation -----------------*- C++ -*-===//
//
// Megatron-LM's activation recomputation on the training graph: instead of
// keeping every forward value a backward op reads until the backward runs,
// keep each segment's inputs and recompute the rest right before the
// segment's backward. `full` makes a segment of each layer, `selective` of
// each attention core (the scores and probabilities, whose size grows with
// the square of the sequence). See the pass description in Passes.td and
// docs/Training.md "Recomputation".
//
//===----------------------------------------------------------------------===//

#include "Recompute.h"
#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

namespace shoal {
#define GEN_PASS_DEF_RECOMPUTEPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

bool shoal::hasOneUseBeforeRecompute(Value v) {
  if (!v.hasOneUse())
    return false;
  auto result = dyn_cast<OpResult>(v);
  if (!result)
    return true;
  auto multi =
      result.getOwner()->getAttrOfType<DenseI64ArrayAttr>(kMultiUseAttr);
  return !multi || !llvm::is_contained(multi.asArrayRef(),
                                       int64_t(result.getResultNumber()));
}

std::string shoal::getLayerKey(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '/');
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    StringRef p = parts[i];
    size_t j = p.size();
    while (j > 0 && llvm::isDigit(p[j - 1]))
      --j;
    if (j < p.size() && (j == 0 || p[j - 1] == '.' || p[j - 1] == '_'))
      return llvm::join(ArrayRef<StringRef>(parts).take_front(i + 1), "/");
  }
  return "";
}

namespace {

bool isForward(Operation *op) {
  return !op->hasAttr(ShoalDialect::kPhaseAttr) &&
         !op->hasTrait<OpTrait::IsTerminator>();
}

bool isBackward(Operation *op) {
  auto p = op->getAttrOfType<StringAttr>(ShoalDialect::kPhaseAttr);
  return p && p.getValue() == "backward";
}

/// Ops that are never recomputed: weights, constants and weight views
/// (persistent, or free to read), and ops with regions.
bool recomputable(Operation *op) {
  return !isa<WeightOp, ConstantOp>(op) && !isWeightView(op) &&
         op->getNumRegions() == 0 && op->getNumResults() > 0;
}

struct RecomputePass : public ::shoal::impl::RecomputePassBase<RecomputePass> {
  using RecomputePassBase::RecomputePassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (mode != "none" && mode != "full" && mode != "selective") {
      module.emitError() << "unknown recompute mode '" << mode
                         << "' (expected none, full or selective)";
      return signalPassFailure();
    }
    auto perScope = module->getAttrOfType<DictionaryAttr>(kScopeRecomputeAttr);
    if (mode == "none" && !perScope)
      return;
    if (!module->hasAttr(ShoalDialect::kTrainingAttr)) {
      module.emitError() << "shoal-recompute needs a training module (run "
                            "shoal-autodiff first)";
      return signalPassFailure();
    }
    auto modeOf = [&](Operation *op) -> StringRef {
      if (perScope)
        if (auto s = op->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr))
          if (auto m = perScope.getAs<StringAttr>(s.getValue()))
            return m.getValue();
      return mode;
    };

    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      // Segments: key -> ops in block order.
      llvm::DenseMap<Operation *, unsigned> segmentOf;
      SmallVector<SmallVector<Operation *>> segments;
      llvm::StringMap<unsigned> byKey;
      Block &body = func.getBody().front();
      for (Operation &op : body) {
        if (!isForward(&op) || !recomputable(&op) || modeOf(&op) != "full")
          continue;
        std::string key = getLayerKey(onnxNodeName(&op));
        if (key.empty())
          continue;
        if (auto s = op.getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr))
          key = s.getValue().str() + "|" + key;
        auto [it, fresh] = byKey.try_emplace(key, segments.size());
        if (fresh)
          segments.emplace_back();
        segments[it->second].push_back(&op);
        segmentOf[&op] = it->second;
      }
      for (auto softmax : llvm::to_vector(body.getOps<SoftmaxOp>())) {
        if (!isForward(softmax) || modeOf(softmax) != "selective")
          continue;
        SmallVector<Operation *> core = attentionCore(softmax);
        if (core.empty() || llvm::any_of(core, [&](Operation *op) {
              return segmentOf.count(op);
            }))
          continue;
        llvm::sort(core, [](Operation *a, Operation *b) {
          return a->isBeforeInBlock(b);
        });
        for (Operation *op : core)
          segmentOf[op] = segments.size();
        segments.push_back(core);
      }

      unsigned clonedOps = 0, recomputedValues = 0, usedSegments = 0;
      Builder ab(module.getContext());
      for (auto [index, ops] : llvm::enumerate(segments)) {
        unsigned seg = index;
        auto inSegment = [&](Operation *op) {
          auto it = segmentOf.find(op);
          return it != segmentOf.end() && it->second == seg;
        };
        // A value is internal when no forward op outside the segment (nor
        // the function's return) reads it; outputs stay kept.
        auto internal = [&](Value v) {
          for (Operation *user : v.getUsers())
            if (user->hasTrait<OpTrait::IsTerminator>() ||
                (isForward(user) && !inSegment(user)))
              return false;
          return true;
        };
        // The internal values backward ops read.
        llvm::SetVector<Value> needed;
        for (Operation *op : ops)
          for (Value r : op->getResults())
            if (llvm::any_of(r.getUsers(), isBackward) && internal(r))
              needed.insert(r);
        if (needed.empty())
          continue;
        // Recompute right before the first backward op reading one, from
        // the segment's kept values: the ops making the needed values and,
        // through internal operands, their producers.
        Operation *insertAt = nullptr;
        for (Value v : needed)
          for (Operation *user : v.getUsers())
            if (isBackward(user) &&
                (!insertAt || user->isBeforeInBlock(insertAt)))
              insertAt = user;
        llvm::SetVector<Operation *> clone;
        SmallVector<Operation *> work;
        for (Value v : needed)
          work.push_back(v.getDefiningOp());
        while (!work.empty()) {
          Operation *op = work.pop_back_val();
          if (!clone.insert(op))
            continue;
          for (Value o : op->getOperands())
            if (Operation *def = o.getDefiningOp();
                def && inSegment(def) && internal(o))
              work.push_back(def);
        }
        SmallVector<Operation *> order(clone.begin(), clone.end());
        llvm::sort(order, [](Operation *a, Operation *b) {
          return a->isBeforeInBlock(b);
        });
        // Fusion must see the users the values had before (see
        // hasOneUseBeforeRecompute); clones copy the mark.
        for (Operation *op : order) {
          SmallVector<int64_t> multi;
          for (OpResult r : op->getResults())
            if (!r.hasOneUse())
              multi.push_back(r.getResultNumber());
          if (!multi.empty())
            op->setAttr(kMultiUseAttr, ab.getDenseI64ArrayAttr(multi));
        }
        OpBuilder b(insertAt);
        IRMapping map;
        StringAttr backward = b.getStringAttr("backward");
        for (Operation *op : order) {
          Operation *copy = b.clone(*op, map);
          copy->setAttr(ShoalDialect::kPhaseAttr, backward);
          copy->setAttr(kRecomputedAttr, b.getUnitAttr());
        }
        for (Value v : needed)
          v.replaceUsesWithIf(map.lookup(v), [&](OpOperand &use) {
            Operation *user = use.getOwner();
            return isBackward(user) && !user->hasAttr(kRecomputedAttr);
          });
        clonedOps += order.size();
        recomputedValues += needed.size();
        ++usedSegments;
      }
      if (usedSegments)
        emitRemark(func.getLoc())
            << "shoal-recompute: " << recomputedValues
            << " forward values are recomputed in the backward by " << clonedOps
            << " cloned ops, in " << usedSegments << " segments";
    }
  }
};

} // namespace

// Megatron's selective recomputation: the attention core around a forward
// Softmax, `MatMul(q, kt) -> [Mul|Div scale] -> [Add mask | Where] ->
// Softmax -> MatMul(., v)`, with Casts anywhere (Hugging Face's), or
// nothing when the chain is not that.
SmallVector<Operation *> shoal::attentionCore(Operation *softmax) {
  SmallVector<Operation *> core = {softmax};
  Value x = softmax->getOperand(0);
  for (int hops = 0; hops < 6; ++hops) {
    Operation *def = x.getDefiningOp();
    if (!def || !isForward(def))
      return {};
    if (isa<MatMulOp>(def)) {
      core.push_back(def);
      break;
    }
    if (!isa<AddOp, SubOp, MulOp, DivOp, WhereOp, CastOp>(def))
      return {};
    core.push_back(def);
    // Follow the operand of the chain's own type (the other one is the
    // scale or a broadcast mask).
    Value next = isa<CastOp>(def) ? def->getOperand(0) : Value();
    if (!next)
      for (Value o : def->getOperands())
        if (o.getType() == x.getType() && o.getDefiningOp() &&
            !isa<ConstantOp, WeightOp>(o.getDefiningOp()))
          next = next ? Value() : o;
    if (!next)
      return {};
    x = next;
  }
  if (!isa<MatMulOp>(core.back()))
    return {};
  // Forward: through Casts to the one MatMul with v.
  Value probs = softmax->getResult(0);
  for (int hops = 0; hops < 3; ++hops) {
    Operation *next = nullptr;
    for (Operation *user : probs.getUsers())
      if (isForward(user)) {
        if (next)
          return {};
        next = user;
      }
    if (!next || !isa<MatMulOp, CastOp>(next))
      return {};
    core.push_back(next);
    if (isa<MatMulOp>(next))
      return core;
    probs = next->getResult(0);
  }
  return {};
}
