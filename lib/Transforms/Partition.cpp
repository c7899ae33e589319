//===- Partition.cpp - Global to local shapes with collectives --*- C++ -*-===//
//
// Rewrites every TaskGraph to the program one rank runs: local shapes, and
// explicit communication wherever a value's layout differs from what its
// user needs (all_gather, then local_slice), and after every op whose
// reduction factor is split (all_reduce).
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "shoal/Schema/UnevenBlocks.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

namespace shoal {
#define GEN_PASS_DEF_PARTITIONPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

struct TaskGraphPartitioner {
  TaskGraphOp tg;
  MeshAttr mesh;
  MLIRContext *ctx;
  /// Global type of every value of the body, taken before any rewrite.
  llvm::DenseMap<Value, RankedTensorType> global;
  /// Current layout of every value of the body.
  llvm::DenseMap<Value, ShardingAttr> layout;
  /// Reshards already made: (value, target layout) -> resharded value.
  llvm::DenseMap<std::pair<Value, Attribute>, Value> reshards;
  /// Set when a reshard is impossible (an error was emitted).
  bool failedReshard = false;
  /// Vocabulary-parallel cross-entropy: (logits, labels) -> the all-reduced
  /// max and statistics, shared by the loss and its gradient.
  llvm::DenseMap<std::pair<Value, Value>, std::pair<Value, Value>> vocabStats;

  /// The names of the weights updated in place (an optimizer's, an
  /// assign's): the others are the same in every step.
  const llvm::StringSet<> &updated;

  TaskGraphPartitioner(TaskGraphOp tg, const llvm::StringSet<> &updated)
      : tg(tg), mesh(tg.getMeshAttr()), ctx(tg.getContext()), updated(updated) {
  }

  /// Sequence parallelism: true if `v` is split along the sequence
  /// (kSequenceSplitAttr, from shoal-propagate-sharding).
  bool isSequenceSplit(Value v) {
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      auto args = tg->getAttrOfType<DenseI64ArrayAttr>(kSequenceSplitAttr);
      return arg.getOwner()->getParentOp() == tg && args &&
             llvm::is_contained(args.asArrayRef(), arg.getArgNumber());
    }
    Operation *def = v.getDefiningOp();
    auto results =
        def ? def->getAttrOfType<DenseI64ArrayAttr>(kSequenceSplitAttr)
            : DenseI64ArrayAttr();
    return results && llvm::is_contained(results.asArrayRef(),
                                         cast<OpResult>(v).getResultNumber());
  }

  /// Sums of all_reduces are all_reduces of sums: add first, then one
  /// collective (the backward of a layer's q, k and v products adds three
  /// partial input gradients: one all_reduce instead of three). Not over
  /// the micro-batch axis, whose all_reduces accumulate over a step.
  void mergeSummedAllReduces() {
    for (bool changed = true; changed;) {
      changed = false;
      SmallVector<AddOp> adds;
      tg.getBody().front().walk([&](AddOp add) { adds.push_back(add); });
      for (AddOp add : adds) {
        // An operand that is a sum, possibly reshaped (a product's 2-d
        // result viewed as [batch, sequence, hidden]).
        auto peel = [&](Value v) -> std::pair<AllReduceOp, ReshapeOp> {
          auto r = v.getDefiningOp<ReshapeOp>();
          if (r && r->hasOneUse())
            v = r.getInput();
          else
            r = nullptr;
          auto ar = v.getDefiningOp<AllReduceOp>();
          if (!ar || !ar->hasOneUse() || ar.getReduction() != "sum")
            return {nullptr, nullptr};
          return {ar, r};
        };
        auto [lhs, lr] = peel(add.getLhs());
        auto [rhs, rr] = peel(add.getRhs());
        if (!lhs || !rhs || lhs == rhs || lhs.getAxes() != rhs.getAxes() ||
            llvm::is_contained(lhs.getAxes().getAsValueRange<StringAttr>(),
                               ShoalDialect::kMicroBatchAxis) ||
            add.getLhs().getType() != add.getType() ||
            add.getRhs().getType() != add.getType())
          continue;
        OpBuilder b(add);
        auto input = [&](AllReduceOp ar, ReshapeOp r) -> Value {
          if (!r)
            return ar.getInput();
          return b.create<ReshapeOp>(r.getLoc(), r.getType(), ar.getInput());
        };
        Value l = input(lhs, lr), r = input(rhs, rr);
        auto sum = b.create<AddOp>(add.getLoc(), add.getType(), l, r);
        sum->setDiscardableAttrs(add->getDiscardableAttrDictionary());
        auto ar = b.create<AllReduceOp>(lhs.getLoc(), add.getType(),
                                        sum.getResult(), lhs.getAxes());
        ar->setAttr(ShoalDialect::kReasonAttr,
                    b.getStringAttr(
                        "partial sums added up before one all_reduce over " +
                        formatAxesList(llvm::to_vector(
                            lhs.getAxes().getAsValueRange<StringAttr>()))));
        add.replaceAllUsesWith(ar.getResult());
        add.erase();
        for (Operation *dead : {lr ? lr.getOperation() : nullptr,
                                rr ? rr.getOperation() : nullptr,
                                lhs.getOperation(), rhs.getOperation()})
          if (dead)
            dead->erase();
        changed = true;
      }
    }
  }

  /// Sequence parallelism: an all_reduce over tp of which a user keeps only
  /// its block of the sequence (directly or after a reshape) becomes a
  /// reduce_scatter (Megatron-LM's reduce-scatter after a row-parallel
  /// product, and in the backward after a column-parallel one). Users that
  /// need the whole sum get it from an all_gather of the blocks: an
  /// all_reduce is a reduce_scatter and an all_gather.
  void foldReduceScatters() {
    SmallVector<AllReduceOp> sums;
    tg.getBody().front().walk([&](AllReduceOp ar) { sums.push_back(ar); });
    for (AllReduceOp ar : sums) {
      if (ar.getReduction() != "sum" || ar->use_empty())
        continue;
      // The value the slices read: the sum, or its only user, a reshape.
      Value view = ar.getResult();
      ReshapeOp reshape;
      if (ar->hasOneUse())
        if ((reshape = dyn_cast<ReshapeOp>(*ar->getUsers().begin())))
          view = reshape.getResult();
      LocalSliceOp first;
      SmallVector<LocalSliceOp> slices;
      SmallVector<OpOperand *> others;
      for (OpOperand &use : view.getUses()) {
        auto slice = dyn_cast<LocalSliceOp>(use.getOwner());
        if (slice && slice.getAxes() == ar.getAxes() &&
            (!first || (slice.getDim() == first.getDim() &&
                        slice.getType() == first.getType()))) {
          if (!first)
            first = slice;
          slices.push_back(slice);
        } else {
          others.push_back(&use);
        }
      }
      auto type = cast<RankedTensorType>(view.getType());
      auto axes = llvm::to_vector(ar.getAxes().getAsValueRange<StringAttr>());
      // The whole sum is gathered back only from even blocks.
      if (!first ||
          (!others.empty() && first.getType().getDimSize(first.getDim()) *
                                      getAxesSize(mesh, axes) !=
                                  type.getDimSize(first.getDim())))
        continue;
      OpBuilder b(ar);
      Value in = ar.getInput();
      if (reshape)
        in = b.create<ReshapeOp>(reshape.getLoc(), type, in);
      auto rs = b.create<ReduceScatterOp>(ar.getLoc(), first.getType(), in,
                                          first.getDim(), ar.getAxes());
      rs->setAttr(ShoalDialect::kReasonAttr,
                  b.getStringAttr("sequence parallelism: partial sums summed "
                                  "and scattered along the sequence over " +
                                  formatAxesList(axes)));
      for (LocalSliceOp slice : slices) {
        slice.replaceAllUsesWith(rs.getResult());
        slice.erase();
      }
      if (!others.empty()) {
        auto whole = b.create<AllGatherOp>(ar.getLoc(), type, rs.getResult(),
                                           first.getDim(), ar.getAxes());
        whole->setAttr(ShoalDialect::kReasonAttr,
                       b.getStringAttr("sequence parallelism: the rest of an "
                                       "all_reduce split into reduce_scatter "
                                       "and all_gather"));
        for (OpOperand *use : others)
          use->set(whole.getResult());
      }
      if (reshape)
        reshape.erase();
      ar.erase();
    }
  }

  /// The dimension that a reduce_scatter of an op's partial sums splits to
  /// turn the layout its factors give (`computed`) into `want`, or -1:
  /// `want` is `computed` with one more dimension split over exactly the
  /// axes of its contracted factors.
  static int64_t scatteredDim(const ShardingRule &rule, const FactorAxes &axes,
                              ShardingAttr computed, ShardingAttr want) {
    SmallVector<StringRef> partial;
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds))
      if (kind == FactorKind::Reduction)
        partial.append(axes[f].begin(), axes[f].end());
    if (partial.empty() || computed.isStrided() || want.isStrided() ||
        computed.getDims().size() != want.getDims().size())
      return -1;
    int64_t dim = -1;
    for (unsigned d = 0; d < want.getDims().size(); ++d) {
      if (computed.getDimAxes(d) == want.getDimAxes(d))
        continue;
      if (dim >= 0 || !computed.getDimAxes(d).empty() ||
          want.getDimAxes(d) != partial)
        return -1;
      dim = d;
    }
    return dim;
  }

  StringAttr sequenceGatherReason(OpBuilder &b, ArrayRef<StringRef> axes) {
    return b.getStringAttr("sequence parallelism: the sequence gathered over " +
                           formatAxesList(axes) +
                           " for an op that splits tp otherwise");
  }

  ShardingAttr layoutOf(Value v) {
    auto it = layout.find(v);
    if (it != layout.end())
      return it->second;
    return ShardingAttr::getReplicated(
        ctx, cast<RankedTensorType>(v.getType()).getRank());
  }

  /// Makes `v` (laid out as `from`) have layout `to`: gathers the dimensions
  /// whose axes change, then slices them to the target.
  Value reshard(OpBuilder &b, Location loc, Value v, ShardingAttr from,
                ShardingAttr to) {
    if (from == to)
      return v;
    auto key = std::make_pair(v, Attribute(to));
    if (auto it = reshards.find(key); it != reshards.end())
      return it->second;
    RankedTensorType type = global.lookup(v);
    unsigned rank = type.getRank();
    SmallVector<SmallVector<StringRef>> cur;
    for (unsigned d = 0; d < rank; ++d)
      cur.push_back(from.getDimAxes(d));
    SmallVector<int64_t> curOuter;
    for (unsigned d = 0; d < rank; ++d)
      curOuter.push_back(from.getDimOuter(d));
    Value out = v;
    auto localOf = [&]() {
      return getLocalType(type, ShardingAttr::get(ctx, cur), mesh);
    };
    auto sameAsTarget = [&](unsigned d) {
      return cur[d] == to.getDimAxes(d) && curOuter[d] == to.getDimOuter(d);
    };
    // The local value with dimension d viewed as its `runs` strided runs:
    // [..., runs, size / runs, ...] (a reshape, no data movement).
    auto viewRuns = [&](unsigned d, int64_t runs) {
      SmallVector<int64_t> shape(localOf().getShape());
      shape[d] /= runs;
      shape.insert(shape.begin() + d, runs);
      return b.create<ReshapeOp>(
          loc, RankedTensorType::get(shape, type.getElementType()), out);
    };
    auto microBatchError = [&](unsigned d) {
      // Micro-batches run one after another: nothing holds them all.
      emitError(loc) << "dimension " << d
                     << " is split into micro-batches here but needed whole "
                        "(as "
                     << to
                     << "); an op that mixes the samples of a batch "
                        "cannot run on micro-batches";
      failedReshard = true;
    };
    // A strided dimension that changes is gathered whole, each run at once:
    // all_gather the runs' blocks, then merge the runs again.
    for (unsigned d = 0; d < rank; ++d) {
      if (curOuter[d] == 1 || sameAsTarget(d))
        continue;
      if (llvm::is_contained(cur[d], ShoalDialect::kMicroBatchAxis))
        microBatchError(d);
      Value runs = viewRuns(d, curOuter[d]);
      SmallVector<int64_t> shape(
          cast<RankedTensorType>(runs.getType()).getShape());
      shape[d + 1] *= getAxesSize(mesh, cur[d]);
      Value gathered = b.create<AllGatherOp>(
          loc, RankedTensorType::get(shape, type.getElementType()), runs, d + 1,
          b.getStrArrayAttr(cur[d]));
      if (llvm::is_contained(cur[d], "tp") && isSequenceSplit(v))
        gathered.getDefiningOp()->setAttr(ShoalDialect::kReasonAttr,
                                          sequenceGatherReason(b, cur[d]));
      cur[d].clear();
      curOuter[d] = 1;
      out = b.create<ReshapeOp>(loc, localOf(), gathered);
    }
    // A dimension whose target axes extend its current ones (["dp"] ->
    // ["dp", "tp"]) is only sliced further; any other change is gathered
    // first.
    auto refines = [&](unsigned d) {
      SmallVector<StringRef> target = to.getDimAxes(d);
      return !cur[d].empty() && target.size() > cur[d].size() &&
             llvm::equal(cur[d],
                         ArrayRef<StringRef>(target).take_front(cur[d].size()));
    };
    // Coarsening (["dp", "tp"] -> ["dp"]) gathers only the dropped minor
    // axes: the ranks that differ on them hold consecutive blocks.
    auto coarsens = [&](unsigned d) {
      SmallVector<StringRef> target = to.getDimAxes(d);
      return target.size() < cur[d].size() &&
             llvm::equal(target,
                         ArrayRef<StringRef>(cur[d]).take_front(target.size()));
    };
    // One dimension giving up its minor axes X while another takes X as its
    // minor axes is an all_to_all (expert dispatch and combine).
    for (unsigned c = 0; c < rank; ++c) {
      if (!coarsens(c) || curOuter[c] > 1 || to.getDimOuter(c) > 1)
        continue;
      SmallVector<StringRef> moved(cur[c].begin() + to.getDimAxes(c).size(),
                                   cur[c].end());
      if (llvm::is_contained(moved, ShoalDialect::kMicroBatchAxis))
        continue;
      for (unsigned s = 0; s < rank; ++s) {
        SmallVector<StringRef> target = to.getDimAxes(s);
        if (s == c || curOuter[s] > 1 || to.getDimOuter(s) > 1 ||
            target.size() != cur[s].size() + moved.size() ||
            type.getDimSize(s) % getAxesSize(mesh, target) != 0 ||
            type.getDimSize(c) % getAxesSize(mesh, cur[c]) != 0 ||
            !llvm::equal(cur[s], ArrayRef<StringRef>(target).take_front(
                                     cur[s].size())) ||
            !llvm::equal(moved,
                         ArrayRef<StringRef>(target).drop_front(cur[s].size())))
          continue;
        cur[c] = to.getDimAxes(c);
        cur[s] = target;
        out = b.create<AllToAllOp>(loc, localOf(), out, s, c,
                                   b.getStrArrayAttr(moved));
        break;
      }
    }
    for (unsigned d = 0; d < rank; ++d) {
      bool toStrided = to.getDimOuter(d) > 1;
      if (cur[d].empty() || sameAsTarget(d) || (!toStrided && refines(d)))
        continue;
      size_t keep = !toStrided && coarsens(d) ? to.getDimAxes(d).size() : 0;
      SmallVector<StringRef> axes(cur[d].begin() + keep, cur[d].end());
      if (llvm::is_contained(axes, ShoalDialect::kMicroBatchAxis))
        microBatchError(d);
      int64_t blocks = getAxesSize(mesh, cur[d]);
      bool uneven = type.getDimSize(d) % blocks != 0;
      if (uneven && keep != 0) {
        emitError(loc) << "dimension " << d << " of size " << type.getDimSize(d)
                       << " is split unevenly over " << blocks
                       << " devices and only partly gathered; uneven shards "
                          "can only be gathered whole";
        failedReshard = true;
      }
      // Gathering zero-padded (uneven) blocks: drop the padding after.
      SmallVector<int64_t> gatheredShape(localOf().getShape());
      cur[d].resize(keep);
      gatheredShape[d] *= getAxesSize(mesh, axes);
      RankedTensorType gathered =
          RankedTensorType::get(gatheredShape, type.getElementType());
      out =
          b.create<AllGatherOp>(loc, gathered, out, d, b.getStrArrayAttr(axes));
      if (llvm::is_contained(axes, "tp") && isSequenceSplit(v))
        out.getDefiningOp()->setAttr(ShoalDialect::kReasonAttr,
                                     sequenceGatherReason(b, axes));
      if (gathered != localOf())
        out = b.create<OnnxOp>(
                   loc, TypeRange{localOf()}, "Slice",
                   b.getDictionaryAttr(
                       {b.getNamedAttr("starts", b.getDenseI64ArrayAttr({0})),
                        b.getNamedAttr("ends", b.getDenseI64ArrayAttr(
                                                   {localOf().getDimSize(d)})),
                        b.getNamedAttr("axes", b.getDenseI64ArrayAttr({d}))}),
                   ValueRange{out})
                  .getResult(0);
      if (gathered != localOf())
        out.getDefiningOp()->setAttr(kUnpadAttr, b.getUnitAttr());
    }
    for (unsigned d = 0; d < rank; ++d) {
      SmallVector<StringRef> target = to.getDimAxes(d);
      if (sameAsTarget(d))
        continue;
      if (int64_t runs = to.getDimOuter(d); runs > 1) {
        // Slice a block of every run (the dimension is whole here).
        Value view = viewRuns(d, runs);
        SmallVector<int64_t> shape(
            cast<RankedTensorType>(view.getType()).getShape());
        shape[d + 1] /= getAxesSize(mesh, target);
        Value sliced = b.create<LocalSliceOp>(
            loc, RankedTensorType::get(shape, type.getElementType()), view,
            d + 1, b.getStrArrayAttr(target));
        cur[d] = target;
        curOuter[d] = runs;
        out = b.create<ReshapeOp>(loc, localOf(), sliced);
        continue;
      }
      SmallVector<StringRef> extra(target.begin() + cur[d].size(),
                                   target.end());
      cur[d] = target;
      out = b.create<LocalSliceOp>(loc, localOf(), out, d,
                                   b.getStrArrayAttr(extra));
    }
    global[out] = type;
    layout[out] = to;
    reshards[key] = out;
    return out;
  }

  void setLocal(Value v, ShardingAttr s) {
    global.try_emplace(v, cast<RankedTensorType>(v.getType()));
    layout[v] = s;
    v.setType(getLocalType(global[v], s, mesh));
  }

  LogicalResult run() {
    Block &body = tg.getBody().front();
    auto inSh = tg->getAttrOfType<ArrayAttr>(kInShardingsAttr);
    auto argSh = tg->getAttrOfType<ArrayAttr>(kArgShardingsAttr);
    auto outSh = tg->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr);
    if (!mesh || !inSh || !argSh || !outSh)
      return tg.emitError() << "TaskGraph '" << tg.getSymName()
                            << "' has no shardings; run "
                               "shoal-propagate-sharding first";

    // Sequence parallelism: identical views of one value (autodiff makes a
    // 2-d view of a layer's input for each of its q, k and v weight
    // gradients) are one value, so that the sequence is gathered once.
    if (tg->hasAttr(kSequenceParallelAttr)) {
      llvm::DenseMap<std::tuple<Value, Type, Attribute>, ReshapeOp> views;
      for (auto view : llvm::make_early_inc_range(body.getOps<ReshapeOp>())) {
        auto key = std::make_tuple(view.getInput(), view.getType(),
                                   Attribute(view->getAttrDictionary()));
        auto [it, fresh] = views.try_emplace(key, view);
        if (fresh)
          continue;
        view.replaceAllUsesWith(it->second.getResult());
        view.erase();
      }
    }

    // Rules read global shapes, so take them all before rewriting.
    llvm::DenseMap<Operation *, ShardingRule> rules;
    for (Operation &op : body) {
      for (Value r : op.getResults())
        global[r] = cast<RankedTensorType>(r.getType());
      if (auto iface = dyn_cast<ShardingRuleOpInterface>(op))
        rules[&op] = iface.getShardingRule();
    }

    // The ops to rewrite, before any reshard is inserted.
    SmallVector<Operation *> ops;
    for (Operation &op : body)
      ops.push_back(&op);
    OpBuilder b(ctx);
    b.setInsertionPointToStart(&body);
    for (BlockArgument arg : body.getArguments()) {
      auto from = cast<ShardingAttr>(inSh[arg.getArgNumber()]);
      auto to = cast<ShardingAttr>(argSh[arg.getArgNumber()]);
      setLocal(arg, from);
      Value v = reshard(b, tg.getLoc(), arg, from, to);
      if (v == arg)
        continue;
      SmallPtrSet<Operation *, 4> chain;
      for (Value x = v; x != arg; x = x.getDefiningOp()->getOperand(0))
        chain.insert(x.getDefiningOp());
      arg.replaceAllUsesExcept(v, chain);
    }

    for (Operation *op : ops) {
      b.setInsertionPoint(op);
      if (auto w = dyn_cast<WeightOp>(op)) {
        ShardingAttr s =
            ShardingAttr::getReplicated(ctx, w.getType().getRank());
        if (auto list =
                w->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr))
          s = cast<ShardingAttr>(list[0]);
        // The plan needs the initializer's global shape, which the local
        // type no longer gives when shards are uneven.
        w->setAttr("shoal.global_shape",
                   b.getDenseI64ArrayAttr(w.getType().getShape()));
        // A weight is the same for every micro-batch: one that holds a
        // batch (a constant the exporter folded to the batch size, such as
        // a causal mask or vit's class token expanded to the batch) is
        // loaded whole and each micro-batch slices its rows. Not a weight
        // updated in place (trained): its update would need the rows of
        // every micro-batch (the runtime refuses the plan instead). A
        // frozen one, or one no gradient reaches, is like a constant.
        bool trained = updated.contains(w.getName());
        SmallVector<SmallVector<StringRef>> dims;
        bool perMicroBatch = false;
        for (unsigned d = 0, e = w.getType().getRank(); d < e; ++d) {
          dims.emplace_back();
          for (StringRef a : s.getDimAxes(d)) {
            if (a == ShoalDialect::kMicroBatchAxis)
              perMicroBatch = true;
            else
              dims.back().push_back(a);
          }
        }
        if (perMicroBatch && !trained && !s.isStrided()) {
          ShardingAttr whole = ShardingAttr::get(ctx, dims);
          w->setAttr(ShoalDialect::kShardingAttr, b.getArrayAttr({whole}));
          setLocal(w.getResult(), whole);
          b.setInsertionPointAfter(w);
          Value v = reshard(b, w.getLoc(), w.getResult(), whole, s);
          SmallPtrSet<Operation *, 4> chain;
          for (Value x = v; x != w.getResult();
               x = x.getDefiningOp()->getOperand(0))
            chain.insert(x.getDefiningOp());
          w.getResult().replaceAllUsesExcept(v, chain);
          continue;
        }
        setLocal(w.getResult(), s);
        continue;
      }
      if (isa<ConstantOp>(op))
        continue;
      if (auto yield = dyn_cast<YieldOp>(op)) {
        for (OpOperand &use : yield->getOpOperands()) {
          auto to = cast<ShardingAttr>(outSh[use.getOperandNumber()]);
          use.set(reshard(b, op->getLoc(), use.get(), layoutOf(use.get()), to));
        }
        continue;
      }
      if (failed(partitionOp(b, op, rules[op])))
        return failure();
    }
    if (failedReshard)
      return failure();
    mergeSummedAllReduces();
    if (tg->hasAttr(kSequenceParallelAttr))
      foldReduceScatters();
    for (auto [r, s] : llvm::zip(tg.getResults(), outSh))
      r.setType(getLocalType(cast<RankedTensorType>(r.getType()),
                             cast<ShardingAttr>(s), mesh));
    markUneven();
    // The layouts are now in the types and collectives; keep only what the
    // plan export reads (weights' and outputs' shardings).
    for (Operation &op : body) {
      op.removeAttr(ShoalDialect::kFactorShardingAttr);
      op.removeAttr(kFactorOuterAttr);
      op.removeAttr(kSequenceSplitAttr);
      if (!isa<WeightOp>(op))
        op.removeAttr(ShoalDialect::kShardingAttr);
    }
    tg->removeAttr(kInShardingsAttr);
    tg->removeAttr(kArgShardingsAttr);
    tg->removeAttr(kSequenceSplitAttr);
    return success();
  }

  /// The uneven dimensions of `v` (split over `axis`), empty if none.
  SmallVector<unsigned> unevenDims(Value v, StringRef axis) {
    SmallVector<unsigned> dims;
    ShardingAttr s = layoutOf(v);
    for (unsigned d = 0, e = cast<RankedTensorType>(v.getType()).getRank();
         d < e; ++d)
      if (llvm::is_contained(s.getDimAxes(d), axis))
        dims.push_back(d);
    return dims;
  }

  /// Batch blocks: a block of a value expanded from one that is whole on
  /// every rank is that value expanded to the block (what autodiff's
  /// gradient of a mean over the batch is), so each rank expands to its own
  /// block rather than slicing an equal one.
  void sliceExpandsLocally(StringRef axis) {
    SmallVector<LocalSliceOp> slices;
    tg.getBody().front().walk([&](LocalSliceOp s) {
      if (llvm::is_contained(s.getAxes().getAsValueRange<StringAttr>(), axis))
        slices.push_back(s);
    });
    for (LocalSliceOp s : slices) {
      auto e = s.getInput().getDefiningOp<ExpandOp>();
      if (!e || !unevenDims(e.getInput(), axis).empty())
        continue;
      OpBuilder b(s);
      auto local = b.create<ExpandOp>(s.getLoc(), s.getType(), e.getInput());
      local->setDiscardableAttrs(e->getDiscardableAttrDictionary());
      global[local.getResult()] = global.lookup(s.getResult());
      layout[local.getResult()] = layoutOf(s.getResult());
      s.getResult().replaceAllUsesWith(local.getResult());
      s.erase();
      if (e->use_empty())
        e.erase();
    }
  }

  /// Shards by speed (shoal-plan's kUnevenShardsAttr): the types stay those
  /// of an even split; every value whose blocks differ between ranks gets
  /// its global type and sharding (kUnevenLayoutsAttr), from which the plan
  /// export writes Program.value_layouts, and the TaskGraph kUnevenAttr.
  /// Inputs of the TaskGraph split over the axis keep even blocks. When some
  /// value cannot have uneven blocks (an op reading it together with such an
  /// input, a collective other than an all-reduce over the axis, a strided
  /// split, a result of the TaskGraph, an op whose attributes fix its
  /// shape), the TaskGraph keeps the even split, and a warning says why.
  ///
  /// Batch blocks (shoal-plan's kBatchBlocksAttr, on a replicated scope):
  /// the same, with the batch cut in whole samples; the TaskGraph's inputs
  /// that are the graph's inputs and its results that are the graph's
  /// outputs then have uneven blocks too (Program.value_layouts of the
  /// ports), so each replica reads and writes its own share of the batch.
  void markUneven() {
    auto module = tg->getParentOfType<ModuleOp>();
    DenseI64ArrayAttr weights;
    bool batch = false;
    if (auto shards = module->getAttrOfType<DictionaryAttr>(kUnevenShardsAttr))
      weights = shards.getAs<DenseI64ArrayAttr>(tg.getSymName());
    if (auto blocks = module->getAttrOfType<DictionaryAttr>(kBatchBlocksAttr))
      if (auto w = blocks.getAs<DenseI64ArrayAttr>(tg.getSymName())) {
        weights = w;
        batch = true;
      }
    if (!weights)
      return;
    int64_t multiple = 1;
    if (auto m = module->getAttrOfType<IntegerAttr>(kShardMultipleAttr);
        m && !batch)
      multiple = std::max<int64_t>(1, m.getInt());
    const StringRef axis = "tp";
    std::string why;
    auto refuse = [&](const Twine &reason) {
      if (why.empty())
        why = reason.str();
    };
    if (batch)
      sliceExpandsLocally(axis);
    // Batch blocks: the TaskGraph's inputs that come from the graph's
    // inputs, and its results that go only to the graph's outputs.
    auto graphInput = [&](BlockArgument arg) {
      return batch && isa<BlockArgument>(tg.getInputs()[arg.getArgNumber()]);
    };
    auto graphOutput = [&](unsigned result) {
      Value r = tg.getResult(result);
      return batch && !r.use_empty() &&
             llvm::all_of(r.getUsers(), [](Operation *user) {
               return isa<func::ReturnOp>(user);
             });
    };
    if (mesh.getAxisSize(axis) != static_cast<int64_t>(weights.size()))
      refuse("its mesh has no '" + axis + "' axis of " + Twine(weights.size()) +
             " devices");
    if (mesh.getNumDevices() != mesh.getAxisSize(axis))
      refuse("its mesh has other axes of more than one device");
    std::vector<int64_t> w(weights.asArrayRef().begin(),
                           weights.asArrayRef().end());
    // Elements of `v`'s block on each coordinate of the axis.
    auto elementsOn = [&](Value v, int64_t c) {
      RankedTensorType g = global.lookup(v);
      SmallVector<unsigned> dims = unevenDims(v, axis);
      int64_t n = 1;
      for (unsigned d = 0, e = g.getRank(); d < e; ++d)
        n *= llvm::is_contained(dims, d)
                 ? rt::unevenBlockSizes(g.getDimSize(d), w, multiple)[c]
                 : cast<RankedTensorType>(v.getType()).getDimSize(d);
      return n;
    };
    SmallVector<Value> marked;
    Block &body = tg.getBody().front();
    for (Operation &op : body) {
      if (!why.empty())
        break;
      auto name = [&]() {
        StringRef onnx = onnxNodeName(&op);
        return "'" + op.getName().getStringRef().str() + "'" +
               (onnx.empty() ? std::string() : " (" + onnx.str() + ")");
      };
      // Values split over the axis: op results have uneven blocks, inputs
      // of the TaskGraph (block arguments) even ones; an op may not mix
      // them.
      bool anyUneven = false, evenInput = false;
      SmallVector<Value> touched(op.getOperands());
      llvm::append_range(touched, op.getResults());
      for (Value v : touched) {
        if (!isa<RankedTensorType>(v.getType()) || unevenDims(v, axis).empty())
          continue;
        if (auto arg = dyn_cast<BlockArgument>(v)) {
          if (graphInput(arg))
            anyUneven = true;
          else
            evenInput = true;
          continue;
        }
        anyUneven = true;
        if (!global.lookup(v))
          refuse(name() + " has a value the partitioner made");
        else if (layoutOf(v).isStrided())
          refuse(name() + " has a strided split over '" + axis + "'");
      }
      if (anyUneven && evenInput)
        refuse(name() + " reads an input of the TaskGraph split over '" + axis +
               "' in even blocks");
      if (!anyUneven)
        continue;
      // Ops whose shapes follow their operands'; a reshape must keep its
      // blocks whole on every rank, a mean must not average a block.
      bool overAxis =
          llvm::TypeSwitch<Operation *, bool>(&op)
              // An all-gather of the uneven blocks into whole ones is fine.
              .Case([&](AllGatherOp g) {
                return llvm::is_contained(
                           g.getAxes().getAsValueRange<StringAttr>(), axis) &&
                       !unevenDims(g.getResult(), axis).empty();
              })
              .Case<LocalSliceOp, ReduceScatterOp, AllToAllOp>([&](auto c) {
                return llvm::is_contained(
                    c.getAxes().template getAsValueRange<StringAttr>(), axis);
              })
              .Default([](Operation *) { return false; });
      if (overAxis) {
        refuse(name() + " runs over '" + axis +
               "' on a value with uneven blocks");
        break;
      }
      if (isa<YieldOp>(op)) {
        for (OpOperand &use : op.getOpOperands())
          if (isa<RankedTensorType>(use.get().getType()) &&
              !unevenDims(use.get(), axis).empty() &&
              !graphOutput(use.getOperandNumber()))
            refuse("a result of the TaskGraph " +
                   Twine(batch ? "that goes to another TaskGraph " : "") +
                   "is split over '" + axis + "'");
        if (!why.empty())
          break;
        continue;
      }
      bool supported =
          isa<WeightOp, AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp,
              EqualOp, LessOp, GreaterOp, LessOrEqualOp, GreaterOrEqualOp,
              AndOp, OrOp, XorOp, WhereOp, CastOp, ErfOp, TanhOp, ReluOp,
              SqrtOp, ExpOp, NegOp, SigmoidOp, SinOp, CosOp, AbsOp, LogOp,
              ReciprocalOp, FloorOp, CeilOp, NotOp, MatMulOp, GemmOp, SoftmaxOp,
              LayerNormOp, ReshapeOp, TransposeOp, ReduceSumOp, ReduceMeanOp,
              GeluOp, GeluGradOp, AddLayerNormOp, AttentionOp, AttentionGradOp,
              SoftmaxGradOp, LayerNormGradOp, LayerNormScaleGradOp, AdamWOp,
              SGDOp, AssignOp, AllReduceOp, AllGatherOp, ExpandOp,
              SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp, GatherGradOp>(
              op);
      if (auto g = dyn_cast<GatherOp>(op))
        supported = !g.getShardAxes();
      if (auto g = dyn_cast<GatherGradOp>(op))
        supported = !g.getShardAxes();
      if (!supported) {
        refuse(name() + " does not take blocks of different sizes");
        break;
      }
      if (isa<ReshapeOp, ReduceMeanOp>(op)) {
        Value in = op.getOperand(0), out = op.getResult(0);
        bool mean = isa<ReduceMeanOp>(op);
        for (int64_t c = 0, n = static_cast<int64_t>(w.size()); c < n; ++c)
          if (mean ? unevenDims(out, axis).empty()
                   : elementsOn(in, c) != elementsOn(out, c)) {
            refuse(name() +
                   (mean ? " averages over a dimension split over '"
                         : " would cut a block of its input apart "
                           "over '") +
                   axis + "'");
            break;
          }
      }
      for (Value r : op.getResults())
        if (!unevenDims(r, axis).empty())
          marked.push_back(r);
    }
    OpBuilder b(ctx);
    if (!why.empty()) {
      SmallVector<std::string> weightsText;
      for (int64_t x : w)
        weightsText.push_back(std::to_string(x));
      tg.emitWarning() << "shoal-partition: the "
                       << (batch ? "batch blocks by speed" : "shards by speed")
                       << " of TaskGraph '" << tg.getSymName() << "' over '"
                       << axis << "' (" << llvm::join(weightsText, "/")
                       << ") are not compiled: " << why
                       << "; every rank gets an equal block";
      return;
    }
    // The graph's inputs with uneven blocks (batch blocks).
    SmallVector<Attribute> argLayouts;
    bool anyArg = false;
    for (BlockArgument arg : body.getArguments()) {
      if (graphInput(arg) && isa<RankedTensorType>(arg.getType()) &&
          !unevenDims(arg, axis).empty()) {
        argLayouts.push_back(b.getDictionaryAttr(
            {b.getNamedAttr("global_shape", b.getDenseI64ArrayAttr(
                                                global.lookup(arg).getShape())),
             b.getNamedAttr("sharding", layoutOf(arg))}));
        anyArg = true;
      } else {
        argLayouts.push_back(b.getUnitAttr());
      }
    }
    if (marked.empty() && !anyArg)
      return;
    if (anyArg)
      tg->setAttr(kUnevenArgLayoutsAttr, b.getArrayAttr(argLayouts));
    for (Value v : marked) {
      Operation *def = v.getDefiningOp();
      SmallVector<Attribute> entries;
      if (auto old = def->getAttrOfType<ArrayAttr>(kUnevenLayoutsAttr))
        entries.assign(old.begin(), old.end());
      entries.resize(def->getNumResults(), b.getUnitAttr());
      entries[cast<OpResult>(v).getResultNumber()] = b.getDictionaryAttr(
          {b.getNamedAttr("global_shape",
                          b.getDenseI64ArrayAttr(global.lookup(v).getShape())),
           b.getNamedAttr("sharding", layoutOf(v))});
      def->setAttr(kUnevenLayoutsAttr, b.getArrayAttr(entries));
    }
    tg->setAttr(
        kUnevenAttr,
        b.getDictionaryAttr(
            {b.getNamedAttr("axis", b.getStringAttr(axis)),
             b.getNamedAttr("weights", weights),
             b.getNamedAttr("multiple", b.getI64IntegerAttr(multiple))}));
  }

  static std::string formatAxesList(ArrayRef<StringRef> axes) {
    std::string out;
    for (StringRef a : axes)
      out += (out.empty() ? "" : ",") + a.str();
    return out;
  }

  /// The all-reduced max and statistics of a vocabulary-parallel
  /// cross-entropy over local `logits` (inserted at `b`), made once per
  /// (logits, labels) and shared by the loss and its gradient.
  std::pair<Value, Value> getVocabStats(OpBuilder &b, Location loc,
                                        Value logits, Value labels,
                                        ArrayRef<StringRef> axes, int64_t size,
                                        uint64_t ignoreIndex, Attribute phase) {
    auto key = std::make_pair(logits, labels);
    if (auto it = vocabStats.find(key); it != vocabStats.end())
      return it->second;
    Type f32 = b.getF32Type();
    auto labelsType = cast<RankedTensorType>(labels.getType());
    auto posType = RankedTensorType::get(labelsType.getShape(), f32);
    SmallVector<int64_t> statsShape(labelsType.getShape());
    statsShape.push_back(2);
    auto statsType = RankedTensorType::get(statsShape, f32);
    ArrayAttr axesAttr = b.getStrArrayAttr(axes);
    IntegerAttr sizeAttr = b.getI64IntegerAttr(size);
    std::string over = formatAxesList(axes);
    auto localMax =
        b.create<VocabMaxOp>(loc, posType, logits, axesAttr, sizeAttr);
    auto max = b.create<AllReduceOp>(loc, posType, localMax, axesAttr, "max");
    max->setAttr(ShoalDialect::kReasonAttr,
                 b.getStringAttr("vocabulary-parallel cross-entropy: the "
                                 "largest logit over the classes split over " +
                                 over));
    auto localStats = b.create<VocabStatsOp>(
        loc, statsType, logits, labels, max, axesAttr, sizeAttr,
        b.getI64IntegerAttr(static_cast<int64_t>(ignoreIndex)));
    auto stats = b.create<AllReduceOp>(loc, statsType, localStats, axesAttr);
    stats->setAttr(ShoalDialect::kReasonAttr,
                   b.getStringAttr("vocabulary-parallel cross-entropy: softmax "
                                   "sums and label logits over the classes "
                                   "split over " +
                                   over));
    // Layouts: the positions as the labels have them (whole over `axes`).
    RankedTensorType labelsGlobal = global.lookup(labels);
    ShardingAttr posLayout = layoutOf(labels);
    SmallVector<SmallVector<StringRef>> statsDims;
    for (unsigned d = 0; d < labelsGlobal.getRank(); ++d)
      statsDims.push_back(posLayout.getDimAxes(d));
    statsDims.emplace_back();
    ShardingAttr statsLayout = ShardingAttr::get(ctx, statsDims);
    SmallVector<int64_t> statsGlobal(labelsGlobal.getShape());
    statsGlobal.push_back(2);
    if (phase)
      for (Operation *made : {localMax.getOperation(), max.getOperation(),
                              localStats.getOperation(), stats.getOperation()})
        made->setAttr(ShoalDialect::kPhaseAttr, phase);
    for (Value v : {localMax.getResult(), max.getResult()}) {
      layout[v] = posLayout;
      global[v] = RankedTensorType::get(labelsGlobal.getShape(), f32);
    }
    for (Value v : {localStats.getResult(), stats.getResult()}) {
      layout[v] = statsLayout;
      global[v] = RankedTensorType::get(statsGlobal, f32);
    }
    return vocabStats[key] = {max, stats};
  }

  /// Rewrites a softmax_cross_entropy (or its gradient) whose class axis is
  /// split over `axes` into Megatron-LM's vocabulary-parallel form: no rank
  /// ever holds the whole logits.
  void rewriteVocabLoss(OpBuilder &b, Operation *op, ArrayRef<StringRef> axes,
                        int64_t size) {
    b.setInsertionPoint(op);
    Location loc = op->getLoc();
    Value result = op->getResult(0);
    Value replacement;
    if (auto ce = dyn_cast<SoftmaxCrossEntropyOp>(op)) {
      auto [max, stats] = getVocabStats(b, loc, ce.getLogits(), ce.getLabels(),
                                        axes, size, ce.getIgnoreIndex(),
                                        op->getAttr(ShoalDialect::kPhaseAttr));
      replacement = b.create<VocabCrossEntropyOp>(loc, result.getType(), max,
                                                  stats, ce.getLabels(),
                                                  ce.getIgnoreIndexAttr());
    } else {
      auto grad = cast<SoftmaxCrossEntropyGradOp>(op);
      auto [max, stats] = getVocabStats(
          b, loc, grad.getLogits(), grad.getLabels(), axes, size,
          grad.getIgnoreIndex(), op->getAttr(ShoalDialect::kPhaseAttr));
      replacement = b.create<VocabCrossEntropyGradOp>(
          loc, result.getType(), grad.getLogits(), grad.getLabels(),
          grad.getDloss(), max, stats, b.getStrArrayAttr(axes),
          b.getI64IntegerAttr(size), grad.getIgnoreIndexAttr());
    }
    replacement.getDefiningOp()->setDiscardableAttrs(
        op->getDiscardableAttrDictionary());
    replacement.getDefiningOp()->removeAttr(ShoalDialect::kShardingAttr);
    replacement.getDefiningOp()->removeAttr(ShoalDialect::kFactorShardingAttr);
    layout[replacement] = layoutOf(result);
    global[replacement] = global.lookup(result);
    result.replaceAllUsesWith(replacement);
    op->erase();
  }

  /// Sizes in the attributes of a Split or Slice whose axis is split (in
  /// every piece, the rule's [pieces, P]) become the local ones.
  void localizeAttrs(OnnxOp op) {
    DictionaryAttr attrs = op.getOnnxAttrs();
    Builder b(ctx);
    auto shape = [](Value v) {
      return cast<RankedTensorType>(v.getType()).getShape();
    };
    int64_t rank = shape(op->getOperand(0)).size();
    NamedAttrList list(attrs);
    if (op.getOpType() == "Split") {
      if (!attrs.get("split"))
        return;
      int64_t axis = getOnnxAxis(op, rank, 0);
      SmallVector<int64_t> sizes;
      for (Value r : op->getResults())
        sizes.push_back(shape(r)[axis]);
      list.set("split", b.getDenseI64ArrayAttr(sizes));
    } else if (op.getOpType() == "Slice") {
      auto starts = attrs.getAs<DenseI64ArrayAttr>("starts");
      auto axes = attrs.getAs<DenseI64ArrayAttr>("axes");
      if (!starts || !axes || starts.size() != 1 || axes.size() != 1)
        return;
      int64_t axis = axes[0] < 0 ? axes[0] + rank : axes[0];
      int64_t local = shape(op->getOperand(0))[axis];
      int64_t whole = global.lookup(op->getOperand(0)).getDimSize(axis);
      if (local == whole)
        return;
      int64_t start = starts[0] < 0 ? starts[0] + whole : starts[0];
      int64_t localStart = start / (whole / local);
      list.set("starts", b.getDenseI64ArrayAttr({localStart}));
      list.set("ends", b.getDenseI64ArrayAttr(
                           {localStart + shape(op->getResult(0))[axis]}));
    } else if (op.getOpType() == "Pad") {
      // Zero padding around one piece: the pads scale like the piece.
      auto pads = attrs.getAs<DenseI64ArrayAttr>("pads");
      if (!pads || (int64_t)pads.size() != 2 * rank || attrs.get("axes"))
        return;
      SmallVector<int64_t> local(pads.asArrayRef());
      bool changed = false;
      for (int64_t d = 0; d < rank; ++d) {
        int64_t have = shape(op->getOperand(0))[d];
        int64_t whole = global.lookup(op->getOperand(0)).getDimSize(d);
        if (have == whole || have == 0)
          continue;
        local[d] = pads[d] / (whole / have);
        local[d + rank] = pads[d + rank] / (whole / have);
        changed = true;
      }
      if (!changed)
        return;
      list.set("pads", b.getDenseI64ArrayAttr(local));
    } else if (llvm::is_contained({"Conv", "ConvInputGrad", "ConvWeightGrad"},
                                  op.getOpType())) {
      // Channels split by groups: each rank runs its share of the groups.
      auto group = attrs.getAs<IntegerAttr>("group");
      if (!group || group.getInt() <= 1 || rank < 2)
        return;
      int64_t local = shape(op->getOperand(0))[1];
      int64_t whole = global.lookup(op->getOperand(0)).getDimSize(1);
      if (local == whole || local == 0)
        return;
      list.set("group", b.getI64IntegerAttr(group.getInt() / (whole / local)));
    } else {
      return;
    }
    op.setOnnxAttrsAttr(list.getDictionary(ctx));
  }

  LogicalResult partitionOp(OpBuilder &b, Operation *op,
                            const ShardingRule &rule) {
    FactorAxes axes = getFactorAxes(op);
    if (axes.size() != rule.getNumFactors())
      return op->emitError() << "has no factor shardings; run "
                                "shoal-propagate-sharding first";
    FactorOuter outer = getFactorOuter(op, axes.size());
    // An in-place update (AdamW, SGD, assign) writes its weight operand:
    // that one keeps its layout (a reshard would write a copy), and the
    // gradient, state and value are brought to it.
    // The state is written in place too: it must already be stored as the
    // weight is (shoal-propagate-sharding lays it out so), never resharded
    // into a temporary that the update would write.
    bool inPlace = isa<AdamWOp, SGDOp, AssignOp>(op);
    if (inPlace)
      for (unsigned i : ArrayRef(getInPlaceOperands(op)).drop_front()) {
        Value state = op->getOperand(i);
        ShardingAttr have = layoutOf(state), want = layoutOf(op->getOperand(0));
        if (have == want)
          continue;
        auto name = [](Value v) -> std::string {
          if (auto w = v.getDefiningOp<WeightOp>())
            return "'" + w.getName().str() + "'";
          return "operand";
        };
        return op->emitOpError()
               << "updates weight " << name(op->getOperand(0))
               << " in place, laid out as " << want << ", but its state "
               << name(state) << " (operand " << i << ") is laid out as "
               << have
               << ": resharding it would update a temporary copy and leave "
                  "the stored state as it was";
      }
    for (OpOperand &use : op->getOpOperands()) {
      ShardingAttr need =
          inPlace ? layoutOf(op->getOperand(0))
                  : shardingFromFactors(ctx, rule,
                                        rule.operands[use.getOperandNumber()],
                                        axes, outer);
      use.set(reshard(b, op->getLoc(), use.get(), layoutOf(use.get()), need));
    }
    auto resultSh = op->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr);
    if (!resultSh || resultSh.size() != op->getNumResults())
      return op->emitError() << "has no result shardings; run "
                                "shoal-propagate-sharding first";
    // A partial sum scattered along a dimension (sequence parallelism,
    // shoal-propagate-sharding): the op computes the layout of its
    // factors, and a reduce_scatter over the contracted factors' axes gives
    // the result's.
    int64_t scatterDim = -1;
    ShardingAttr scatteredLayout;
    for (auto [r, s] : llvm::zip(op->getResults(), resultSh)) {
      auto want = cast<ShardingAttr>(s);
      if (r.getResultNumber() == 0 && rule.results.size() == 1) {
        ShardingAttr computed =
            shardingFromFactors(ctx, rule, rule.results.front(), axes, outer);
        if (computed != want &&
            (scatterDim = scatteredDim(rule, axes, computed, want)) >= 0) {
          scatteredLayout = want;
          setLocal(r, computed);
          continue;
        }
      }
      setLocal(r, want);
    }
    if (auto onnx = dyn_cast<OnnxOp>(op))
      localizeAttrs(onnx);

    // A split vocabulary (FactorKind::Vocab): Megatron-LM's
    // vocabulary-parallel embedding and cross-entropy.
    SmallVector<StringRef> vocabAxes;
    int64_t vocabSize = 0;
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds))
      if (kind == FactorKind::Vocab && !axes[f].empty()) {
        vocabAxes = axes[f];
        vocabSize = rule.factorSizes[f];
      }
    SmallVector<StringRef> partialVocab;
    if (!vocabAxes.empty()) {
      Builder ab(ctx);
      if (isa<GatherOp, GatherGradOp>(op)) {
        // Each rank looks up (scatters into) the rows it holds; a lookup's
        // rows held elsewhere are zeros, summed over the vocabulary axes.
        op->setAttr("shard_axes", ab.getStrArrayAttr(vocabAxes));
        op->setAttr("shard_size", ab.getI64IntegerAttr(vocabSize));
        if (isa<GatherOp>(op))
          partialVocab = vocabAxes;
      } else if (isa<SoftmaxCrossEntropyOp, SoftmaxCrossEntropyGradOp>(op)) {
        rewriteVocabLoss(b, op, vocabAxes, vocabSize);
        return success();
      } else {
        return op->emitError() << "splits a vocabulary but has no "
                                  "vocabulary-parallel form";
      }
    }

    // Uneven (zero-padded) shards are only summed where every operand
    // carrying the padded factor is a weight, padded with zeros too (a
    // row-parallel product after a column-parallel one).
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds)) {
      if (kind != FactorKind::Reduction || axes[f].empty() ||
          rule.factorSizes[f] % getAxesSize(mesh, axes[f]) == 0)
        continue;
      bool zeroPadded = false;
      for (auto [k, dims] : llvm::enumerate(rule.operands))
        for (const DimFactors &df : dims)
          zeroPadded |= llvm::is_contained(df, (int)f) &&
                        isZeroPaddedWeight(op->getOperand(k));
      if (!zeroPadded)
        return op->emitError()
               << "sums a dimension of size " << rule.factorSizes[f]
               << " split unevenly over " << getAxesSize(mesh, axes[f])
               << " devices, but no operand along it is a weight (whose "
                  "padding is zero)";
    }
    // A split reduction factor leaves partial sums.
    SmallVector<StringRef> partial = partialVocab;
    for (auto [f, kind] : llvm::enumerate(rule.factorKinds))
      if (kind == FactorKind::Reduction)
        partial.append(axes[f].begin(), axes[f].end());
    if (partial.empty())
      return success();
    b.setInsertionPointAfter(op);
    Value result = op->getResult(0);
    ShardingAttr resultLayout = layoutOf(result);
    if (auto gemm = dyn_cast<GemmOp>(op); gemm && gemm.getC()) {
      // Add the bias once, after the sum, not on every rank.
      if (gemm.getBeta().convertToFloat() != 1.0f)
        return op->emitError()
               << "a Gemm with beta != 1 cannot be split along its "
                  "contracted dimension yet";
      Value c = gemm.getC();
      auto plain = b.create<GemmOp>(gemm.getLoc(), gemm.getType(), gemm.getA(),
                                    gemm.getB(), Value(), gemm.getAlphaAttr(),
                                    gemm.getBetaAttr(), gemm.getTransAAttr(),
                                    gemm.getTransBAttr());
      auto sum =
          b.create<AllReduceOp>(gemm.getLoc(), plain.getType(),
                                plain.getResult(), b.getStrArrayAttr(partial));
      auto add = b.create<AddOp>(gemm.getLoc(), gemm.getType(), sum, c);
      result.replaceAllUsesWith(add.getResult());
      layout[add.getResult()] = resultLayout;
      // Copied first: inserting may grow the map under a reference.
      RankedTensorType resultType = global.lookup(result);
      global[add.getResult()] = resultType;
      gemm.erase();
      return success();
    }
    if (auto conv = dyn_cast<OnnxOp>(op);
        conv && conv.getOpType() == "Conv" && conv->getNumOperands() == 3) {
      // Input channels split (a row-parallel Conv): add the bias once,
      // after the sum, not on every rank.
      auto plain = b.create<OnnxOp>(
          conv.getLoc(), conv->getResultTypes(), conv.getOpType(),
          conv.getOnnxAttrs(),
          ValueRange{conv->getOperand(0), conv->getOperand(1)});
      plain->setDiscardableAttrs(conv->getDiscardableAttrDictionary());
      auto type = cast<RankedTensorType>(result.getType());
      auto sum = b.create<AllReduceOp>(conv.getLoc(), type, plain.getResult(0),
                                       b.getStrArrayAttr(partial));
      SmallVector<int64_t> biasShape(type.getRank(), 1);
      biasShape[1] = type.getDimSize(1);
      Value bias = b.create<ReshapeOp>(
          conv.getLoc(),
          RankedTensorType::get(biasShape, type.getElementType()),
          conv->getOperand(2));
      auto add = b.create<AddOp>(conv.getLoc(), type, sum, bias);
      result.replaceAllUsesWith(add.getResult());
      layout[add.getResult()] = resultLayout;
      // Copied first: inserting may grow the map under a reference.
      RankedTensorType resultType = global.lookup(result);
      global[add.getResult()] = resultType;
      conv.erase();
      return success();
    }
    if (scatterDim >= 0) {
      RankedTensorType resultType = global.lookup(result);
      auto rs = b.create<ReduceScatterOp>(
          op->getLoc(), getLocalType(resultType, scatteredLayout, mesh), result,
          scatterDim, b.getStrArrayAttr(partial));
      rs->setAttr(ShoalDialect::kReasonAttr,
                  b.getStringAttr("sequence parallelism: partial sums summed "
                                  "and scattered along the sequence over " +
                                  formatAxesList(partial)));
      rs->setAttr(kSequenceSplitAttr, b.getDenseI64ArrayAttr({0}));
      result.replaceAllUsesExcept(rs.getResult(), rs);
      layout[rs.getResult()] = scatteredLayout;
      global[rs.getResult()] = resultType;
      return success();
    }
    auto sum = b.create<AllReduceOp>(op->getLoc(), result.getType(), result,
                                     b.getStrArrayAttr(partial));
    if (!partialVocab.empty())
      sum->setAttr(ShoalDialect::kReasonAttr,
                   b.getStringAttr("vocabulary-parallel embedding: each rank "
                                   "looks up the rows it holds over " +
                                   formatAxesList(partialVocab)));
    result.replaceAllUsesExcept(sum.getResult(), sum);
    layout[sum.getResult()] = resultLayout;
    RankedTensorType resultType = global.lookup(result);
    global[sum.getResult()] = resultType;
    return success();
  }
};

struct PartitionPass : public ::shoal::impl::PartitionPassBase<PartitionPass> {
  void runOnOperation() final {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      Block &entry = func.getBody().front();
      // Bridges end in the layout of their destination.
      for (auto bridge : entry.getOps<BridgeOp>()) {
        LayoutAttr to = bridge.getTo();
        bridge.getResult().setType(getLocalType(
            bridge.getResult().getType(), to.getSharding(), to.getMesh()));
      }
      // A graph input is laid out on the mesh of the TaskGraph that reads it
      // first; others get it over a bridge.
      for (BlockArgument arg : entry.getArguments()) {
        auto s = func.getArgAttrOfType<ShardingAttr>(
            arg.getArgNumber(), ShoalDialect::kShardingAttr);
        TaskGraphOp owner = getOwnerTaskGraph(arg);
        if (s && owner)
          arg.setType(getLocalType(cast<RankedTensorType>(arg.getType()), s,
                                   owner.getMeshAttr()));
      }
      // The weights an optimizer or an assign updates in place, and their
      // optimizer state (by name: each TaskGraph reads its own value of a
      // weight).
      llvm::StringSet<> updated;
      func.walk([&](Operation *op) {
        if (isa<AdamWOp, SGDOp, AssignOp>(op))
          for (Value v : op->getOperands())
            if (auto w = v.getDefiningOp<WeightOp>())
              updated.insert(w.getName());
      });
      for (auto tg : entry.getOps<TaskGraphOp>())
        if (failed(TaskGraphPartitioner(tg, updated).run()))
          return signalPassFailure();
      func.setType(FunctionType::get(func.getContext(),
                                     entry.getArgumentTypes(),
                                     entry.getTerminator()->getOperandTypes()));
    }
  }
};

} // namespace
