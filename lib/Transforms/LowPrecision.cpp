//===- LowPrecision.cpp - bf16/fp16 training end to end ---------*- C++ -*-===//
//
// shoal-mixed-precision's default mode (training config `precision:
// bf16|fp16`, docs/Training.md "Mixed precision"), on the local programs
// after shoal-partition and shoal-zero, as Megatron-LM and
// TransformerEngine train:
//
// - every float32 activation of the forward and backward TaskGraphs (and
//   the collectives and transfers that move them) is in the low type;
// - the weights stay float32 (master weights); a TaskGraph reads each
//   weight through one cast to the low type;
// - weight gradients are float32: the ops that produce them (a weight
//   gradient product, a bias gradient's reduction, a norm's scale gradient,
//   an embedding's scatter) read low operands and write float32, and the
//   sums over micro-batches and replicas, ZeRO's reduce-scatter, a tied
//   weight's sum and the optimizer all run in float32 (Megatron's
//   accumulate_allreduce_grads_in_fp32);
// - float32 inside the ops that need it: softmax and norm statistics and
//   the loss compute in float32 in their kernels (the runtime stages low
//   operands through float32 and rounds the result once); the loss and
//   every scalar stay float32, as do the values the model returns;
// - ops the runtime computes in float32 only (convolutions, batch norm)
//   read their operands through casts to float32; the vocabulary-parallel
//   loss reads low logits and keeps its statistics float32.
//
// Casts are made once per value, type and TaskGraph, right after the value;
// a constant is rewritten in the low type instead of cast (finite values
// beyond its range saturated to its largest).
//
//===----------------------------------------------------------------------===//

#include "MixedPrecision.h"
#include "ShardingUtils.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace shoal;

namespace {

RankedTensorType floatTensor(Type t) {
  auto r = dyn_cast<RankedTensorType>(t);
  return r && isa<FloatType>(r.getElementType()) ? r : RankedTensorType();
}

/// One element: the loss, its scale and seed, norms; they stay float32.
bool isScalar(RankedTensorType t) {
  return t.hasStaticShape() && t.getNumElements() == 1;
}

/// ONNX op types the runtime computes in float32 only.
bool onnxF32Only(StringRef type) {
  return llvm::StringSwitch<bool>(type)
      .Cases("Conv", "ConvTranspose", "ConvInputGrad", "ConvWeightGrad", true)
      .Cases("BatchNormalization", "GlobalAveragePool", "GlobalMaxPool", true)
      .Cases("MaxPoolGrad", "AveragePoolGrad", "ScatterElements", "ScatterND",
             true)
      .Default(false);
}

/// Ops that compute in float32: their float operands are cast to it and
/// their results stay float32.
bool computesInF32(Operation *op) {
  if (isa<AdamWOp, SGDOp, AssignOp>(op))
    return true;
  auto onnx = dyn_cast<OnnxOp>(op);
  return onnx && onnxF32Only(onnx.getOpType());
}

/// Ops whose float result is float32 from low operands: the loss, and the
/// producers of weight gradients whose kernels accumulate in float32.
bool writesF32(Operation *op) {
  return isa<SoftmaxCrossEntropyOp, LayerNormScaleGradOp, GatherGradOp>(op);
}

/// Ops a weight gradient passes through unchanged in kind (sums, layouts,
/// views): walking back from where a gradient must be float32, these are
/// float32 too, up to the op that produces the gradient.
bool isGradientPlumbing(Operation *op) {
  if (isa<AllReduceOp, ReduceScatterOp, LocalSliceOp, AllGatherOp, TransposeOp,
          ReshapeOp, AddOp>(op))
    return true;
  // A model stored in 16 bits: its master weight's gradient comes through
  // the gradient of the cast its reader reads the weight through.
  if (auto c = dyn_cast<CastOp>(op))
    return isa<FloatType>(getElementTypeOrSelf(c.getInput().getType()));
  auto onnx = dyn_cast<OnnxOp>(op);
  return onnx && llvm::is_contained({"Concat", "Slice", "Split", "Pad",
                                     "Squeeze", "Unsqueeze", "Identity"},
                                    onnx.getOpType());
}

/// An operand that may keep its own float type (the kernel stages it):
/// norm scales and biases, GELU's bias, attention's mask.
bool mayKeepType(Operation *op, unsigned index) {
  if (isa<LayerNormOp>(op))
    return index >= 1;
  if (isa<AddLayerNormOp>(op))
    return index >= 2;
  if (isa<GeluOp>(op))
    return index == 1;
  if (isa<GeluGradOp>(op))
    return index == 2;
  if (isa<AttentionOp>(op))
    return index == 3;
  if (isa<AttentionGradOp>(op))
    return index == 4;
  if (isa<LayerNormGradOp>(op))
    return index == 1;
  if (isa<SoftmaxCrossEntropyGradOp>(op))
    return index == 2; // dloss: a float32 scalar
  return false;
}

struct Lowering {
  Type low;
  Type f32;
  /// Values that must stay float32 (weight gradients on their way to the
  /// optimizer, values the model returns).
  llvm::DenseSet<Value> keep;
  /// Casts made, by value, target type and block.
  llvm::DenseMap<std::tuple<Value, Type, Block *>, Value> casts;

  explicit Lowering(Type low)
      : low(low), f32(Float32Type::get(low.getContext())) {}

  /// Marks `v` float32 and walks back through gradient plumbing (across
  /// TaskGraph results, bridges and block arguments).
  void keepF32(Value v) {
    SmallVector<Value> work = {v};
    while (!work.empty()) {
      Value x = work.pop_back_val();
      if (!floatTensor(x.getType()) || !keep.insert(x).second)
        continue;
      if (auto arg = dyn_cast<BlockArgument>(x)) {
        if (auto tg = dyn_cast<TaskGraphOp>(arg.getOwner()->getParentOp()))
          work.push_back(tg.getInputs()[arg.getArgNumber()]);
        continue;
      }
      Operation *def = x.getDefiningOp();
      if (auto tg = dyn_cast<TaskGraphOp>(def)) {
        work.push_back(
            tg.getYield().getOperand(cast<OpResult>(x).getResultNumber()));
      } else if (auto bridge = dyn_cast<BridgeOp>(def)) {
        work.push_back(bridge.getInput());
      } else if (isGradientPlumbing(def)) {
        for (Value operand : def->getOperands())
          work.push_back(operand);
      }
    }
  }

  static bool isOptimizerPhase(Operation *op) {
    auto phase = op->getAttrOfType<StringAttr>(ShoalDialect::kPhaseAttr);
    return phase && phase.getValue() == "optimizer";
  }

  /// The float32 seeds: what optimizer TaskGraphs and optimizer ops read
  /// (walked back to the gradients' producers), and what the function
  /// returns (only that value: its producer computes float32).
  void findKept(func::FuncOp func) {
    func.walk([&](Operation *op) {
      if (auto tg = dyn_cast<TaskGraphOp>(op)) {
        if (isOptimizerPhase(tg))
          for (Value in : tg.getInputs())
            keepF32(in);
        return;
      }
      if (auto parent = op->getParentOfType<TaskGraphOp>();
          parent && isOptimizerPhase(parent))
        return;
      if (isa<AdamWOp, SGDOp, AssignOp>(op) ||
          (isOptimizerPhase(op) && !isa<TaskGraphOp>(op)))
        for (Value in : op->getOperands())
          keepF32(in);
      // The loss's gradient seed (one per label) is float32, as the loss.
      if (auto g = dyn_cast<SoftmaxCrossEntropyGradOp>(op))
        keepF32(g.getDloss());
    });
    for (Operation &op : func.getBody().front())
      if (auto ret = dyn_cast<func::ReturnOp>(op))
        for (Value v : ret.getOperands()) {
          Value inner = v;
          if (auto tg = v.getDefiningOp<TaskGraphOp>())
            inner =
                tg.getYield().getOperand(cast<OpResult>(v).getResultNumber());
          keep.insert(v);
          keep.insert(inner);
        }
  }

  /// `v` as `type` (same shape) in front of `user`'s block: a constant
  /// rewritten in that type, or one cast right after `v` per block.
  Value convert(Value v, Type elem, Operation *user) {
    auto from = cast<RankedTensorType>(v.getType());
    RankedTensorType type = from.clone(elem);
    Block *block = user->getBlock();
    Value &made = casts[{v, elem, block}];
    if (made)
      return made;
    OpBuilder b(user->getContext());
    Operation *def = v.getDefiningOp();
    if (def && def->getBlock() == block)
      b.setInsertionPointAfter(def);
    else
      b.setInsertionPointToStart(block);
    if (auto c = v.getDefiningOp<ConstantOp>())
      if (auto dense = dyn_cast<DenseFPElementsAttr>(c.getValue())) {
        auto fe = cast<FloatType>(elem);
        // A finite value beyond the low type's range saturates to its
        // largest (an exported mask's float32 lowest becomes bf16's, as
        // the model computes it in bf16: torch.finfo(dtype).min), where
        // rounding would make it infinite, and (1 - mask) * lowest NaN.
        auto mapped = dense.mapValues(elem, [&](const APFloat &x) {
          APFloat y = x;
          bool lost;
          y.convert(fe.getFloatSemantics(), APFloat::rmNearestTiesToEven,
                    &lost);
          if (y.isInfinity() && x.isFinite())
            y = APFloat::getLargest(fe.getFloatSemantics(), x.isNegative());
          return y.bitcastToAPInt();
        });
        auto k = b.create<ConstantOp>(c.getLoc(), type, mapped);
        for (StringRef name :
             {ShoalDialect::kPhaseAttr.data(), ShoalDialect::kScopeAttr.data()})
          if (Attribute a = c->getAttr(name))
            k->setAttr(name, a);
        made = k;
        return made;
      }
    made =
        precisionCast(b, v, type, def && def->getBlock() == block ? def : user);
    return made;
  }

  /// A cast of `v` to `type` at `b`'s insertion point, in the phase and
  /// scope of `tagFrom`, laid out as `v`.
  static Value precisionCast(OpBuilder &b, Value v, RankedTensorType type,
                             Operation *tagFrom) {
    auto castOp = b.create<CastOp>(v.getLoc(), type, v);
    for (StringRef name :
         {ShoalDialect::kPhaseAttr.data(), ShoalDialect::kScopeAttr.data()})
      if (Attribute a = tagFrom->getAttr(name))
        castOp->setAttr(name, a);
    castOp->setAttr(ShoalDialect::kShardingAttr,
                    b.getArrayAttr({getValueSharding(v)}));
    castOp->setAttr(kPrecisionCastAttr, b.getUnitAttr());
    copyUnevenLayout(v, castOp);
    return castOp.getResult();
  }

  /// Whether every reader of `v` takes it in its own type (a norm's scale
  /// gathered by ZeRO-3 stays float32, as the weight itself would be read).
  static bool onlyReadAsIs(Value v) {
    return !v.use_empty() && llvm::all_of(v.getUses(), [](OpOperand &u) {
      return mayKeepType(u.getOwner(), u.getOperandNumber());
    });
  }

  void setElem(Value v, Type elem) {
    auto t = floatTensor(v.getType());
    if (t && t.getElementType() != elem)
      v.setType(t.clone(elem));
  }

  /// Rewrites one op of a TaskGraph body (or of a function without
  /// TaskGraphs): its results' types, then its operands to match.
  void rewrite(Operation *op, bool f32Region) {
    if (isa<WeightOp, ConstantOp, YieldOp, SendOp, RecvOp, TaskGraphOp,
            BridgeOp, func::ReturnOp>(op))
      return;
    bool inF32 = f32Region || computesInF32(op) || isOptimizerPhase(op);
    // The vocabulary-parallel loss reads its logits in their type (low) and
    // keeps its statistics, loss and seed float32; its gradient comes out
    // in the logits' type.
    if (isa<VocabMaxOp, VocabStatsOp, VocabCrossEntropyOp,
            VocabCrossEntropyGradOp>(op)) {
      for (OpOperand &use : op->getOpOperands()) {
        auto t = floatTensor(use.get().getType());
        bool logits =
            use.getOperandNumber() == 0 && !isa<VocabCrossEntropyOp>(op);
        if (t && !logits && !t.getElementType().isF32())
          use.set(convert(use.get(), f32, op));
      }
      if (isa<VocabCrossEntropyGradOp>(op))
        setElem(op->getResult(0),
                floatTensor(op->getOperand(0).getType()).getElementType());
      return;
    }
    // A gather keeps its table's type: an embedding table is not cast
    // whole. Its rows are activations: one cast right after the gather,
    // which every reader reads (a tensor-parallel sum or scatter moves
    // them low, as Megatron-LM's vocabulary-parallel embedding; a reader
    // in another task or stage is handed them low).
    if (auto gather = dyn_cast<GatherOp>(op)) {
      auto t = floatTensor(gather.getData().getType());
      if (!t)
        return;
      Value rows = gather.getResult();
      setElem(rows, t.getElementType());
      if (inF32 || keep.contains(rows) || !t.getElementType().isF32() ||
          rows.use_empty() || onlyReadAsIs(rows))
        return;
      Value lowRows = convert(rows, low, gather);
      rows.replaceAllUsesExcept(lowRows, lowRows.getDefiningOp());
      return;
    }
    // A collective moves its operand in the operand's type (statistics of
    // the vocabulary-parallel loss stay float32, activations low), except
    // ZeRO-3's gather of a float32 weight, which gathers in the type its
    // readers take.
    if (isa<AllReduceOp, AllGatherOp, ReduceScatterOp, AllToAllOp,
            LocalSliceOp>(op) &&
        !(isa<AllGatherOp>(op) &&
          op->getOperand(0).getDefiningOp<WeightOp>())) {
      Value in = op->getOperand(0), out = op->getResult(0);
      auto t = floatTensor(in.getType());
      if (!t)
        return;
      Type elem = keep.contains(out) || inF32 ? f32 : t.getElementType();
      setElem(out, elem);
      if (t.getElementType() != elem)
        op->setOperand(0, convert(in, elem, op));
      return;
    }
    // Results: low unless float32 is needed (scalars: the loss and its
    // pieces).
    if (!inF32 && !writesF32(op))
      for (Value r : op->getResults()) {
        auto t = floatTensor(r.getType());
        if (t && t.getElementType().isF32() && !isScalar(t) &&
            !keep.contains(r) && !onlyReadAsIs(r))
          r.setType(t.clone(low));
      }
    if (isa<CastOp>(op))
      return; // converts to its result's type, whatever its input's
    Type resultElem;
    for (Value r : op->getResults())
      if (auto t = floatTensor(r.getType())) {
        resultElem = t.getElementType();
        break;
      }
    bool anyLow = llvm::any_of(op->getOperands(), [&](Value v) {
      auto t = floatTensor(v.getType());
      return t && t.getElementType() == low;
    });
    for (OpOperand &use : op->getOpOperands()) {
      auto t = floatTensor(use.get().getType());
      if (!t)
        continue;
      Type have = t.getElementType(), want;
      if (inF32)
        want = f32;
      else if (isa<MatMulOp, GemmOp>(op))
        want = low; // products run in the low type, whatever their result
      else if (mayKeepType(op, use.getOperandNumber()))
        continue;
      else if (isa<ReduceSumOp, ReduceMeanOp>(op))
        want = have == low ? low : resultElem; // low in, float32 out is fine
      else if (writesF32(op))
        want = low;
      else if (resultElem)
        want = resultElem;
      else if (anyLow)
        want = low; // a comparison of low values
      else
        continue;
      if (want && have != want)
        use.set(convert(use.get(), want, op));
    }
  }

  void rewriteBlock(Block &block, bool f32Region) {
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    for (Operation *op : ops)
      rewrite(op, f32Region);
  }

  void run(func::FuncOp func) {
    findKept(func);
    Block &entry = func.getBody().front();
    bool hasTaskGraphs = !entry.getOps<TaskGraphOp>().empty();
    if (!hasTaskGraphs) {
      rewriteBlock(entry, /*f32Region=*/false);
      eraseDeadConstants(func);
      eraseIdentityCasts(func);
      castBeforeGather(func);
      sinkArgumentCasts(func);
      return;
    }
    for (Operation &op : entry) {
      if (auto bridge = dyn_cast<BridgeOp>(op)) {
        bridge.getResult().setType(bridge.getInput().getType());
        continue;
      }
      auto tg = dyn_cast<TaskGraphOp>(op);
      if (!tg)
        continue;
      Block &body = tg.getBody().front();
      for (auto [outer, arg] : llvm::zip(tg.getInputs(), body.getArguments()))
        arg.setType(outer.getType());
      rewriteBlock(body, isOptimizerPhase(tg));
      for (auto [result, yielded] :
           llvm::zip(tg.getResults(), tg.getYield().getOperands()))
        result.setType(yielded.getType());
    }
    eraseDeadConstants(func);
    eraseIdentityCasts(func);
    castBeforeGather(func);
    sinkArgumentCasts(func);
  }

  /// A low copy of a lookup (`cast(gather(W, ids))`) that holds more
  /// elements than what it looks up in (a stack of experts' matrices
  /// gathered per token, transformers 5's batched_mm experts) is a lookup
  /// in the low copy of W: W is rounded once, and the float32 lookup is
  /// never made. (An embedding table, larger than its lookup, keeps the
  /// cast after it.)
  void castBeforeGather(func::FuncOp func) {
    SmallVector<CastOp> casts;
    func.walk([&](CastOp c) {
      auto g = c.getInput().getDefiningOp<GatherOp>();
      if (!c->hasAttr(kPrecisionCastAttr) || !g || !g->hasOneUse())
        return;
      auto data = cast<RankedTensorType>(g->getOperand(0).getType());
      auto out = cast<RankedTensorType>(g->getResult(0).getType());
      if (data.hasStaticShape() && out.hasStaticShape() &&
          data.getNumElements() < out.getNumElements())
        casts.push_back(c);
    });
    // One low copy of a table however many lookups read it (in a block).
    llvm::DenseMap<std::tuple<Value, Type, Block *>, Value> made;
    for (CastOp c : casts) {
      Operation *g = c.getInput().getDefiningOp();
      Value data = g->getOperand(0);
      Type elem = cast<RankedTensorType>(c.getType()).getElementType();
      Value &copy = made[{data, elem, g->getBlock()}];
      if (!copy || !copy.getDefiningOp()->isBeforeInBlock(g)) {
        OpBuilder b(g);
        copy = precisionCast(
            b, data, cast<RankedTensorType>(data.getType()).clone(elem), g);
      }
      g->setOperand(0, copy);
      g->getResult(0).setType(c.getType());
      c.getResult().replaceAllUsesWith(g->getResult(0));
      c->erase();
    }
  }

  /// The low copy of a block argument (a graph input: the labels, a mask)
  /// is made right before its first reader, not at the top of the block,
  /// so that it does not hold memory through the ops before (the labels'
  /// copy through the whole forward).
  void sinkArgumentCasts(func::FuncOp func) {
    SmallVector<CastOp> casts;
    func.walk([&](CastOp c) {
      auto arg = dyn_cast<BlockArgument>(c.getInput());
      if (c->hasAttr(kPrecisionCastAttr) && arg &&
          arg.getOwner() == c->getBlock() && !c->use_empty())
        casts.push_back(c);
    });
    for (CastOp c : casts) {
      Block *block = c->getBlock();
      Operation *first = nullptr;
      for (Operation *user : c->getUsers()) {
        Operation *at = block->findAncestorOpInBlock(*user);
        if (at && (!first || at->isBeforeInBlock(first)))
          first = at;
      }
      if (first && first != c.getOperation())
        c->moveBefore(first);
    }
  }

  /// Casts to their operand's type (the model's float32 casts, now
  /// between two low values): their readers read the operand.
  void eraseIdentityCasts(func::FuncOp func) {
    SmallVector<CastOp> identity;
    func.walk([&](CastOp c) {
      if (c.getInput().getType() == c.getType())
        identity.push_back(c);
    });
    for (CastOp c : identity) {
      c.getResult().replaceAllUsesWith(c.getInput());
      c->erase();
    }
  }

  /// The float32 constants whose readers all read a low copy now.
  void eraseDeadConstants(func::FuncOp func) {
    SmallVector<Operation *> dead;
    func.walk([&](ConstantOp c) {
      if (c->use_empty())
        dead.push_back(c);
    });
    for (Operation *op : dead)
      op->erase();
  }
};

} // namespace

void shoal::lowerToLowPrecision(ModuleOp module, Type low) {
  for (auto func : module.getOps<func::FuncOp>()) {
    if (func.isExternal())
      continue;
    Lowering l(low);
    l.run(func);
  }
}
