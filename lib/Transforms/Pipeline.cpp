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

struct PipelinePass : public ::shoal::impl::PipelinePassBase<PipelinePass> {
  void runOnOperation() final {
    ModuleOp module = getOperation();
    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (failed(lowerBridges(func)) || failed(schedule(module, func)))
        return signalPassFailure();
    }
  }

  LogicalResult lowerBridges(func::FuncOp func) {
    Block &entry = func.getBody().front();
    int64_t id = 0;
    for (auto bridge : llvm::make_early_inc_range(entry.getOps<BridgeOp>())) {
      Value src = bridge.getInput();
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
      b.create<SendOp>(bridge.getLoc(), inner, id, bridge.getFrom(),
                       bridge.getTo());
      // Each reader receives it at its start instead of taking an input.
      for (OpOperand &use :
           llvm::make_early_inc_range(bridge.getResult().getUses())) {
        auto tg = dyn_cast<TaskGraphOp>(use.getOwner());
        if (!tg)
          return bridge.emitError() << "bridge result must feed TaskGraphs";
        unsigned index = use.getOperandNumber();
        Block &body = tg.getBody().front();
        OpBuilder rb = OpBuilder::atBlockBegin(&body);
        auto recv = rb.create<RecvOp>(bridge.getLoc(),
                                      body.getArgument(index).getType(), id,
                                      bridge.getFrom(), bridge.getTo());
        body.getArgument(index).replaceAllUsesWith(recv.getResult());
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
      entry.walk([&](SendOp s) {
        if (toUpdates.contains(s.getId()))
          s->setAttr(ShoalDialect::kLastMicroBatchAttr,
                     UnitAttr::get(s.getContext()));
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
