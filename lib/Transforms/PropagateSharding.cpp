//===- PropagateSharding.cpp - Complete shardings in TaskGraphs -*- C++ -*-===//
//
// Decides, op by op, which mesh axes split each factor of the op's sharding
// rule. Activations carry their shardings forward; weights take whatever
// their user needs. In a split TaskGraph, the first contraction that meets a
// weight while `tp` is unused splits the weight's largest free parallel
// factor over `tp`; the next contraction then finds its contracted factor
// already split and leaves partial sums. That is Megatron-LM's column/row
// pairing, found from the rules alone.
//
//===----------------------------------------------------------------------===//

#include "Recompute.h"
#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/bit.h"

#include <deque>

namespace shoal {
#define GEN_PASS_DEF_PROPAGATESHARDINGPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// A lookup of whole matrices in a stack of them (getGatheredWeight). Like
/// a weight view, it is laid out by its user: a product splits the matrices
/// it reads the way Megatron-LM's expert tensor parallelism splits each
/// expert's (the first product's columns, the second's rows), and each rank
/// looks up its blocks.
bool isGatheredWeight(Operation *op) {
  return static_cast<bool>(getGatheredWeight(op));
}

/// A weight view (a reshape or transpose of a weight, isWeightView) or a
/// gathered weight (isGatheredWeight). It is laid out by its user, like
/// the weight.
bool laidOutByUser(Operation *op) {
  return isWeightView(op) || isGatheredWeight(op);
}

Operation *getWeightView(Value v) {
  Operation *def = v.getDefiningOp();
  return laidOutByUser(def) ? def : nullptr;
}

bool isWeightLike(Value v) {
  Operation *def = v.getDefiningOp();
  return def && (isa<WeightOp, ConstantOp>(def) || getWeightView(v));
}

/// A weight-like value, or a transpose of one (the backward of a batched
/// product of gathered matrices multiplies by their transpose): a product
/// contracting a split with it leaves partial sums, as a row-parallel one.
bool readsWeight(Value v) {
  for (int hops = 0; hops < 8; ++hops) {
    if (isWeightLike(v))
      return true;
    auto t = v.getDefiningOp<TransposeOp>();
    if (!t)
      return false;
    v = t.getInput();
  }
  return false;
}

/// A weight whose layout an earlier user (or the same weight in an earlier
/// TaskGraph of its stage) decided: in training, a weight is one value per
/// TaskGraph read by its forward op, its backward ops and its update, which
/// must all agree on its layout. It then brings its layout like an
/// activation.
bool hasDecidedLayout(Value v) {
  if (auto view = getWeightView(v))
    return view->hasAttr(ShoalDialect::kShardingAttr);
  auto w = v.getDefiningOp<WeightOp>();
  return w && w->hasAttr(ShoalDialect::kShardingAttr);
}

/// The factor of a dimension made of factors `df` that a split with `outer`
/// runs lies on: the one starting where the runs end (the major factor of
/// a plain split), and its own outer count, above 1 when the runs end
/// inside it. {-1, 1} if the runs end on no factor.
std::pair<int, int64_t> findSplitFactor(const ShardingRule &rule,
                                        const DimFactors &df, int64_t outer) {
  int64_t before = 1;
  for (int g : df) {
    int64_t size = rule.factorSizes[g];
    if (outer == before)
      return {g, 1};
    if (outer % before == 0 && outer < before * size &&
        size % (outer / before) == 0)
      return {g, outer / before};
    before *= size;
  }
  return {-1, 1};
}

/// Lays out weight view `view` so that its result has `want` (as far as a
/// block split of the weight gives it) and its weight the matching block
/// split.
void decideView(Operation *view, ShardingAttr want) {
  MLIRContext *ctx = view->getContext();
  ShardingRule rule = cast<ShardingRuleOpInterface>(view).getShardingRule();
  FactorAxes axes(rule.getNumFactors());
  FactorOuter outer(rule.getNumFactors(), 1);
  for (auto [d, df] : llvm::enumerate(rule.results[0])) {
    SmallVector<StringRef> a = want.getDimAxes(d);
    if (a.empty())
      continue;
    auto [f, fo] = findSplitFactor(rule, df, want.getDimOuter(d));
    if (f >= 0 && axes[f].empty()) {
      axes[f] = a;
      outer[f] = fo;
    }
  }
  ShardingAttr weight =
      shardingFromFactors(ctx, rule, rule.operands[0], axes, outer);
  if (weight.isStrided()) {
    axes.assign(rule.getNumFactors(), {});
    outer.assign(rule.getNumFactors(), 1);
    weight = shardingFromFactors(ctx, rule, rule.operands[0], axes, outer);
  }
  Builder b(ctx);
  SmallVector<Attribute> factorAttrs;
  for (auto &a : axes)
    factorAttrs.push_back(b.getStrArrayAttr(a));
  view->setAttr(ShoalDialect::kFactorShardingAttr, b.getArrayAttr(factorAttrs));
  if (llvm::any_of(outer, [](int64_t o) { return o > 1; }))
    view->setAttr(kFactorOuterAttr, b.getDenseI64ArrayAttr(outer));
  view->setAttr(ShoalDialect::kShardingAttr,
                b.getArrayAttr({shardingFromFactors(ctx, rule, rule.results[0],
                                                    axes, outer)}));
  view->getOperand(0).getDefiningOp()->setAttr(ShoalDialect::kShardingAttr,
                                               b.getArrayAttr({weight}));
}

/// Removes `axis` from every dimension of `s`.
ShardingAttr dropAxis(ShardingAttr s, StringRef axis) {
  SmallVector<SmallVector<StringRef>> dims;
  for (unsigned d = 0; d < s.getDims().size(); ++d) {
    auto &out = dims.emplace_back();
    for (StringRef a : s.getDimAxes(d))
      if (a != axis)
        out.push_back(a);
  }
  return ShardingAttr::get(s.getContext(), dims);
}

/// A replicate TaskGraph splits the batch over all its axes. A value that
/// arrives split over only some of them on its batch dimension `bd` (0,
/// or 1 for sequence-first models; after a split TaskGraph, which keeps its
/// outputs whole over tp) is sliced further, at no communication cost,
/// instead of being computed redundantly. With `wholeIsBatch`, a batch
/// dimension that arrives whole is sliced too.
ShardingAttr splitBatchFurther(ShardingAttr s, Value v,
                               ArrayRef<StringRef> batchAxes, MeshAttr mesh,
                               bool wholeIsBatch = false, unsigned bd = 0) {
  auto type = cast<RankedTensorType>(v.getType());
  if (type.getRank() <= bd || batchAxes.empty())
    return s;
  SmallVector<StringRef> cur = s.getDimAxes(bd);
  if ((cur.empty() && !wholeIsBatch) || cur.size() >= batchAxes.size() ||
      !llvm::equal(cur, batchAxes.take_front(cur.size())))
    return s;
  for (unsigned d = 0; d < s.getDims().size(); ++d)
    for (StringRef a : s.getDimAxes(d))
      if (d != bd && llvm::is_contained(batchAxes, a))
        return s;
  if (type.getDimSize(bd) % getAxesSize(mesh, batchAxes) != 0)
    return s;
  SmallVector<SmallVector<StringRef>> dims;
  for (unsigned d = 0; d < s.getDims().size(); ++d)
    dims.push_back(d == bd ? SmallVector<StringRef>(batchAxes)
                           : s.getDimAxes(d));
  return ShardingAttr::get(s.getContext(), dims);
}

/// The layout a value laid out as `s` on another device set takes on
/// `mesh`. A split TaskGraph keeps every cut its mesh can make (a hidden
/// dimension split over tp arrives split, and its first contraction sums
/// partial products); a replicate TaskGraph keeps only the batch cut over
/// tp. A split TaskGraph takes the batch whole over tp (tp is for its
/// weights). The micro-batch and data-parallel cuts always stay, wherever
/// they are: both sides of a bridge run the same micro-batch of the same
/// replica. Where the kept axes do not divide a dimension, the minor ones
/// go first.
ShardingAttr translateSharding(ShardingAttr s, RankedTensorType type,
                               MeshAttr mesh, bool isSplit) {
  SmallVector<SmallVector<StringRef>> dims;
  for (unsigned d = 0; d < type.getRank(); ++d) {
    auto &out = dims.emplace_back();
    for (StringRef a : s.getDimAxes(d)) {
      bool keep = a == ShoalDialect::kMicroBatchAxis || a == "dp" ||
                  (a == "tp" && (isSplit ? d != 0 : d == 0));
      if (keep && mesh.getAxisSize(a) > 0)
        out.push_back(a);
    }
    while (!out.empty() && out.back() != ShoalDialect::kMicroBatchAxis &&
           out.back() != "dp" &&
           type.getDimSize(d) % getAxesSize(mesh, out) != 0)
      out.pop_back();
  }
  return ShardingAttr::get(s.getContext(), dims);
}

/// A MatMul whose weight has rank >= 3 and whose dimension 0 is a parallel
/// factor the activation has too holds stacked experts (one matrix per
/// expert, GShard style): returns that factor, or -1.
int expertFactor(Operation *op, const ShardingRule &rule) {
  if (!isa<MatMulOp>(op))
    return -1;
  for (auto [k, v] : llvm::enumerate(op->getOperands())) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    if (!v.getDefiningOp<WeightOp>() || !type || type.getRank() < 3 ||
        rule.operands[k].empty() || rule.operands[k][0].empty())
      continue;
    int f = rule.operands[k][0].front();
    if (rule.factorKinds[f] != FactorKind::Parallel)
      continue;
    for (auto [j, other] : llvm::enumerate(op->getOperands()))
      if (j != k && !isWeightLike(other))
        for (const DimFactors &df : rule.operands[j])
          if (llvm::is_contained(df, f))
            return f;
  }
  return -1;
}

/// An uneven (zero-padded) split of factor `f` may go on through `op` when
/// `f` is a dimension of its own everywhere (not part of a reshaped one)
/// and, if `op` sums over it, a weight (zero-padded too) is a factor of the
/// sum: the padding then only ever meets zeros (Megatron's row-parallel
/// product after a column-parallel one).
bool carriesUneven(Operation *op, const ShardingRule &rule, int f) {
  auto alone = [&](const TensorFactors &t) {
    return llvm::all_of(t, [&](const DimFactors &df) {
      return df.size() == 1 || !llvm::is_contained(df, f);
    });
  };
  if (!llvm::all_of(rule.operands, alone) || !llvm::all_of(rule.results, alone))
    return false;
  // Through ops that keep the zero padding finite (not 1/0, log 0, ...),
  // so that it adds nothing when it meets a weight's zero padding. An
  // update of a zero-padded weight (its gradient padded with zeros too)
  // keeps its padding zero, and its state takes the weight's blocks.
  if (rule.factorKinds[f] == FactorKind::Parallel)
    return isa<AddOp, SubOp, MulOp, ReluOp, ErfOp, TanhOp, SigmoidOp, NegOp,
               AbsOp, ExpOp, SinOp, CosOp, SqrtOp, GeluOp, GeluGradOp, CastOp,
               MatMulOp, GemmOp, TransposeOp, ReshapeOp, AdamWOp, SGDOp,
               AssignOp>(op);
  if (rule.factorKinds[f] != FactorKind::Reduction)
    return false;
  for (auto [k, dims] : llvm::enumerate(rule.operands))
    for (const DimFactors &df : dims)
      if (llvm::is_contained(df, f) && isZeroPaddedWeight(op->getOperand(k)))
        return true;
  return false;
}

/// True if `v` is a graph input of integers, possibly reshaped or cast on
/// the way (token ids): what a vocabulary-parallel embedding looks up.
bool isTokenIds(Value v) {
  for (int hops = 0; hops < 64; ++hops) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      Operation *parent = arg.getOwner()->getParentOp();
      if (auto tg = dyn_cast<TaskGraphOp>(parent)) {
        v = tg.getInputs()[arg.getArgNumber()];
        continue;
      }
      auto type = dyn_cast<RankedTensorType>(v.getType());
      return isa<func::FuncOp>(parent) && type &&
             type.getElementType().isInteger();
    }
    Operation *def = v.getDefiningOp();
    if (auto tg = dyn_cast<TaskGraphOp>(def)) {
      v = tg.getYield().getOperand(cast<OpResult>(v).getResultNumber());
      continue;
    }
    auto onnx = dyn_cast<OnnxOp>(def);
    if (isa<CastOp, ReshapeOp>(def) ||
        (onnx && def->getNumOperands() >= 1 &&
         llvm::is_contained({"Unsqueeze", "Squeeze", "Flatten", "Identity"},
                            onnx.getOpType()))) {
      v = def->getOperand(0);
      continue;
    }
    return false;
  }
  return false;
}

/// The vocabulary factor a split TaskGraph splits over tp on its own, as
/// Megatron-LM's VocabParallelEmbedding does, or -1: the rows of an
/// embedding table (a weight with more rows than columns, looked up by
/// token ids along axis 0), and the rows of its gradient.
int embeddingVocabFactor(Operation *op, const ShardingRule &rule) {
  Value table, ids;
  ArrayRef<int64_t> shape;
  int f = -1;
  if (auto g = dyn_cast<GatherOp>(op)) {
    if (g.getAxis() != 0 || !g.getData().getDefiningOp<WeightOp>())
      return -1;
    ids = g.getIndices();
    shape = cast<RankedTensorType>(g.getData().getType()).getShape();
    f = rule.operands[0].empty() || rule.operands[0][0].empty()
            ? -1
            : rule.operands[0][0].front();
  } else if (auto gg = dyn_cast<GatherGradOp>(op)) {
    ids = gg.getIndices();
    shape = gg.getType().getShape();
    f = rule.results[0].empty() || rule.results[0][0].empty()
            ? -1
            : rule.results[0][0].front();
  } else {
    return -1;
  }
  if (f < 0 || rule.factorKinds[f] != FactorKind::Vocab || shape.size() != 2 ||
      shape[0] <= shape[1] || !isTokenIds(ids))
    return -1;
  return f;
}

/// True if an activation operand of `op` arrives split over tp on a
/// dimension `op` reduces (a sum over experts, say).
bool arrivesSplitOnReduced(Operation *op, const ShardingRule &rule) {
  for (auto [k, v] : llvm::enumerate(op->getOperands())) {
    if (isWeightLike(v))
      continue;
    ShardingAttr s = getValueSharding(v);
    for (auto [d, df] : llvm::enumerate(rule.operands[k]))
      if (!df.empty() && rule.factorKinds[df.front()] != FactorKind::Parallel &&
          llvm::is_contained(s.getDimAxes(d), "tp"))
        return true;
  }
  return false;
}

/// A split TaskGraph over a mixture of experts: it splits the experts, not
/// the matrices, and keeps its tokens split over the same devices.
bool hasStackedExperts(TaskGraphOp tg) {
  for (Operation &op : tg.getBody().front())
    if (auto iface = dyn_cast<ShardingRuleOpInterface>(op))
      if (expertFactor(&op, iface.getShardingRule()) >= 0)
        return true;
  return false;
}

/// The nearest op that would need dimension `dim` of `v` whole if `v`
/// were split along it over tp (in `outer` runs: a fused projection's
/// pieces each split), or null: the walk follows the split, breadth first,
/// through the ops that carry it as a parallel factor of their results and
/// stops where one contracts or sums it (a row-parallel product: partial
/// sums, no gather) or where the value leaves the TaskGraph; a blocked
/// factor (a LayerNorm over the hidden states, a softmax over the split
/// dimension) needs it whole. So does a product of two activations that
/// contracts it (the scores of a key split along its head size would be
/// partial sums), and an op whose result `planned` (the splits of the
/// products decided before) has split along another dimension: a
/// multi-query value head split along its head size meets the query's
/// heads in the attention's second product. At most `budget` uses are
/// visited; past that, null. `reached`: the values and dimensions the split
/// would reach.
Operation *
firstNeedingWhole(Value v, int64_t dim, int64_t outer, unsigned budget,
                  const llvm::DenseMap<Value, int64_t> &planned,
                  SmallVectorImpl<std::pair<Value, int64_t>> &reached) {
  struct Split {
    Value value;
    int64_t dim, outer;
  };
  std::deque<Split> work{{v, dim, outer}};
  reached.push_back({v, dim});
  while (!work.empty()) {
    Split at = work.front();
    work.pop_front();
    for (OpOperand &use : at.value.getUses()) {
      if (budget == 0)
        return nullptr;
      --budget;
      Operation *user = use.getOwner();
      auto iface = dyn_cast<ShardingRuleOpInterface>(user);
      if (!iface)
        continue;
      ShardingRule rule = iface.getShardingRule();
      unsigned k = use.getOperandNumber();
      if (k >= rule.operands.size() ||
          at.dim >= static_cast<int64_t>(rule.operands[k].size()))
        continue;
      auto [f, fo] = findSplitFactor(rule, rule.operands[k][at.dim], at.outer);
      if (f < 0)
        continue;
      if (rule.factorKinds[f] == FactorKind::Blocked)
        return user;
      if (rule.factorKinds[f] == FactorKind::Reduction &&
          llvm::count_if(user->getOperands(),
                         [](Value o) { return !readsWeight(o); }) >= 2)
        return user;
      if (rule.factorKinds[f] != FactorKind::Parallel)
        continue;
      for (auto [r, tf] : llvm::enumerate(rule.results))
        for (auto [e, df] : llvm::enumerate(tf)) {
          int64_t before = 1;
          for (int g : df) {
            if (g == f) {
              Value res = user->getResult(r);
              auto it = planned.find(res);
              if (it != planned.end() && it->second != (int64_t)e)
                return user;
              work.push_back({res, static_cast<int64_t>(e), before * fo});
              reached.push_back({res, static_cast<int64_t>(e)});
              break;
            }
            before *= rule.factorSizes[g];
          }
        }
    }
  }
  return nullptr;
}

/// The initializer name of a weight or weight view.
StringRef weightName(Value v) {
  if (Operation *view = getWeightView(v))
    v = view->getOperand(0);
  return cast<WeightOp>(v.getDefiningOp()).getName();
}

std::string describe(Operation *op) {
  if (auto loc = dyn_cast<NameLoc>(op->getLoc()))
    return "node '" + loc.getName().getValue().str() + "'";
  return "op '" + op->getName().getStringRef().str() + "'";
}

struct PropagateShardingPass
    : public ::shoal::impl::PropagateShardingPassBase<PropagateShardingPass> {
  /// Sequence parallelism (a split TaskGraph with kSequenceParallelAttr):
  /// the values whose tp split is a split of the sequence. Such a split is
  /// weak: any other use of tp by an op (a weight's column or row split, an
  /// activation's heads) beats it, and the operand is gathered along the
  /// sequence instead (Megatron-LM's all_gather before a tensor-parallel
  /// product, and again before the product's weight gradient).
  llvm::DenseSet<Value> sequenceSplit;
  /// Values whole over tp that an op reads split along the sequence: their
  /// later readers may take that split too (shoal-partition slices them
  /// once), so that a bias or LayerNorm gradient sums its block of the
  /// sequence, as Megatron-LM's do.
  llvm::DenseMap<Value, ShardingAttr> sequenceSliced;
  /// The dimensions of values that hold a sequence (sequenceDimsOf), a bit
  /// per dimension.
  llvm::DenseMap<Value, uint64_t> sequenceDims;
  /// Set while propagating through a sequence-parallel TaskGraph: its
  /// batch size and the dimension the batch has in its activations.
  int64_t spBatch = -1, spBatchDim = 0;
  /// The sequence lengths of the hidden states: the lengths of the rank-3
  /// values the TaskGraph's norms (shoal.layer_norm, LayerNorm or RMSNorm,
  /// and their gradients) normalize, so that a rank-3 value of another
  /// length (a convolution's [batch, channels, pixels] before its patches
  /// become a sequence) is not taken for hidden states. A norm shoal-fuse
  /// did not form (an RMSNorm chain in a forward-only compile) is not seen.
  /// Empty (no norm of that form): any length.
  llvm::SmallDenseSet<int64_t, 2> spSequences;
  /// Ops of the current TaskGraph split along the sequence.
  int64_t sequenceSplitOps = 0;
  /// The values, and dimensions, that the column splits of products decided
  /// so far reach (firstNeedingWhole).
  llvm::DenseMap<Value, int64_t> plannedTp;

  void runOnOperation() final {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      bool training = getOperation()->hasAttr(ShoalDialect::kTrainingAttr);
      SmallVector<TaskGraphOp> done;
      for (auto tg : llvm::make_early_inc_range(
               func.getBody().front().getOps<TaskGraphOp>())) {
        if (training)
          seedWeights(tg, done);
        if (failed(propagate(func, tg)))
          return signalPassFailure();
        done.push_back(tg);
      }
      // Graph outputs keep the layout their TaskGraph produced.
      Operation *ret = func.getBody().front().getTerminator();
      for (auto [i, v] : llvm::enumerate(ret->getOperands()))
        func.setResultAttr(i, ShoalDialect::kShardingAttr,
                           getOuterSharding(func, v));
    }
  }

  /// Training: a weight takes the layout the same weight has in an earlier
  /// TaskGraph on the same devices (the forward's), so that the backward
  /// and the update read and write the slice the forward reads.
  static void seedWeights(TaskGraphOp tg, ArrayRef<TaskGraphOp> done) {
    for (auto w : tg.getBody().front().getOps<WeightOp>()) {
      if (w->hasAttr(ShoalDialect::kShardingAttr))
        continue;
      for (TaskGraphOp other : done) {
        if (!samePlacement(other, tg) ||
            other.getMeshAttr() != tg.getMeshAttr())
          continue;
        for (auto ow : other.getBody().front().getOps<WeightOp>())
          if (ow.getName() == w.getName())
            if (auto s = ow->getAttr(ShoalDialect::kShardingAttr)) {
              w->setAttr(ShoalDialect::kShardingAttr, s);
              break;
            }
        if (w->hasAttr(ShoalDialect::kShardingAttr))
          break;
      }
    }
  }

  static int64_t getBatchSize(func::FuncOp func) {
    return getBatch(func).second;
  }

  /// Sharding of a value outside TaskGraphs (a graph input or a TaskGraph
  /// result).
  ShardingAttr getOuterSharding(func::FuncOp func, Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v))
      if (auto s = func.getArgAttrOfType<ShardingAttr>(
              arg.getArgNumber(), ShoalDialect::kShardingAttr))
        return s;
    return getValueSharding(v);
  }

  LogicalResult propagate(func::FuncOp func, TaskGraphOp tg) {
    MLIRContext *ctx = tg.getContext();
    bool training = getOperation()->hasAttr(ShoalDialect::kTrainingAttr);
    MeshAttr mesh = tg.getMeshAttr();
    if (!mesh)
      return tg.emitError() << "TaskGraph '" << tg.getSymName()
                            << "' has no mesh; run shoal-form-taskgraphs "
                               "with a world size first";
    bool isSplit = tg.getStrategy() == Strategy::split;
    // Expert parallelism: tokens are split over the devices like in a
    // replicate TaskGraph; the experts too, which all_to_all trades.
    bool experts = isSplit && hasStackedExperts(tg);
    if (experts)
      isSplit = false;
    int64_t tpSize = mesh.getAxisSize("tp");
    // The batch is split over dp, and for replicate also over the scope's
    // own devices (Whale's replicate(n)). Axes of size 1 split nothing.
    // Micro-batches (a time axis) cut the batch first.
    SmallVector<StringRef> batchAxes;
    for (StringRef a : {StringRef(ShoalDialect::kMicroBatchAxis),
                        StringRef("dp"), StringRef("tp")})
      if (mesh.getAxisSize(a) > 1 && (a != "tp" || !isSplit))
        batchAxes.push_back(a);

    // Sequence parallelism splits the sequence of the hidden states over
    // tp: the dimension next to the batch of [batch, sequence, hidden]
    // (or [sequence, batch, hidden] when the inputs' batch dimension is 1).
    spBatch = -1;
    sequenceSplitOps = 0;
    plannedTp.clear();
    if (isSplit && tpSize > 1 && tg->hasAttr(kSequenceParallelAttr)) {
      auto [dim, size] = getBatch(func);
      spBatch = size;
      spBatchDim = dim == 1 ? 1 : 0;
      spSequences.clear();
      int64_t seqDim = spBatchDim == 0 ? 1 : 0;
      tg.getBody().walk([&](Operation *op) {
        // (A backward TaskGraph holds the norms' gradients, of the same
        // input.)
        if (!isa<LayerNormOp, AddLayerNormOp, LayerNormGradOp,
                 LayerNormScaleGradOp>(op))
          return;
        auto type = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
        if (type && type.getRank() == 3 &&
            type.getDimSize(spBatchDim) == spBatch)
          spSequences.insert(type.getDimSize(seqDim));
      });
    }

    // Shardings the inputs arrive with, and the ones the body uses.
    SmallVector<Attribute> inShardings, argShardings;
    for (Value in : tg.getInputs()) {
      ShardingAttr s;
      TaskGraphOp owner = getOwnerTaskGraph(in);
      if (owner && owner != tg && !samePlacement(owner, tg)) {
        // From another device set: shoal-insert-bridges moves it straight
        // into the layout this TaskGraph uses.
        auto type = cast<RankedTensorType>(in.getType());
        s = translateSharding(getOuterSharding(func, in), type, mesh, isSplit);
        // A replicate TaskGraph cuts the batch over all its axes; a value
        // that arrives whole is the batch when its dimension 0 is.
        SmallVector<StringRef> dim0 =
            type.getRank() ? s.getDimAxes(0) : SmallVector<StringRef>();
        if (!isSplit && type.getRank() > 0 && !batchAxes.empty() &&
            dim0.size() < batchAxes.size() &&
            llvm::equal(
                dim0, ArrayRef<StringRef>(batchAxes).take_front(dim0.size())) &&
            (!dim0.empty() || type.getDimSize(0) == getBatchSize(func)) &&
            type.getDimSize(0) % getAxesSize(mesh, batchAxes) == 0) {
          SmallVector<SmallVector<StringRef>> dims;
          for (unsigned d = 0; d < type.getRank(); ++d)
            dims.push_back(d == 0 ? SmallVector<StringRef>(batchAxes)
                                  : s.getDimAxes(d));
          s = ShardingAttr::get(ctx, dims);
        }
        inShardings.push_back(s);
        argShardings.push_back(s);
        continue;
      }
      if (auto arg = dyn_cast<BlockArgument>(in)) {
        auto type = cast<RankedTensorType>(in.getType());
        auto name =
            func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "shoal.name");
        StringRef inputName = name ? name.getValue() : StringRef("?");
        s = func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(),
                                                ShoalDialect::kShardingAttr);
        if (s) {
          if (failed(verifySharding(s, type, mesh, [&]() {
                return func.emitError()
                       << "sharding of graph input '" << inputName << "': ";
              })))
            return failure();
        } else {
          // Whale splits the batch, dimension 0 of the inputs (or the one
          // the spec names). Inputs whose batch dimension is not the batch
          // size (masks, tables) stay whole.
          SmallVector<SmallVector<StringRef>> dims(type.getRank());
          int64_t bd = getBatchDim(func, arg.getArgNumber());
          if (bd < type.getRank() && !batchAxes.empty() &&
              type.getDimSize(bd) == getBatchSize(func)) {
            int64_t n = getAxesSize(mesh, batchAxes);
            if (type.getDimSize(bd) % n != 0) {
              std::string parts;
              for (StringRef a : batchAxes)
                parts += (parts.empty() ? "" : " x ") + a.str() + "=" +
                         std::to_string(mesh.getAxisSize(a));
              return tg.emitError()
                     << "graph input '" << inputName << "' has batch dimension "
                     << type.getDimSize(bd)
                     << ", which cannot be split evenly into " << n
                     << " parts (" << parts
                     << "; mb: micro-batches, dp: data-parallel replicas, tp: "
                        "a replicate scope's devices) in TaskGraph '"
                     << tg.getSymName() << "'"
                     << specLocation(tg, ("scope:" + tg.getSymName()).str())
                     << (llvm::is_contained(batchAxes, "mb")
                             ? "; num_micro_batch" +
                                   specLocation(tg, "num_micro_batch")
                             : std::string());
            }
            dims[bd] = batchAxes;
          }
          s = ShardingAttr::get(ctx, dims);
          func.setArgAttr(arg.getArgNumber(), ShoalDialect::kShardingAttr, s);
        }
      } else {
        s = getValueSharding(in);
        // Training: a value another TaskGraph on the same devices made (the
        // forward's activations saved for its backward, the logits for the
        // loss, their gradients back) keeps its layout: no gather and
        // re-slice. Except a batch cut over tp that a replicate TaskGraph
        // made (a replicate default before the blocks, without
        // micro-batches): a split TaskGraph takes it as it takes any input,
        // whole over tp, and splits its weights instead of running
        // data-parallel on its tp devices.
        auto [batchDim, batchSize] = getBatch(func);
        auto type = dyn_cast<RankedTensorType>(in.getType());
        bool batchOverTp = isSplit && owner &&
                           owner.getStrategy() != Strategy::split && type &&
                           s && batchDim < type.getRank() &&
                           type.getDimSize(batchDim) == batchSize &&
                           llvm::is_contained(s.getDimAxes(batchDim), "tp");
        // And the other way: a replicate TaskGraph after a split one on the
        // same devices (the replicate default after the blocks: the final
        // norm and the LM head) slices the batch the split TaskGraph gives
        // whole over tp, at no communication cost, rather than computing
        // the whole batch on each of its devices.
        bool batchAfterSplit =
            !isSplit && owner && owner != tg &&
            owner.getStrategy() == Strategy::split &&
            owner.getMeshAttr() == mesh && type && s &&
            batchDim < type.getRank() &&
            type.getDimSize(batchDim) == batchSize &&
            !llvm::is_contained(s.getDimAxes(batchDim), "tp");
        if (batchAfterSplit) {
          inShardings.push_back(s);
          argShardings.push_back(splitBatchFurther(
              s, in, batchAxes, mesh, /*wholeIsBatch=*/true, batchDim));
          continue;
        }
        if (owner && owner != tg && training && owner.getMeshAttr() == mesh &&
            !batchOverTp) {
          inShardings.push_back(s);
          argShardings.push_back(s);
          continue;
        }
      }
      inShardings.push_back(s);
      argShardings.push_back(isSplit
                                 ? dropAxis(s, "tp")
                                 : splitBatchFurther(s, in, batchAxes, mesh));
    }
    tg->setAttr(kInShardingsAttr, ArrayAttr::get(ctx, inShardings));
    tg->setAttr(kArgShardingsAttr, ArrayAttr::get(ctx, argShardings));
    // An input split along the sequence (a value the forward saved for the
    // backward, or hidden states from the previous pipeline stage) keeps
    // that split weak.
    if (spBatch > 0) {
      SmallVector<int64_t> splitArgs;
      for (auto [arg, outer, sh] :
           llvm::zip(tg.getBody().front().getArguments(), tg.getInputs(),
                     argShardings))
        if ((sequenceSplit.contains(outer) ||
             splitsSequence(cast<ShardingAttr>(sh),
                            cast<RankedTensorType>(arg.getType()))) &&
            holdsTp(cast<ShardingAttr>(sh))) {
          sequenceSplit.insert(arg);
          splitArgs.push_back(arg.getArgNumber());
        }
      if (!splitArgs.empty())
        tg->setAttr(kSequenceSplitAttr, DenseI64ArrayAttr::get(ctx, splitArgs));
    }

    for (Operation &op : tg.getBody().front()) {
      if (isa<WeightOp, ConstantOp, YieldOp>(op))
        continue;
      // A weight view is laid out by its user, unless its weight already
      // has a layout (from the forward TaskGraph, in training).
      if (laidOutByUser(&op) && !hasDecidedLayout(op.getOperand(0)))
        continue;
      // A view skipped above whose weight another user has laid out since
      // (a tied embedding read by a Gather and, transposed, by the LM head)
      // takes the weight's layout, as any op its operand's.
      for (Value v : op.getOperands())
        if (Operation *view = getWeightView(v);
            view && !view->hasAttr(ShoalDialect::kShardingAttr) &&
            hasDecidedLayout(view->getOperand(0)) &&
            failed(decide(tg, cast<ShardingRuleOpInterface>(view), mesh,
                          isSplit ? tpSize : 1, experts ? tpSize : 1)))
          return failure();
      auto iface = dyn_cast<ShardingRuleOpInterface>(op);
      if (!iface)
        return op.emitError()
               << "'" << op.getName() << "' has no sharding rule";
      if (failed(decide(tg, iface, mesh, isSplit ? tpSize : 1,
                        experts ? tpSize : 1)))
        return failure();
    }

    // Weight views no user laid out stay whole; a lookup in a stack of
    // matrices takes its ids' layout.
    for (Operation &view : tg.getBody().front())
      if (isGatheredWeight(&view) &&
          !view.hasAttr(ShoalDialect::kShardingAttr)) {
        if (failed(decide(tg, cast<ShardingRuleOpInterface>(view), mesh,
                          isSplit ? tpSize : 1, experts ? tpSize : 1)))
          return failure();
      } else if (isWeightView(&view) &&
                 !view.hasAttr(ShoalDialect::kShardingAttr))
        decideView(
            &view,
            ShardingAttr::getReplicated(
                ctx,
                cast<RankedTensorType>(view.getResult(0).getType()).getRank()));

    // Outputs of a split TaskGraph are gathered over tp, except those read
    // only by other device sets: a bridge moves their blocks directly.
    SmallVector<Attribute> outShardings;
    for (auto [v, r] :
         llvm::zip(tg.getYield().getOperands(), tg.getResults())) {
      // Strided layouts stay on the TaskGraph's ranks: in training, a value
      // saved for the backward of the same stage keeps its layout; anything
      // else leaves in blocks.
      ShardingAttr s = getValueSharding(v);
      bool staysHere = training && !r.use_empty() &&
                       llvm::all_of(r.getUsers(), [&](Operation *u) {
                         auto other = dyn_cast<TaskGraphOp>(u);
                         return other && samePlacement(other, tg);
                       });
      if (!staysHere)
        s = dropStrided(s);
      auto type = cast<RankedTensorType>(v.getType());
      bool even = true;
      for (unsigned d = 0; d < type.getRank(); ++d)
        even &= type.getDimSize(d) % getAxesSize(mesh, s.getDimAxes(d)) == 0;
      bool onlyElsewhere =
          even && !r.use_empty() &&
          llvm::all_of(r.getUsers(), [&](Operation *u) {
            auto other = dyn_cast<TaskGraphOp>(u);
            return other && (!samePlacement(other, tg) ||
                             (training && other.getMeshAttr() == mesh));
          });
      // A value computed whole for every micro-batch (from constants, say)
      // that another stage takes as the batch (its dimension 0 is the
      // batch size, see the inputs above) leaves cut per micro-batch: a
      // transfer carries one micro-batch's block on both sides.
      int64_t mbSize = mesh.getAxisSize(ShoalDialect::kMicroBatchAxis);
      bool toOtherStage = llvm::any_of(r.getUsers(), [&](Operation *u) {
        auto other = dyn_cast<TaskGraphOp>(u);
        return other && !samePlacement(other, tg);
      });
      if (toOtherStage && mbSize > 1 && type.getRank() > 0 &&
          type.getDimSize(0) == getBatchSize(func) &&
          type.getDimSize(0) % mbSize == 0 && s.getDimAxes(0).empty() &&
          llvm::none_of(llvm::seq<unsigned>(0, type.getRank()),
                        [&](unsigned d) {
                          return llvm::is_contained(
                              s.getDimAxes(d), ShoalDialect::kMicroBatchAxis);
                        })) {
        SmallVector<SmallVector<StringRef>> dims;
        for (unsigned d = 0; d < type.getRank(); ++d)
          dims.push_back(
              d == 0 ? SmallVector<StringRef>{ShoalDialect::kMicroBatchAxis}
                     : s.getDimAxes(d));
        s = ShardingAttr::get(ctx, dims);
      }
      outShardings.push_back(isSplit && !onlyElsewhere ? dropAxis(s, "tp") : s);
    }
    tg->setAttr(ShoalDialect::kShardingAttr, ArrayAttr::get(ctx, outShardings));
    for (auto [v, r, sh] :
         llvm::zip(tg.getYield().getOperands(), tg.getResults(), outShardings))
      if (sequenceSplit.contains(v) && holdsTp(cast<ShardingAttr>(sh)))
        sequenceSplit.insert(r);
    // No silent fallback: say so when nothing had a sequence to split.
    if (tg->hasAttr(kSequenceParallelAttr) && sequenceSplitOps == 0)
      tg.emitWarning() << "sequence_parallel: TaskGraph '" << tg.getSymName()
                       << "' splits nothing along the sequence ("
                       << (tpSize > 1 ? "no activation of shape [batch, "
                                        "sequence, hidden]"
                                      : "its tp axis has one device")
                       << "); it runs as plain tensor parallelism";
    return success();
  }

  /// The sequence dimension of a value of `type` in a sequence-parallel
  /// TaskGraph: a rank-3 activation with the batch next to it, or -1.
  int64_t sequenceDim(RankedTensorType type) const {
    if (spBatch <= 0 || type.getRank() != 3 ||
        type.getDimSize(spBatchDim) != spBatch)
      return -1;
    int64_t d = spBatchDim == 0 ? 1 : 0;
    if (!spSequences.empty() && !spSequences.contains(type.getDimSize(d)))
      return -1;
    return d;
  }

  /// The dimensions of `v` that hold a sequence: where a sequence split
  /// over tp put it, or where an op carried such a dimension (a key's
  /// sequence through its transpose, the scores and their gradients).
  uint64_t sequenceDimsOf(Value v) {
    uint64_t dims = sequenceDims.lookup(v);
    if (sequenceSplit.contains(v)) {
      ShardingAttr s = getValueSharding(v);
      for (unsigned d = 0; d < s.getDims().size() && d < 64; ++d)
        if (llvm::is_contained(s.getDimAxes(d), "tp") && s.getDimOuter(d) == 1)
          dims |= uint64_t(1) << d;
    }
    return dims;
  }

  /// Carries the sequence dimensions of `op`'s operands to its results
  /// through the factors of its rule (a dimension of one factor only).
  void carrySequenceDims(Operation *op, const ShardingRule &rule) {
    llvm::SmallSet<int, 4> factors;
    for (auto [k, v] : llvm::enumerate(op->getOperands())) {
      uint64_t dims = sequenceDimsOf(v);
      for (auto [d, df] : llvm::enumerate(rule.operands[k]))
        if (d < 64 && (dims >> d & 1) && df.size() == 1)
          factors.insert(df.front());
    }
    if (factors.empty())
      return;
    for (auto [r, tf] : llvm::enumerate(rule.results)) {
      uint64_t dims = 0;
      for (auto [d, df] : llvm::enumerate(tf))
        if (d < 64 && df.size() == 1 && factors.contains(df.front()))
          dims |= uint64_t(1) << d;
      if (dims && r < op->getNumResults())
        sequenceDims[op->getResult(r)] = dims;
    }
  }

  /// The sequence dimension along which the partial sums over tp that `op`
  /// leaves are scattered (sequence parallelism), or -1: `op` has one
  /// rank-3 result with the batch, its only splits over tp are of
  /// contracted factors, and the one dimension other than the batch that
  /// holds a sequence (carrySequenceDims, of a length the norms normalize)
  /// is one factor that divides evenly.
  int64_t scatteredSequenceDim(Operation *op, const ShardingRule &rule,
                               const FactorAxes &axes,
                               ArrayRef<Attribute> results,
                               int64_t tpSize) const {
    if (spBatch <= 0 || op->getNumResults() != 1 || rule.results.size() != 1)
      return -1;
    auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
    uint64_t dims = sequenceDims.lookup(op->getResult(0));
    if (!type || type.getRank() != 3 || !llvm::has_single_bit(dims) ||
        type.getDimSize(spBatchDim) != spBatch ||
        holdsTp(cast<ShardingAttr>(results.front())))
      return -1;
    int64_t d = llvm::countr_zero(dims);
    if (d == spBatchDim || rule.results.front()[d].size() != 1 ||
        (!spSequences.empty() && !spSequences.contains(type.getDimSize(d))))
      return -1;
    // Partial over tp alone: every contracted factor that is split is split
    // over tp only, and nothing else holds tp (shoal-partition's
    // reduce_scatter sums over exactly those axes), in plain blocks.
    bool partial = false;
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
      if (kind == FactorKind::Reduction && !axes[f].empty()) {
        if (axes[f].size() != 1 || axes[f].front() != "tp")
          return -1;
        partial = true;
      } else if (llvm::is_contained(axes[f], "tp")) {
        return -1;
      }
    }
    if (cast<ShardingAttr>(results.front()).isStrided())
      return -1;
    int f = rule.results.front()[d].front();
    if (!partial || rule.factorKinds[f] != FactorKind::Parallel ||
        !axes[f].empty() || type.getDimSize(d) % tpSize != 0)
      return -1;
    return d;
  }

  static bool holdsTp(ShardingAttr s) {
    for (unsigned d = 0, e = s.getDims().size(); d < e; ++d)
      if (llvm::is_contained(s.getDimAxes(d), "tp"))
        return true;
    return false;
  }

  /// True if `s` splits the sequence dimension of `type` over tp.
  bool splitsSequence(ShardingAttr s, RankedTensorType type) const {
    int64_t d = sequenceDim(type);
    return d >= 0 && llvm::is_contained(s.getDimAxes(d), "tp");
  }

  LogicalResult decide(TaskGraphOp tg, ShardingRuleOpInterface iface,
                       MeshAttr mesh, int64_t tpSize, int64_t expertSize) {
    Operation *op = iface.getOperation();
    MLIRContext *ctx = op->getContext();
    ShardingRule rule = iface.getShardingRule();
    FactorAxes axes(rule.getNumFactors());
    llvm::SmallSet<StringRef, 4> used;
    llvm::SmallSet<int, 8> inActivations, inResults;
    for (const TensorFactors &tf : rule.results)
      for (const DimFactors &df : tf)
        inResults.insert(df.begin(), df.end());

    FactorOuter outer(rule.getNumFactors(), 1);
    // A factor split in a dimension where it is not the major factor (or
    // split in strided runs) gives strided layouts. Weights are only ever
    // loaded in blocks, so no weight may hold such a factor (a constant
    // may: shoal-partition slices it into runs like any whole value, as the
    // zeros of a baddbmm over merged batch and heads); and a dimension
    // carries one split factor at most.
    auto inWeight = [&](int f) {
      for (auto [k, v] : llvm::enumerate(op->getOperands()))
        if (isWeightLike(v) && !getWeightView(v) &&
            !v.getDefiningOp<ConstantOp>())
          for (const DimFactors &df : rule.operands[k])
            if (llvm::is_contained(df, f))
              return true;
      return false;
    };
    auto sharesDimWithSplit = [&](int f) {
      for (const auto *group : {&rule.operands, &rule.results})
        for (const TensorFactors &tf : *group)
          for (const DimFactors &df : tf)
            if (llvm::is_contained(df, f))
              for (int g : df)
                if (g != f && !axes[g].empty())
                  return true;
      return false;
    };

    // An in-place update (AdamW, SGD, assign) whose weight has a layout
    // takes that layout alone: its state weights, laid out below from the
    // update's factors, are then stored as the weight is, and shoal-partition
    // brings the gradient (or value) to it. Were the gradient to lay out the
    // update (it can arrive split while the weight is whole: a weight read
    // by two layers sums gradients of different layouts), the state would
    // be stored split and gathered into temporaries, which the update would
    // write while the stored state stayed zero.
    bool followsWeight = isa<AdamWOp, SGDOp, AssignOp>(op) &&
                         hasDecidedLayout(op->getOperand(0));

    // Activations bring their shardings; the first operand wins conflicts
    // (the others are resharded by shoal-partition). A sequence split over
    // tp (sequence parallelism) is weak: it is claimed only after every
    // other use of tp, below.
    bool tookWeakTp = false;
    auto claim = [&](bool weakPass) {
      for (auto [k, v] : llvm::enumerate(op->getOperands())) {
        if (isWeightLike(v) && !hasDecidedLayout(v))
          continue;
        if (followsWeight && k != 0)
          continue;
        ShardingAttr s = getValueSharding(v);
        auto sliced = sequenceSliced.find(v);
        bool weak = sequenceSplit.contains(v) || sliced != sequenceSliced.end();
        if (weakPass && !weak)
          continue;
        if (weakPass && sliced != sequenceSliced.end())
          s = sliced->second;
        for (auto [d, df] : llvm::enumerate(rule.operands[k])) {
          inActivations.insert(df.begin(), df.end());
          SmallVector<StringRef> a = s.getDimAxes(d);
          if (a.empty() || df.empty())
            continue;
          if (weak && weakPass != llvm::is_contained(a, "tp"))
            continue;
          auto [f, fo] = findSplitFactor(rule, df, s.getDimOuter(d));
          if (f < 0)
            continue;
          bool strided = fo > 1 || rule.isMinorSomewhere(f);
          int64_t n = getAxesSize(mesh, a);
          // A vocabulary is split only over a split TaskGraph's tp, in blocks
          // (uneven ones too: the vocabulary-parallel ops skip the padding).
          if (rule.factorKinds[f] == FactorKind::Vocab) {
            if (tpSize <= 1 || a.size() != 1 || a[0] != "tp" || strided ||
                !axes[f].empty() || used.contains("tp"))
              continue;
            axes[f] = a;
            used.insert("tp");
            continue;
          }
          if (rule.factorKinds[f] == FactorKind::Blocked || !axes[f].empty() ||
              llvm::any_of(a, [&](StringRef x) { return used.contains(x); }) ||
              (strided && (rule.factorSizes[f] % (fo * n) != 0 || inWeight(f) ||
                           sharesDimWithSplit(f))) ||
              (!strided && rule.factorSizes[f] % n != 0 &&
               !carriesUneven(op, rule, f)))
            continue;
          axes[f] = a;
          outer[f] = fo;
          used.insert(a.begin(), a.end());
          tookWeakTp |= weakPass;
        }
      }
    };
    claim(/*weakPass=*/false);

    // Expert parallelism: the experts of a stacked-expert MatMul take tp
    // from the tokens (the dispatch), and a reduction over split experts
    // gives tp back to the tokens instead of summing partial results (the
    // combine).
    if (expertSize > 1) {
      auto moveTp = [&](int from, int to) {
        if (to < 0 || llvm::is_contained(axes[to], "tp"))
          return;
        SmallVector<StringRef> grown = axes[to];
        grown.push_back("tp");
        if (rule.factorSizes[to] % getAxesSize(mesh, grown) != 0)
          return;
        if (from >= 0)
          llvm::erase(axes[from], "tp");
        axes[to] = grown;
      };
      auto holdsTp = [&]() -> int {
        for (auto [f, a] : llvm::enumerate(axes))
          if (llvm::is_contained(a, "tp"))
            return f;
        return -1;
      };
      int e = expertFactor(op, rule);
      if (e >= 0 && axes[e].empty()) {
        moveTp(holdsTp(), e);
      } else if (int f = holdsTp();
                 (f >= 0 && rule.factorKinds[f] == FactorKind::Reduction) ||
                 (f < 0 && arrivesSplitOnReduced(op, rule))) {
        // The first parallel factor of the result (the tokens).
        int to = -1;
        for (const DimFactors &df : rule.results.front())
          if (!df.empty() &&
              rule.factorKinds[df.front()] == FactorKind::Parallel &&
              !rule.isMinorSomewhere(df.front())) {
            to = df.front();
            break;
          }
        moveTp(f, to);
      }
    }

    // Vocabulary-parallel embedding: a split TaskGraph splits the rows of
    // an embedding table (and of its gradient) over tp; each rank looks up
    // its rows and an all_reduce completes the lookup.
    if (int f = embeddingVocabFactor(op, rule);
        f >= 0 && tpSize > 1 && !used.contains("tp") && axes[f].empty() &&
        rule.factorSizes[f] >= tpSize) {
      axes[f] = {"tp"};
      used.insert("tp");
    }

    // Split a contraction's weight over tp when nothing uses tp yet.
    bool contracts =
        llvm::is_contained(rule.factorKinds, FactorKind::Reduction);
    if (tpSize > 1 && contracts && !used.contains("tp")) {
      int best = -1;
      int64_t bestOuter = 1;
      Value bestWeight;
      for (auto [k, v] : llvm::enumerate(op->getOperands())) {
        Operation *view = getWeightView(v);
        if (!isWeightLike(v) || !(isa<WeightOp>(v.getDefiningOp()) || view))
          continue;
        for (auto [d, df] : llvm::enumerate(rule.operands[k])) {
          if (df.empty())
            continue;
          int f = df.front();
          if (rule.factorKinds[f] != FactorKind::Parallel ||
              rule.isMinorSomewhere(f) || inActivations.contains(f) ||
              !inResults.contains(f) || !axes[f].empty())
            continue;
          if (best < 0 || rule.factorSizes[f] > rule.factorSizes[best]) {
            best = f;
            bestWeight = v;
            // A view cuts this dimension in pieces: split each piece.
            bestOuter = 1;
            if (auto r = dyn_cast_or_null<ReshapeOp>(view)) {
              auto in = cast<RankedTensorType>(r.getInput().getType());
              auto out = cast<RankedTensorType>(r.getType());
              for (int64_t i = 0; i < out.getRank(); ++i)
                if (in.getDimSize(i) != out.getDimSize(i)) {
                  if (i == (int64_t)d)
                    bestOuter = in.getDimSize(i);
                  break;
                }
            }
          }
        }
      }
      // Megatron pairs a column-parallel product with a row-parallel one
      // that contracts its split. A product whose split would reach an op
      // that needs it whole first (a lone projection at a scope's edge: a
      // patch convolution or an embedding projection before the residual
      // stream's LayerNorm, an MLM head's dense) is kept whole instead of
      // gathering after it; the report says so.
      // A view cut in pieces splits each piece where they divide evenly.
      if (best >= 0 && (bestOuter <= 1 ||
                        rule.factorSizes[best] % (bestOuter * tpSize) != 0))
        bestOuter = 1;
      if (best >= 0) {
        SmallVector<std::pair<Value, int64_t>> reached;
        for (auto [r, tf] : llvm::enumerate(rule.results))
          for (auto [e, df] : llvm::enumerate(tf)) {
            if (best < 0 || !llvm::is_contained(df, best))
              continue;
            // The split's runs in this dimension: the factors before it,
            // and a view's pieces.
            int64_t runs = bestOuter;
            for (int g : df) {
              if (g == best)
                break;
              runs *= rule.factorSizes[g];
            }
            if (Operation *whole = firstNeedingWhole(op->getResult(r), e, runs,
                                                     512, plannedTp, reached)) {
              OpBuilder b(op);
              op->setAttr(kTpKeptWholeAttr, b.getStringAttr(describe(whole)));
              best = -1;
            }
          }
        if (best >= 0)
          for (auto [value, d] : reached)
            plannedTp.try_emplace(value, d);
      }
      if (best >= 0) {
        if (rule.factorSizes[best] < tpSize)
          return op->emitError()
                 << "split(" << tpSize << ") of TaskGraph '" << tg.getSymName()
                 << "': " << describe(op) << " would split a dimension of size "
                 << rule.factorSizes[best] << " of weight '"
                 << weightName(bestWeight) << "' over " << tpSize
                 << " devices, more devices than it has rows";
        // Uneven splits get ceil-sized, zero-padded shards.
        axes[best] = {"tp"};
        if (bestOuter > 1)
          outer[best] = bestOuter;
      }
    }

    // Sequence parallelism: a sequence split arriving with an operand now
    // takes tp if nothing else did; in the forward, hidden states nothing
    // splits over tp are split along the sequence (Megatron-LM's
    // LayerNorm, dropout and residual regions).
    auto tpTaken = [&]() {
      return used.contains("tp") ||
             llvm::any_of(axes, [](const SmallVector<StringRef> &a) {
               return llvm::is_contained(a, "tp");
             });
    };
    if (spBatch > 0 && !tpTaken()) {
      claim(/*weakPass=*/true);
      bool forward = !op->hasAttr(ShoalDialect::kPhaseAttr) ||
                     op->hasAttr(kRecomputedAttr);
      if (!tpTaken() && forward && op->getNumResults() > 0)
        if (auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
            type && sequenceDim(type) >= 0 &&
            !rule.results.front()[sequenceDim(type)].empty()) {
          int f = rule.results.front()[sequenceDim(type)].front();
          // A dimension of size 1 there is a broadcast (BLOOM's ALiBi
          // bias, [batch * heads, 1, keys]), not a sequence.
          if (rule.factorKinds[f] == FactorKind::Parallel &&
              !rule.isMinorSomewhere(f) && axes[f].empty() &&
              rule.factorSizes[f] > 1) {
            if (rule.factorSizes[f] % tpSize != 0)
              return op->emitError()
                     << "sequence_parallel in TaskGraph '" << tg.getSymName()
                     << "': " << describe(op) << " has a sequence of length "
                     << rule.factorSizes[f]
                     << ", which cannot be split evenly over tp=" << tpSize;
            axes[f] = {"tp"};
            used.insert("tp");
            tookWeakTp = true;
          }
        }
    }

    // A dimension holds one split factor at most (the first one split).
    for (const auto *group : {&rule.operands, &rule.results})
      for (const TensorFactors &tf : *group)
        for (const DimFactors &df : tf) {
          bool seen = false;
          for (int g : df) {
            if (axes[g].empty())
              continue;
            if (seen) {
              axes[g].clear();
              outer[g] = 1;
            }
            seen = true;
          }
        }

    // Heads and other split factors must divide evenly wherever they go:
    // a factor carried from an activation was checked above.
    SmallVector<Attribute> factorAttrs;
    Builder b(ctx);
    for (auto &a : axes)
      factorAttrs.push_back(b.getStrArrayAttr(a));
    op->setAttr(ShoalDialect::kFactorShardingAttr, b.getArrayAttr(factorAttrs));
    if (llvm::any_of(outer, [](int64_t o) { return o > 1; }))
      op->setAttr(kFactorOuterAttr, b.getDenseI64ArrayAttr(outer));
    SmallVector<Attribute> results;
    for (const TensorFactors &tf : rule.results)
      results.push_back(shardingFromFactors(ctx, rule, tf, axes, outer));
    // Sequence parallelism: a partial sum over tp with a sequence (a
    // contraction split over tp whose result is [batch, sequence, x]: the
    // key and value gradients of an attention split along its queries) is
    // summed and scattered along the sequence, not all-reduced: shoal-
    // partition makes it a reduce_scatter, and its readers take the split
    // like any sequence split (an all_reduce is a reduce_scatter and an
    // all_gather; readers that need it whole gather it).
    if (spBatch > 0)
      carrySequenceDims(op, rule);
    int64_t scattered = scatteredSequenceDim(op, rule, axes, results, tpSize);
    if (scattered >= 0) {
      auto sh = cast<ShardingAttr>(results.front());
      SmallVector<SmallVector<StringRef>> dims;
      for (unsigned d = 0; d < sh.getDims().size(); ++d)
        dims.push_back(d == scattered ? SmallVector<StringRef>{"tp"}
                                      : sh.getDimAxes(d));
      results.front() = ShardingAttr::get(ctx, dims);
      sequenceSplit.insert(op->getResult(0));
      op->setAttr(kSequenceSplitAttr, b.getDenseI64ArrayAttr({0}));
      ++sequenceSplitOps;
    }
    op->setAttr(ShoalDialect::kShardingAttr, b.getArrayAttr(results));
    if (tookWeakTp) {
      ++sequenceSplitOps;
      SmallVector<int64_t> split;
      for (auto [r, sh] : llvm::zip(op->getResults(), results))
        if (holdsTp(cast<ShardingAttr>(sh))) {
          sequenceSplit.insert(r);
          split.push_back(r.getResultNumber());
        }
      if (!split.empty())
        op->setAttr(kSequenceSplitAttr, b.getDenseI64ArrayAttr(split));
      for (auto [k, v] : llvm::enumerate(op->getOperands())) {
        auto type = dyn_cast<RankedTensorType>(v.getType());
        if (!type || isWeightLike(v) || sequenceSplit.contains(v) ||
            sequenceSliced.count(v))
          continue;
        ShardingAttr need =
            shardingFromFactors(ctx, rule, rule.operands[k], axes, outer);
        if (splitsSequence(need, type) &&
            !splitsSequence(getValueSharding(v), type))
          sequenceSliced[v] = need;
      }
    }
    // Weights are loaded already split the way their user needs them.
    for (auto [k, v] : llvm::enumerate(op->getOperands()))
      if (Operation *view = getWeightView(v); view && !hasDecidedLayout(v))
        decideView(view, shardingFromFactors(ctx, rule, rule.operands[k], axes,
                                             outer));
      else if (auto w = v.getDefiningOp<WeightOp>(); w && !hasDecidedLayout(v))
        w->setAttr(ShoalDialect::kShardingAttr,
                   b.getArrayAttr({dropStrided(shardingFromFactors(
                       ctx, rule, rule.operands[k], axes, outer))}));
    return success();
  }
};

} // namespace
