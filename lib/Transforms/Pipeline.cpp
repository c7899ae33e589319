//===- Pipeline.cpp - Send/recv between stages and the schedule -*- C++ -*-===//
//
// Turns every shoal.bridge into a shoal.send in the TaskGraph holding the
// value, right after the op that computes it, and a shoal.recv at the start
// of the one reading it, so
// that each device group's TaskGraphs stand alone, and writes the order in
// which each device group runs its micro-batches (lib/Schedule).
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shoal/Schedule/Schedule.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace shoal {
#define GEN_PASS_DEF_PIPELINEPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// The TaskGraph made for weights that are graph outputs
/// (shoal-form-taskgraphs); it runs once, after the pipeline.
bool isOutputsTaskGraph(TaskGraphOp tg) {
  return tg.getInputs().empty() &&
         llvm::all_of(
             tg.getBody().front().without_terminator(),
             [](Operation &op) { return isa<WeightOp, ConstantOp>(op); });
}

bool overMicroBatches(ArrayAttr axes) {
  return llvm::any_of(axes, [](Attribute a) {
    auto s = dyn_cast<StringAttr>(a);
    return s && s.getValue() == ShoalDialect::kMicroBatchAxis;
  });
}

/// The values that hold a sum over the step's micro-batches ("step
/// values"): an all_reduce or reduce_scatter over "mb" (gradient
/// accumulation), what is computed from such values alone (constants
/// aside), and those values across TaskGraph results, arguments and
/// bridges. Before the last micro-batch one holds a partial sum that
/// nothing uses.
llvm::DenseSet<Value> stepValues(func::FuncOp func) {
  llvm::DenseSet<Value> step;
  for (Operation &op : func.getBody().front()) {
    if (auto bridge = dyn_cast<BridgeOp>(op)) {
      if (step.contains(bridge.getInput()))
        step.insert(bridge.getResult());
      continue;
    }
    auto tg = dyn_cast<TaskGraphOp>(op);
    if (!tg)
      continue;
    Block &body = tg.getBody().front();
    for (auto [outer, arg] : llvm::zip(tg.getInputs(), body.getArguments()))
      if (step.contains(outer))
        step.insert(arg);
    for (Operation &inner : body.without_terminator()) {
      bool isStep = false;
      if (auto ar = dyn_cast<AllReduceOp>(inner)) {
        isStep = overMicroBatches(ar.getAxes()) || step.contains(ar.getInput());
      } else if (auto rs = dyn_cast<ReduceScatterOp>(inner)) {
        isStep = overMicroBatches(rs.getAxes()) || step.contains(rs.getInput());
      } else if (inner.getNumResults() &&
                 !isa<SendOp, RecvOp, WeightOp, ConstantOp>(inner)) {
        bool any = false, all = true;
        for (Value v : inner.getOperands()) {
          if (step.contains(v))
            any = true;
          else if (!v.getDefiningOp<ConstantOp>())
            all = false;
        }
        isStep = any && all;
      }
      if (isStep)
        for (Value r : inner.getResults())
          step.insert(r);
    }
    for (auto [result, yielded] :
         llvm::zip(tg.getResults(), tg.getYield().getOperands()))
      if (step.contains(yielded))
        step.insert(result);
  }
  return step;
}

/// Whether every reader of `arg` (a TaskGraph's block argument) computes a
/// step value or yields it: then the value need not arrive before the last
/// micro-batch.
bool readOnlyByStepOps(BlockArgument arg, const llvm::DenseSet<Value> &step) {
  return llvm::all_of(arg.getUsers(), [&](Operation *user) {
    if (isa<YieldOp, SendOp>(user))
      return true;
    return user->getNumResults() > 0 &&
           llvm::all_of(user->getResults(),
                        [&](Value r) { return step.contains(r); });
  });
}

/// The mesh's tp size (1 without a tp axis).
int64_t tpSize(MeshAttr mesh) {
  int64_t n = mesh.getAxisSize("tp");
  return n > 0 ? n : 1;
}

/// `layout` with "tp" added (minor) to dimension `dim`.
LayoutAttr withTpOn(LayoutAttr layout, int64_t dim) {
  ShardingAttr s = layout.getSharding();
  unsigned rank = s.getDims().size();
  SmallVector<SmallVector<StringRef>> dims;
  SmallVector<int64_t> outer;
  for (unsigned d = 0; d < rank; ++d) {
    dims.push_back(s.getDimAxes(d));
    outer.push_back(s.getDimOuter(d));
  }
  dims[dim].push_back("tp");
  return LayoutAttr::get(layout.getContext(), layout.getMesh(),
                         ShardingAttr::get(layout.getContext(), dims, outer),
                         layout.getOffset(), layout.getStride());
}

/// `type` (a local block) with dimension `dim` cut in `layout`'s tp size.
RankedTensorType blockType(Type type, int64_t dim, LayoutAttr layout) {
  auto t = cast<RankedTensorType>(type);
  SmallVector<int64_t> shape(t.getShape());
  shape[dim] /= tpSize(layout.getMesh());
  return RankedTensorType::get(shape, t.getElementType());
}

/// The dimension a scatter/gather transfer cuts, or -1 when it does not
/// apply: both sides have the same tp size above 1 and hold the value whole
/// over tp; the dimension (the last that works) is a plain block split or
/// whole on both sides, and the local blocks of the sender and of every
/// receiver divide by tp.
int64_t scatterGatherDim(Type sent, ArrayRef<Type> received, LayoutAttr from,
                         LayoutAttr to) {
  int64_t tp = tpSize(from.getMesh());
  if (tp <= 1 || tpSize(to.getMesh()) != tp)
    return -1;
  ShardingAttr fs = from.getSharding(), ts = to.getSharding();
  auto type = dyn_cast<RankedTensorType>(sent);
  if (!type || static_cast<int64_t>(fs.getDims().size()) != type.getRank() ||
      static_cast<int64_t>(ts.getDims().size()) != type.getRank())
    return -1;
  for (unsigned d = 0; d < type.getRank(); ++d)
    if (llvm::is_contained(fs.getDimAxes(d), "tp") ||
        llvm::is_contained(ts.getDimAxes(d), "tp"))
      return -1;
  for (int64_t d = type.getRank() - 1; d >= 0; --d) {
    if (fs.getDimOuter(d) != 1 || ts.getDimOuter(d) != 1 ||
        fs.getDimAxes(d) != ts.getDimAxes(d) || type.getDimSize(d) <= 0 ||
        type.getDimSize(d) % tp != 0)
      continue;
    bool ok = llvm::all_of(received, [&](Type r) {
      auto rt = dyn_cast<RankedTensorType>(r);
      return rt && rt.getRank() == type.getRank() && rt.getDimSize(d) > 0 &&
             rt.getDimSize(d) % tp == 0;
    });
    if (ok)
      return d;
  }
  return -1;
}

struct PipelinePass : public ::shoal::impl::PipelinePassBase<PipelinePass> {
  using PipelinePassBase::PipelinePassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (failed(lowerBridges(func)) || failed(schedule(module, func)))
        return signalPassFailure();
    }
  }

  /// `tg` with `extra` (a value of its body, laid out as `sharding`)
  /// yielded as one more result, its last; the old op's results are the
  /// new one's first.
  static TaskGraphOp withResult(TaskGraphOp tg, Value extra,
                                ShardingAttr sharding) {
    OpBuilder b(tg);
    SmallVector<Type> types(tg.getResultTypes());
    types.push_back(extra.getType());
    OperationState state(tg.getLoc(), tg->getName());
    state.addOperands(tg.getInputs());
    state.addTypes(types);
    state.addAttributes(tg->getAttrs());
    state.addRegion()->takeBody(tg.getBody());
    auto made = cast<TaskGraphOp>(b.create(state));
    YieldOp yield = made.getYield();
    yield->insertOperands(yield->getNumOperands(), extra);
    if (auto old = made->getAttrOfType<ArrayAttr>(ShoalDialect::kShardingAttr);
        old && old.size() == tg.getNumResults()) {
      SmallVector<Attribute> all(old.begin(), old.end());
      all.push_back(sharding);
      made->setAttr(ShoalDialect::kShardingAttr, b.getArrayAttr(all));
    }
    for (auto [o, n] : llvm::zip(tg.getResults(), made.getResults()))
      o.replaceAllUsesWith(n);
    tg->erase();
    return made;
  }

  /// A value a stage receives for a forward TaskGraph and again, in its
  /// own transfer, for a later TaskGraph of the same devices (the chunk's
  /// input, which its backward reads) crosses once: the first reader
  /// yields what it received and the later ones read that, kept on the
  /// receiving stage (as Megatron-LM keeps a stage's input for its
  /// backward). Otherwise the sender would send it twice, the second copy
  /// held unreceived from the forward to the backward. Not a step value
  /// (a sum over the micro-batches, which may cross once per step for its
  /// first reader while a later one reads it at every micro-batch).
  void receiveOnce(func::FuncOp func) {
    Block &entry = func.getBody().front();
    llvm::DenseSet<Value> step = stepValues(func);
    // The first TaskGraph reading each bridge, and its block argument.
    auto firstReader = [](BridgeOp bridge) -> std::pair<TaskGraphOp, int> {
      TaskGraphOp first;
      int index = -1;
      for (OpOperand &use : bridge.getResult().getUses())
        if (auto tg = dyn_cast<TaskGraphOp>(use.getOwner());
            tg && (!first || tg->isBeforeInBlock(first))) {
          first = tg;
          index = use.getOperandNumber();
        }
      return {first, index};
    };
    SmallVector<BridgeOp> bridges(entry.getOps<BridgeOp>());
    for (std::size_t i = 0; i < bridges.size(); ++i) {
      BridgeOp keep = bridges[i];
      if (!keep || step.contains(keep.getInput()))
        continue;
      auto [reader, index] = firstReader(keep);
      if (!reader)
        continue;
      // Later bridges of the same value to the same devices and layout.
      SmallVector<std::pair<OpOperand *, std::size_t>> later;
      for (std::size_t j = i + 1; j < bridges.size(); ++j) {
        BridgeOp other = bridges[j];
        if (!other || other.getInput() != keep.getInput() ||
            other.getTo() != keep.getTo())
          continue;
        for (OpOperand &use : other.getResult().getUses())
          if (auto tg = dyn_cast<TaskGraphOp>(use.getOwner());
              tg && reader->isBeforeInBlock(tg) &&
              tg->getAttr(ShoalDialect::kStageAttr) ==
                  reader->getAttr(ShoalDialect::kStageAttr))
            later.push_back({&use, j});
      }
      if (later.empty())
        continue;
      Value arg = reader.getBody().getArgument(index);
      unsigned result = reader.getNumResults();
      TaskGraphOp made = withResult(reader, arg, keep.getTo().getSharding());
      for (auto [use, j] : later) {
        use->set(made.getResult(result));
        if (bridges[j] && bridges[j].getResult().use_empty()) {
          bridges[j].erase();
          bridges[j] = nullptr;
        }
      }
    }
  }

  LogicalResult lowerBridges(func::FuncOp func) {
    receiveOnce(func);
    Block &entry = func.getBody().front();
    int64_t id = 0;
    // A step value (a gradient summed over the micro-batches: a tied
    // weight's from the stage that holds its other reader) whose every
    // reader computes step values too goes once per step, at the last
    // micro-batch, instead of at every micro-batch (Megatron sums the
    // copies of a tied embedding once per step).
    llvm::DenseSet<Value> step = stepValues(func);
    for (auto bridge : llvm::make_early_inc_range(entry.getOps<BridgeOp>())) {
      Value src = bridge.getInput();
      bool once = step.contains(src) &&
                  llvm::all_of(bridge.getResult().getUses(), [&](OpOperand &u) {
                    auto tg = dyn_cast<TaskGraphOp>(u.getOwner());
                    return tg && readOnlyByStepOps(tg.getBody().getArgument(
                                                       u.getOperandNumber()),
                                                   step);
                  });
      // The value inside the TaskGraph that holds it.
      Value inner;
      TaskGraphOp holder;
      if (auto tg = src.getDefiningOp<TaskGraphOp>()) {
        holder = tg;
        inner = tg.getYield().getOperand(cast<OpResult>(src).getResultNumber());
      } else {
        for (OpOperand &use : src.getUses()) {
          auto tg = dyn_cast<TaskGraphOp>(use.getOwner());
          if (tg && (!holder || tg->isBeforeInBlock(holder))) {
            holder = tg;
            inner = tg.getBody().getArgument(use.getOperandNumber());
          }
        }
      }
      if (!holder)
        return bridge.emitError() << "bridges a value no TaskGraph holds; run "
                                     "shoal-insert-bridges on TaskGraphs";
      if (!src.getDefiningOp<TaskGraphOp>() && !isa<BlockArgument>(src))
        return bridge.emitError() << "bridges a value that is neither a "
                                     "TaskGraph result nor a graph input";
      // The send goes right after the value is computed, not at the
      // TaskGraph's end: the reading stage can start while this one goes
      // on, and a backward TaskGraph's gradient reductions (at the last
      // micro-batch: the exchange) do not hold back the activation
      // gradient the stage upstream waits for (Megatron's drain order).
      OpBuilder b(holder.getYield());
      if (Operation *def = inner.getDefiningOp();
          def && def->getBlock() == holder.getYield()->getBlock())
        b.setInsertionPointAfter(def);
      LayoutAttr from = bridge.getFrom(), to = bridge.getTo();
      // Megatron's scatter/gather: a value whole on every tp rank of both
      // sides goes as 1/tp blocks of dimension `gatherDim`, all-gathered
      // over tp at the receivers.
      SmallVector<Type> recvTypes;
      for (OpOperand &use : bridge.getResult().getUses())
        if (auto tg = dyn_cast<TaskGraphOp>(use.getOwner()))
          recvTypes.push_back(
              tg.getBody().getArgument(use.getOperandNumber()).getType());
      // shoal-plan, given a cluster, lists the stages where it pays
      // (`scatter_gather_stages`): not where the receivers' tp link is no
      // faster than the one between the stages.
      // (Not a value that crosses once per step: its receivers read it at
      // every micro-batch, and an all-gather there would run each time.)
      bool allowed = scatterGather && !once;
      if (auto plan =
              func->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
                  "shoal.plan"))
        if (auto stages =
                plan.getAs<DenseI64ArrayAttr>("scatter_gather_stages"))
          for (OpOperand &use : bridge.getResult().getUses()) {
            auto tg = dyn_cast<TaskGraphOp>(use.getOwner());
            auto stage =
                tg ? tg->getAttrOfType<IntegerAttr>(ShoalDialect::kStageAttr)
                   : IntegerAttr();
            if (!stage ||
                !llvm::is_contained(stages.asArrayRef(), stage.getInt()))
              allowed = false;
          }
      int64_t gatherDim =
          allowed ? scatterGatherDim(inner.getType(), recvTypes, from, to) : -1;
      Value sent = inner;
      if (gatherDim >= 0) {
        from = withTpOn(from, gatherDim);
        to = withTpOn(to, gatherDim);
        // (At the value's producer, which the report names for the send.)
        Location at = inner.getDefiningOp() ? inner.getDefiningOp()->getLoc()
                                            : bridge.getLoc();
        sent = b.create<LocalSliceOp>(
            at, blockType(inner.getType(), gatherDim, from), inner, gatherDim,
            b.getStrArrayAttr({"tp"}));
        sent.getDefiningOp()->setAttr(
            ShoalDialect::kReasonAttr,
            b.getStringAttr("pipeline transfer: each tp rank sends its 1/tp "
                            "block (Megatron's scatter/gather)"));
      }
      auto send = b.create<SendOp>(bridge.getLoc(), sent, id, from, to);
      if (once)
        send->setAttr(ShoalDialect::kLastMicroBatchAttr, b.getUnitAttr());
      // Each reader receives it at its start instead of taking an input.
      for (OpOperand &use :
           llvm::make_early_inc_range(bridge.getResult().getUses())) {
        auto tg = dyn_cast<TaskGraphOp>(use.getOwner());
        if (!tg)
          return bridge.emitError() << "bridge result must feed TaskGraphs";
        unsigned index = use.getOperandNumber();
        Block &body = tg.getBody().front();
        OpBuilder rb = OpBuilder::atBlockBegin(&body);
        Type whole = body.getArgument(index).getType();
        auto recv = rb.create<RecvOp>(
            bridge.getLoc(),
            gatherDim >= 0 ? blockType(whole, gatherDim, to) : whole, id, from,
            to);
        if (once)
          recv->setAttr(ShoalDialect::kLastMicroBatchAttr, rb.getUnitAttr());
        Value received = recv.getResult();
        if (gatherDim >= 0) {
          auto gather =
              rb.create<AllGatherOp>(bridge.getLoc(), whole, received,
                                     gatherDim, rb.getStrArrayAttr({"tp"}));
          gather->setAttr(
              ShoalDialect::kReasonAttr,
              rb.getStringAttr("pipeline transfer: each tp rank received its "
                               "1/tp block (Megatron's scatter/gather)"));
          received = gather.getResult();
        }
        body.getArgument(index).replaceAllUsesWith(received);
        tg->eraseOperand(index);
        body.eraseArgument(index);
      }
      bridge.erase();
      ++id;
    }
    return success();
  }

  LogicalResult schedule(ModuleOp module, func::FuncOp func) {
    Block &entry = func.getBody().front();
    // Device groups and their TaskGraphs (chunks) in model order.
    // Training: each stage also has a backward TaskGraph per chunk and an
    // optimizer TaskGraph, which runs once after the stage's last backward.
    SmallVector<SmallVector<TaskGraphOp>> groups, backward, updates;
    TaskGraphOp outputs;
    bool training = module->hasAttr(ShoalDialect::kTrainingAttr);
    for (auto tg : entry.getOps<TaskGraphOp>()) {
      auto stage = tg->getAttrOfType<IntegerAttr>(ShoalDialect::kStageAttr);
      if (!stage)
        return success(); // one device set: nothing to schedule
      if (isOutputsTaskGraph(tg)) {
        outputs = tg;
        continue;
      }
      int64_t g = stage.getInt();
      if (g >= (int64_t)groups.size()) {
        groups.resize(g + 1);
        backward.resize(g + 1);
        updates.resize(g + 1);
      }
      auto phase = tg->getAttrOfType<StringAttr>(ShoalDialect::kPhaseAttr);
      if (phase && phase.getValue() == "backward")
        backward[g].push_back(tg);
      else if (phase && phase.getValue() == "optimizer")
        updates[g].push_back(tg);
      else
        groups[g].push_back(tg);
    }
    if (groups.empty())
      return success();
    // Values sent to an optimizer TaskGraph are sent once, at the last
    // micro-batch, when that TaskGraph receives them.
    llvm::DenseSet<int64_t> toUpdates;
    for (auto &tgs : updates)
      for (TaskGraphOp tg : tgs)
        tg.walk([&](RecvOp r) { toUpdates.insert(r.getId()); });
    if (!toUpdates.empty())
      entry.walk([&](Operation *op) {
        auto s = dyn_cast<SendOp>(op);
        auto r = dyn_cast<RecvOp>(op);
        if ((s && toUpdates.contains(s.getId())) ||
            (r && toUpdates.contains(r.getId())))
          op->setAttr(ShoalDialect::kLastMicroBatchAttr,
                      UnitAttr::get(op->getContext()));
      });
    int64_t microBatches = 1, chunks = 1;
    if (auto m = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kNumMicroBatchAttr))
      microBatches = m.getInt();
    if (auto v = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kVirtualStagesAttr))
      chunks = v.getInt();
    std::string kindName = "gpipe";
    if (auto k =
            module->getAttrOfType<StringAttr>(ShoalDialect::kScheduleKindAttr))
      kindName = k.getValue().str();
    sched::Kind kind;
    if (!sched::parseKind(kindName, kind))
      return module.emitError() << "unknown pipeline schedule '" << kindName
                                << "' (expected gpipe, 1f1b or interleaved)";
    for (auto [g, tgs] : llvm::enumerate(groups))
      if ((int64_t)tgs.size() != chunks)
        return func.emitError()
               << "pipeline stage " << g << " holds " << tgs.size()
               << " TaskGraphs but the schedule expects " << chunks
               << " (virtual_stages)";
    sched::Schedule s;
    for (auto [g, tgs] : llvm::enumerate(backward))
      if (training && !tgs.empty() && (int64_t)tgs.size() != chunks)
        return func.emitError()
               << "pipeline stage " << g << " holds " << tgs.size()
               << " backward TaskGraphs but the schedule expects " << chunks;
    // A stage's backward TaskGraphs come in reverse model order; chunk c's
    // is the one of chunk c's forward TaskGraph (`<forward>.bwd`).
    for (std::size_t g = 0; g < backward.size(); ++g) {
      SmallVector<TaskGraphOp> &tgs = backward[g];
      if (tgs.size() < 2)
        continue;
      SmallVector<TaskGraphOp> ordered;
      for (TaskGraphOp fwd : groups[g]) {
        std::string want = (fwd.getSymName() + ".bwd").str();
        auto it = llvm::find_if(
            tgs, [&](TaskGraphOp b) { return b.getSymName() == want; });
        if (it == tgs.end())
          return func.emitError()
                 << "pipeline stage " << g << " has no backward TaskGraph '"
                 << want << "' for its chunk '" << fwd.getSymName() << "'";
        ordered.push_back(*it);
      }
      tgs = ordered;
    }
    // The schedule keeps its shape either way (1F1B's bounded in-flight
    // micro-batches); a forward-only plan just drops the backward steps.
    std::string error = sched::build(kind, groups.size(), microBatches, chunks,
                                     /*forwardOnly=*/false, s);
    if (!error.empty())
      return module.emitError()
             << "pipeline schedule " << kindName << " for " << groups.size()
             << " stages and " << microBatches << " micro-batches: " << error;
    Builder b(module.getContext());
    SmallVector<Attribute> perGroup;
    for (auto [g, steps] : llvm::enumerate(s.order)) {
      SmallVector<Attribute> names;
      for (const sched::Step &step : steps) {
        if (step.backward && (!training || backward[g].empty()))
          continue;
        TaskGraphOp tg =
            step.backward ? backward[g][step.chunk] : groups[g][step.chunk];
        names.push_back(b.getStringAttr((step.backward ? "B" : "F") +
                                        std::to_string(step.microBatch) + ":" +
                                        tg.getSymName().str()));
      }
      // Updates run once, after the last micro-batch's backward (they read
      // the gradients accumulated over the micro-batches).
      for (TaskGraphOp tg : updates[g])
        names.push_back(b.getStringAttr("F" + std::to_string(microBatches - 1) +
                                        ":" + tg.getSymName().str()));
      if (outputs && g + 1 == s.order.size())
        names.push_back(b.getStringAttr("F0:" + outputs.getSymName().str()));
      perGroup.push_back(b.getArrayAttr(names));
    }
    func->setAttr(ShoalDialect::kScheduleAttr, b.getArrayAttr(perGroup));
    return success();
  }
};

} // namespace
