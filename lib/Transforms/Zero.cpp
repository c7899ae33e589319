//===- Zero.cpp - ZeRO: optimizer state, gradients, weights split -*- C++
//-*-===//
//
// shoal-zero (training config `zero: 1|2|3`, docs/Training.md "ZeRO") runs
// on the partitioned TaskGraphs. For every AdamW/SGD update, the mesh axes
// over which its weight is replicated (the data-parallel replicas, `mb`
// aside) become the ZeRO axes Z, and the update's tensors are cut along
// dimension 0 into one block per rank of Z (ceil-sized, the last ones
// zero-padded), as DeepSpeed partitions its flat buffers:
//
//   1  the optimizer state (adam.m, adam.v, sgd.momentum) holds this rank's
//      block; the gradient's all_reduce becomes a reduce_scatter (summed
//      over the micro-batches first: the whole gradient is accumulated
//      locally and scattered once per step, as Megatron's distributed
//      optimizer does); the update writes its block of the weight and
//      gathers the weight (`shoal.zero_axes` on the update).
//   2  as 1 (with micro-batches too: one reduce-scatter per step; without
//      them the gradient buffer is the block either way).
//   3  the weight itself is stored as its block: it is gathered just
//      before each op that reads it (each micro-batch, forward and
//      backward), the gradient is reduce-scattered at every micro-batch and
//      only the block is accumulated (DeepSpeed's stage 3), and the update
//      is a plain one of blocks.
//
// A weight that cannot be cut (rank 0, fewer rows than ranks, or a dim 0
// already split whose local size Z does not divide) keeps the plain update,
// with a warning.
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

namespace shoal {
#define GEN_PASS_DEF_ZEROPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

ShardingAttr shardingOf(Operation *op) {
  auto list = op->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr);
  if (!list || list.empty())
    return {};
  return dyn_cast<ShardingAttr>(list[0]);
}

/// `s` with `axes` appended (minor) to dimension 0's axes.
ShardingAttr addDim0Axes(ShardingAttr s, ArrayRef<StringRef> axes,
                         unsigned rank) {
  MLIRContext *ctx = s ? s.getContext() : nullptr;
  SmallVector<SmallVector<StringRef>> dims;
  for (unsigned d = 0; d < rank; ++d)
    dims.push_back(s ? s.getDimAxes(d) : SmallVector<StringRef>());
  llvm::append_range(dims[0], axes);
  SmallVector<int64_t> outer;
  for (unsigned d = 0; d < rank; ++d)
    outer.push_back(s ? s.getDimOuter(d) : 1);
  return ShardingAttr::get(ctx, dims, outer);
}

/// `s` with only dimension 0's axes (and its outer count); null if null.
ShardingAttr dim0Only(ShardingAttr s) {
  if (!s)
    return s;
  SmallVector<SmallVector<StringRef>> dims = {s.getDimAxes(0)};
  return ShardingAttr::get(s.getContext(), dims,
                           SmallVector<int64_t>{s.getDimOuter(0)});
}

RankedTensorType blockType(RankedTensorType t, int64_t rows) {
  SmallVector<int64_t> shape(t.getShape());
  shape[0] = rows;
  return RankedTensorType::get(shape, t.getElementType());
}

/// Where the gradient of an update was summed: the all_reduce; the
/// TaskGraph results and block arguments it passes through on its way into
/// the update's TaskGraph (a pipeline stage's optimizer TaskGraph), from
/// the sum to the update; and a reshape on the way that keeps dimension 0
/// (the gradient of a fused weight's view, shoal-fused-weight-views),
/// whose blocks of dimension 0 are the sum's.
struct GradientSum {
  AllReduceOp reduce;
  SmallVector<std::pair<OpResult, BlockArgument>> crossings;
  ReshapeOp view; // or null
};

std::optional<GradientSum> findGradientSum(Value g) {
  GradientSum sum;
  Value v = g;
  for (int hops = 0; hops < 8 && v.hasOneUse(); ++hops) {
    if (auto ar = v.getDefiningOp<AllReduceOp>()) {
      sum.reduce = ar;
      std::reverse(sum.crossings.begin(), sum.crossings.end());
      return sum;
    }
    if (auto r = v.getDefiningOp<ReshapeOp>(); r && !sum.view) {
      auto in = dyn_cast<RankedTensorType>(r.getInput().getType());
      auto out = dyn_cast<RankedTensorType>(r.getType());
      if (!in || !out || !in.hasStaticShape() || !out.hasStaticShape() ||
          in.getRank() == 0 || out.getRank() == 0 ||
          in.getDimSize(0) != out.getDimSize(0))
        return std::nullopt;
      sum.view = r;
      v = r.getInput();
      continue;
    }
    auto arg = dyn_cast<BlockArgument>(v);
    auto tg = arg ? dyn_cast<TaskGraphOp>(arg.getOwner()->getParentOp())
                  : TaskGraphOp();
    if (!tg)
      return std::nullopt;
    auto result = dyn_cast<OpResult>(tg.getInputs()[arg.getArgNumber()]);
    auto producer = result ? dyn_cast<TaskGraphOp>(result.getOwner()) : nullptr;
    if (!producer || !result.hasOneUse())
      return std::nullopt;
    sum.crossings.push_back({result, arg});
    v = producer.getYield().getOperand(result.getResultNumber());
  }
  return std::nullopt;
}

struct ZeroPass : public ::shoal::impl::ZeroPassBase<ZeroPass> {
  using ZeroPassBase::ZeroPassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (stage == 0)
      return;
    if (stage < 0 || stage > 3) {
      module.emitError() << "shoal-zero: stage must be 0, 1, 2 or 3, got "
                         << static_cast<int64_t>(stage);
      return signalPassFailure();
    }
    if (!module->hasAttr(ShoalDialect::kTrainingAttr)) {
      module.emitError() << "shoal-zero needs a training module (run "
                            "shoal-autodiff and shoal-optimizer first)";
      return signalPassFailure();
    }
    SmallVector<Operation *> updates;
    module.walk([&](Operation *op) {
      if (isa<AdamWOp, SGDOp>(op))
        updates.push_back(op);
    });
    for (Operation *update : updates)
      if (failed(shard(update)))
        return signalPassFailure();
  }

  LogicalResult shard(Operation *update) {
    auto tg = update->getParentOfType<TaskGraphOp>();
    if (!tg || !tg.getMesh())
      return update->emitError()
             << "shoal-zero runs on partitioned TaskGraphs (after "
                "shoal-partition)";
    MeshAttr mesh = *tg.getMesh();
    auto w = update->getOperand(0).getDefiningOp<WeightOp>();
    if (!w)
      return success();
    std::string name = w.getName().str();
    auto type = cast<RankedTensorType>(w.getType());
    ShardingAttr sharding = shardingOf(w);
    // Z: the mesh's device axes the weight is replicated over.
    SmallVector<StringRef> zero;
    int64_t n = 1;
    for (auto [axisAttr, size] :
         llvm::zip(mesh.getAxes().getAsRange<StringAttr>(), mesh.getShape())) {
      StringRef axis = axisAttr.getValue();
      if (axis == "mb" || size <= 1)
        continue;
      bool used = false;
      for (unsigned d = 0; sharding && d < type.getRank(); ++d)
        used |= llvm::is_contained(sharding.getDimAxes(d), axis);
      if (!used) {
        zero.push_back(axis);
        n *= size;
      }
    }
    if (zero.empty())
      return success(); // One copy: nothing to share.
    auto keepWhole = [&](const Twine &why) {
      update->emitWarning() << "ZeRO-" << static_cast<int64_t>(stage)
                            << " keeps '" << name << "' whole on every rank of "
                            << llvm::join(zero, ",") << ": " << why;
      return success();
    };
    if (type.getRank() == 0)
      return keepWhole("it is a scalar");
    int64_t rows = type.getDimSize(0);
    if (rows < n)
      return keepWhole(llvm::formatv("its dimension 0 has {0} rows for {1} "
                                     "ranks",
                                     rows, n));
    if (sharding && !sharding.getDimAxes(0).empty() && rows % n != 0)
      return keepWhole(
          llvm::formatv("its dimension 0 is already split, and "
                        "its {0} local rows do not divide into {1} "
                        "blocks",
                        rows, n));
    if (sharding && sharding.getDimOuter(0) > 1)
      return keepWhole("its dimension 0 is split in strided runs");
    int64_t blockRows = (rows + n - 1) / n;
    RankedTensorType block = blockType(type, blockRows);
    OpBuilder b(update);
    ArrayAttr zeroAttr = b.getStrArrayAttr(zero);
    ShardingAttr blockSharding =
        addDim0Axes(sharding, zero, static_cast<unsigned>(type.getRank()));

    // The optimizer state: this rank's block.
    for (Value s : update->getOperands().drop_front(2)) {
      auto state = s.getDefiningOp<WeightOp>();
      if (!state || !state->hasOneUse())
        return update->emitError() << "shoal-zero: the optimizer state of '"
                                   << name << "' is not a weight of its own";
      state.getResult().setType(block);
      state->setAttr(ShoalDialect::kShardingAttr,
                     b.getArrayAttr({blockSharding}));
    }

    // The gradient: reduce-scattered where it was all-reduced, or sliced.
    Value grad = update->getOperand(1);
    std::string reason =
        llvm::formatv("ZeRO-{0}: gradient of '{1}', this rank's block of dim "
                      "0 over {2}",
                      stage, name, llvm::join(zero, ","))
            .str();
    Value gradBlock = grad;
    SmallVector<StringRef> sliced(zero);
    std::optional<GradientSum> sum = findGradientSum(grad);
    // (A view's sum crosses in its own shape: only when what crosses is
    // split along dimension 0 at most.)
    auto shardingOfResult = [](OpResult r) {
      auto list =
          r.getOwner()->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr);
      unsigned index = r.getResultNumber();
      return list && index < list.size() ? dyn_cast<ShardingAttr>(list[index])
                                         : ShardingAttr();
    };
    if (sum && sum->view)
      for (auto [result, argument] : sum->crossings) {
        ShardingAttr s = shardingOfResult(result);
        auto rank = cast<RankedTensorType>(result.getType()).getRank();
        for (unsigned d = 1; s && d < rank; ++d)
          if (!s.getDimAxes(d).empty() || s.getDimOuter(d) != 1)
            sum.reset();
        if (!sum)
          break;
      }
    SmallVector<StringRef> summed;
    if (sum)
      for (auto a : sum->reduce.getAxes().getAsRange<StringAttr>())
        summed.push_back(a.getValue());
    // The leading axes of Z that the gradient is summed over are scattered
    // by the sum itself; the others (axes the gradient is already whole
    // on, such as `tp` for a weight every tp rank computes whole) are
    // sliced after it. Blocks agree when the scattered block divides.
    size_t prefix = 0;
    while (sum && prefix < zero.size() &&
           llvm::is_contained(summed, zero[prefix]))
      ++prefix;
    int64_t scatterN = 1;
    for (StringRef a : ArrayRef<StringRef>(zero).take_front(prefix))
      scatterN *= mesh.getAxisSize(a);
    int64_t scatterRows = (rows + scatterN - 1) / scatterN;
    bool tailSummed = llvm::any_of(
        ArrayRef<StringRef>(zero).drop_front(prefix),
        [&](StringRef a) { return llvm::is_contained(summed, a); });
    if (prefix > 0 && !tailSummed &&
        (prefix == zero.size() || scatterRows % (n / scatterN) == 0)) {
      SmallVector<StringRef> scatterZ(
          ArrayRef<StringRef>(zero).take_front(prefix));
      SmallVector<StringRef> sliceZ(
          ArrayRef<StringRef>(zero).drop_front(prefix));
      RankedTensorType scattered = blockType(type, scatterRows);
      AllReduceOp ar = sum->reduce;
      OpBuilder rb(ar);
      bool micro = llvm::is_contained(summed, "mb");
      // Stages 1 and 2 accumulate the whole gradient over the
      // micro-batches and scatter once per step; stage 3 scatters every
      // micro-batch and accumulates the block.
      SmallVector<StringRef> scatterAxes, rest;
      if (micro && stage <= 2)
        scatterAxes.push_back("mb");
      llvm::append_range(scatterAxes, scatterZ);
      for (StringRef a : summed)
        if (!llvm::is_contained(scatterAxes, a))
          rest.push_back(a);
      // (Of the sum's own shape when a view of it reaches the update.)
      RankedTensorType scatteredSum =
          sum->view ? blockType(cast<RankedTensorType>(ar.getInput().getType()),
                                scatterRows)
                    : scattered;
      auto rs =
          rb.create<ReduceScatterOp>(ar.getLoc(), scatteredSum, ar.getInput(),
                                     0, rb.getStrArrayAttr(scatterAxes));
      rs->setAttr(ShoalDialect::kReasonAttr,
                  rb.getStringAttr(reason + ", summed over " +
                                   llvm::join(scatterAxes, ",")));
      if (auto phase = ar->getAttr(ShoalDialect::kPhaseAttr))
        rs->setAttr(ShoalDialect::kPhaseAttr, phase);
      Value v = rs.getResult();
      if (!rest.empty()) {
        auto rar = rb.create<AllReduceOp>(ar.getLoc(), v.getType(), v,
                                          rb.getStrArrayAttr(rest));
        rar->setAttrs(ar->getDiscardableAttrDictionary());
        v = rar.getResult();
      }
      // A view of the sum reaches the update: the sum is scattered in its
      // own shape and its block is viewed as the weight's beside the
      // update (dimension 0 is kept, so the view of the block is the block
      // of the view; a view in the backward TaskGraph would run at every
      // micro-batch, before the step's sum is there).
      if (ReshapeOp view = sum->view) {
        view.getResult().replaceAllUsesWith(view.getInput());
        view.erase();
      }
      ar.getResult().replaceAllUsesWith(v);
      ar.erase();
      // Through backward TaskGraphs' results into the update's.
      for (auto [result, argument] : sum->crossings) {
        auto producer = cast<TaskGraphOp>(result.getOwner());
        unsigned index = result.getResultNumber();
        result.setType(scatteredSum);
        argument.setType(scatteredSum);
        if (auto list = producer->getAttrOfType<ArrayAttr>(
                ShoalDialect::kShardingAttr)) {
          SmallVector<Attribute> shardings(list.getValue());
          if (index < shardings.size())
            if (auto s = dyn_cast<ShardingAttr>(shardings[index]))
              shardings[index] =
                  sum->view
                      ? addDim0Axes(dim0Only(s), scatterZ,
                                    scatteredSum.getRank())
                      : addDim0Axes(s, scatterZ,
                                    static_cast<unsigned>(type.getRank()));
          producer->setAttr(ShoalDialect::kShardingAttr,
                            b.getArrayAttr(shardings));
        }
      }
      gradBlock = sum->crossings.empty() ? v : sum->crossings.back().second;
      if (sum->view) {
        auto blockView =
            b.create<ReshapeOp>(update->getLoc(), scattered, gradBlock);
        blockView->setAttr(ShoalDialect::kPhaseAttr,
                           update->getAttr(ShoalDialect::kPhaseAttr));
        gradBlock = blockView.getResult();
      }
      sliced = sliceZ;
    }
    // What is still whole over some ZeRO axes (a gradient that arrives
    // whole, or is not summed over them): each rank keeps its block.
    if (!sliced.empty()) {
      auto slice = b.create<LocalSliceOp>(update->getLoc(), block, gradBlock, 0,
                                          b.getStrArrayAttr(sliced));
      slice->setAttr(ShoalDialect::kReasonAttr, b.getStringAttr(reason));
      slice->setAttr(ShoalDialect::kPhaseAttr,
                     update->getAttr(ShoalDialect::kPhaseAttr));
      gradBlock = slice.getResult();
    }
    update->setOperand(1, gradBlock);

    if (stage < 3 || !shardWeight(w, blockSharding, block, zero, n, mesh)) {
      update->setAttr(ShoalDialect::kZeroAxesAttr, zeroAttr);
      return success();
    }
    return success();
  }

  /// ZeRO-3: every copy of `w` in TaskGraphs on the same ranks becomes its
  /// block, gathered before each reader. False (nothing changed) when a
  /// copy lives in a TaskGraph with another mesh or another layout.
  bool shardWeight(WeightOp w, ShardingAttr blockSharding,
                   RankedTensorType block, ArrayRef<StringRef> zero, int64_t n,
                   MeshAttr mesh) {
    auto tg = w->getParentOfType<TaskGraphOp>();
    auto func = tg->getParentOfType<func::FuncOp>();
    Attribute stage = tg->getAttr(ShoalDialect::kStageAttr);
    ShardingAttr sharding = shardingOf(w);
    SmallVector<WeightOp> copies;
    bool ok = true;
    func.walk([&](WeightOp other) {
      if (other.getName() != w.getName())
        return;
      auto otherTg = other->getParentOfType<TaskGraphOp>();
      if (otherTg->getAttr(ShoalDialect::kStageAttr) != stage)
        return; // Another program: its own copy.
      if (otherTg.getMesh() != mesh || shardingOf(other) != sharding ||
          other.getType() != w.getType())
        ok = false;
      copies.push_back(other);
    });
    if (!ok) {
      w->emitWarning() << "ZeRO-3 keeps '" << w.getName()
                       << "' whole (ZeRO-1/2 for it): TaskGraphs with another "
                          "mesh or layout read it too";
      return false;
    }
    RankedTensorType whole = cast<RankedTensorType>(w.getType());
    RankedTensorType gathered = blockType(whole, n * block.getDimSize(0));
    for (WeightOp copy : copies) {
      // A view of the weight (shoal-fused-weight-views' reshape) read by
      // the forward and the backward: one view per reader, so that each
      // gathers just before its use instead of keeping the whole weight
      // from the forward to the backward.
      for (Operation *view : llvm::to_vector(copy->getUsers())) {
        if (!isWeightView(view) || view->hasOneUse())
          continue;
        for (OpOperand &use : llvm::make_early_inc_range(view->getUses())) {
          OpBuilder b(use.getOwner());
          Operation *clone = b.clone(*view);
          if (auto phase = use.getOwner()->getAttr(ShoalDialect::kPhaseAttr))
            clone->setAttr(ShoalDialect::kPhaseAttr, phase);
          use.set(clone->getResult(0));
        }
        view->erase();
      }
      copy.getResult().setType(block);
      copy->setAttr(ShoalDialect::kShardingAttr,
                    OpBuilder(copy).getArrayAttr({blockSharding}));
      for (OpOperand &use : llvm::make_early_inc_range(copy->getUses())) {
        Operation *user = use.getOwner();
        if (isa<AdamWOp, SGDOp>(user) && use.getOperandNumber() == 0)
          continue;
        OpBuilder b(user);
        Location loc = user->getLoc();
        auto ag = b.create<AllGatherOp>(loc, gathered, copy.getResult(), 0,
                                        b.getStrArrayAttr(zero));
        std::string label = user->getName().getStringRef().str();
        if (auto node = dyn_cast<NameLoc>(user->getLoc()))
          label = node.getName().str();
        ag->setAttr(ShoalDialect::kReasonAttr,
                    b.getStringAttr(llvm::formatv("ZeRO-3: '{0}' is stored "
                                                  "split over {1} and "
                                                  "gathered for '{2}'",
                                                  w.getName(),
                                                  llvm::join(zero, ","), label)
                                        .str()));
        if (auto phase = user->getAttr(ShoalDialect::kPhaseAttr))
          ag->setAttr(ShoalDialect::kPhaseAttr, phase);
        Value v = ag.getResult();
        if (gathered != whole)
          v = b.create<OnnxOp>(
                   loc, TypeRange{whole}, "Slice",
                   b.getDictionaryAttr(
                       {b.getNamedAttr("starts", b.getDenseI64ArrayAttr({0})),
                        b.getNamedAttr("ends", b.getDenseI64ArrayAttr(
                                                   {whole.getDimSize(0)})),
                        b.getNamedAttr("axes", b.getDenseI64ArrayAttr({0}))}),
                   ValueRange{v})
                  .getResult(0);
        use.set(v);
      }
    }
    return true;
  }
};

} // namespace
