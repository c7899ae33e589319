//===- InsertBridges.cpp - Bridges between device sets ----------*- C++ -*-===//
//
// A TaskGraph that reads a value held on other ranks (or on another mesh)
// gets it through a shoal.bridge from the holder's layout to its own. The
// holder of a TaskGraph result is its producer; the holder of a graph input
// is the first TaskGraph that reads it.
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

namespace shoal {
#define GEN_PASS_DEF_INSERTBRIDGESPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

struct InsertBridgesPass
    : public ::shoal::impl::InsertBridgesPassBase<InsertBridgesPass> {
  void runOnOperation() final {
    for (auto func : getOperation().getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      Block &entry = func.getBody().front();
      SmallVector<TaskGraphOp> tgs(entry.getOps<TaskGraphOp>());
      // Owners first, before bridges become users of graph inputs.
      llvm::DenseMap<Value, TaskGraphOp> owners;
      for (TaskGraphOp tg : tgs)
        for (Value in : tg.getInputs())
          owners.try_emplace(in, getOwnerTaskGraph(in));
      for (TaskGraphOp tg : tgs) {
        auto inSh = tg->getAttrOfType<ArrayAttr>(kInShardingsAttr);
        if (!inSh) {
          tg.emitError() << "TaskGraph '" << tg.getSymName()
                         << "' has no shardings; run "
                            "shoal-propagate-sharding first";
          return signalPassFailure();
        }
        OpBuilder b(tg);
        for (OpOperand &use : tg->getOpOperands()) {
          Value in = use.get();
          TaskGraphOp owner = owners.lookup(in);
          if (!owner || owner == tg || samePlacement(owner, tg))
            continue;
          ShardingAttr from;
          if (auto arg = dyn_cast<BlockArgument>(in))
            from = func.getArgAttrOfType<ShardingAttr>(
                arg.getArgNumber(), ShoalDialect::kShardingAttr);
          else
            from = getValueSharding(in);
          if (!from) {
            tg.emitError() << "input " << use.getOperandNumber()
                           << " of TaskGraph '" << tg.getSymName()
                           << "' has no sharding; run "
                              "shoal-propagate-sharding first";
            return signalPassFailure();
          }
          auto to = cast<ShardingAttr>(inSh[use.getOperandNumber()]);
          auto bridge =
              b.create<BridgeOp>(tg.getLoc(), in.getType(), in,
                                 getLayout(owner, from), getLayout(tg, to));
          use.set(bridge.getResult());
        }
      }
    }
  }
};

} // namespace
