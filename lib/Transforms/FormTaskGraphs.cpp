//===- FormTaskGraphs.cpp - Scopes to shoal.task_graph ----------*- C++ -*-===//
//
// Groups the ops of each scope into isolated TaskGraph regions. Ops in no
// scope go to the default strategy. A scope whose ops are interleaved with
// another's (a default scope before and after a split one, say) becomes
// several TaskGraphs, so that TaskGraphs always form a chain without cycles.
//
//===----------------------------------------------------------------------===//

#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

namespace shoal {
#define GEN_PASS_DEF_FORMTASKGRAPHSPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

/// Ops that are cloned into each TaskGraph that uses them.
bool isClonedSource(Operation *op) { return isa<WeightOp, ConstantOp>(op); }

/// One TaskGraph being formed: a scope and the ops it got, in order.
struct Instance {
  ScopeAttr scope;
  std::string name;
  SmallVector<Operation *> ops;
};

struct FormTaskGraphsPass
    : public ::shoal::impl::FormTaskGraphsPassBase<FormTaskGraphsPass> {
  using FormTaskGraphsPassBase::FormTaskGraphsPassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    if (auto mb = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kNumMicroBatchAttr);
        mb && mb.getInt() > 1) {
      module.emitError() << "num_micro_batch = " << mb.getInt()
                         << " asks for pipeline stages, which are not "
                            "supported yet; use num_micro_batch: 1";
      return signalPassFailure();
    }

    // Scopes by name; every scope must use the same device count until
    // bridges between device sets exist.
    llvm::StringMap<ScopeAttr> scopes;
    ScopeAttr first;
    if (auto list = module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr))
      for (auto s : list.getAsRange<ScopeAttr>()) {
        scopes[s.getName().getValue()] = s;
        if (!first) {
          first = s;
        } else if (s.getDevices() != first.getDevices()) {
          module.emitError()
              << "scope '" << s.getName().getValue() << "' uses "
              << s.getDevices() << " devices but scope '"
              << first.getName().getValue() << "' uses " << first.getDevices()
              << "; TaskGraphs on different device sets need bridges and "
                 "pipeline stages, which are not supported yet";
          return signalPassFailure();
        }
      }
    int64_t devices = first ? first.getDevices() : 1;
    int64_t world = worldSize ? worldSize : devices;
    if (world % devices != 0) {
      module.emitError() << "world size " << world
                         << " is not a multiple of the scopes' device count "
                         << devices;
      return signalPassFailure();
    }
    Strategy defaultStrategy = Strategy::replicate;
    if (auto d = module->getAttrOfType<StringAttr>(
            ShoalDialect::kDefaultStrategyAttr))
      defaultStrategy = *symbolizeStrategy(d.getValue());
    std::string defaultName = "default";
    while (scopes.count(defaultName))
      defaultName = "_" + defaultName;
    ScopeAttr defaultScope = ScopeAttr::get(
        ctx, StringAttr::get(ctx, defaultName), defaultStrategy, devices);
    MeshAttr mesh =
        MeshAttr::get(ctx,
                      ArrayAttr::get(ctx, {StringAttr::get(ctx, "dp"),
                                           StringAttr::get(ctx, "tp")}),
                      {world / devices, devices});

    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (!func.getBody().hasOneBlock()) {
        func.emitError() << "expected a single-block function";
        return signalPassFailure();
      }
      if (failed(formIn(func, scopes, defaultScope, mesh)))
        return signalPassFailure();
    }
  }

  LogicalResult formIn(func::FuncOp func, llvm::StringMap<ScopeAttr> &scopes,
                       ScopeAttr defaultScope, MeshAttr mesh) {
    Block &body = func.getBody().front();
    if (!body.getOps<TaskGraphOp>().empty())
      return func.emitError() << "already has TaskGraphs";

    // Assign ops to instances: an op joins the latest instance of its scope
    // that is not earlier than any instance it reads from; otherwise it
    // starts a new one. Instance edges then only go forward.
    std::vector<Instance> instances;
    llvm::DenseMap<Operation *, unsigned> instanceOf;
    llvm::StringMap<unsigned> count;
    for (Operation &op : body.without_terminator()) {
      if (isClonedSource(&op))
        continue;
      if (op.getNumRegions() != 0)
        return op.emitError() << "ops with regions cannot be placed in a "
                                 "TaskGraph";
      ScopeAttr scope = defaultScope;
      if (auto name = op.getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr)) {
        auto it = scopes.find(name.getValue());
        if (it == scopes.end())
          return op.emitError()
                 << "scope '" << name.getValue() << "' is not declared in '"
                 << ShoalDialect::kScopesAttr << "'";
        scope = it->second;
      }
      unsigned minIdx = 0;
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp())
          if (auto it = instanceOf.find(def); it != instanceOf.end())
            minIdx = std::max(minIdx, it->second);
      int chosen = -1;
      for (int i = (int)instances.size() - 1; i >= (int)minIdx; --i)
        if (instances[i].scope == scope) {
          chosen = i;
          break;
        }
      if (chosen < 0) {
        unsigned n = count[scope.getName().getValue()]++;
        std::string name = scope.getName().getValue().str();
        if (n)
          name += "." + std::to_string(n);
        instances.push_back({scope, name, {}});
        chosen = instances.size() - 1;
      }
      instances[chosen].ops.push_back(&op);
      instanceOf[&op] = chosen;
    }

    // A graph output that is a weight or a constant (no node computes it)
    // is copied out by a TaskGraph of its own.
    Operation *ret = body.getTerminator();
    bool sourceOutputs = llvm::any_of(ret->getOperands(), [](Value v) {
      Operation *def = v.getDefiningOp();
      return def && isClonedSource(def);
    });
    // Build the TaskGraphs in order, cloning ops into their bodies.
    OpBuilder b(body.getTerminator());
    IRMapping outer; // original value -> value outside any TaskGraph
    for (auto [idx, inst] : llvm::enumerate(instances)) {
      llvm::SetVector<Value> inputs, outputs;
      llvm::DenseSet<Operation *> members(inst.ops.begin(), inst.ops.end());
      for (Operation *op : inst.ops) {
        for (Value v : op->getOperands()) {
          Operation *def = v.getDefiningOp();
          if (def && (members.contains(def) || isClonedSource(def)))
            continue;
          inputs.insert(v);
        }
        for (Value r : op->getResults())
          for (Operation *user : r.getUsers())
            if (!members.contains(user))
              outputs.insert(r);
      }
      SmallVector<Value> operands;
      for (Value v : inputs)
        operands.push_back(outer.lookupOrDefault(v));
      SmallVector<Type> resultTypes;
      for (Value v : outputs)
        resultTypes.push_back(v.getType());
      auto tg = b.create<TaskGraphOp>(inst.ops.front()->getLoc(), resultTypes,
                                      inst.name, inst.scope.getStrategy(),
                                      inst.scope.getDevices(), mesh, operands);
      Block *tgBody = new Block();
      tg.getBody().push_back(tgBody);
      IRMapping inner;
      for (Value v : inputs)
        inner.map(v, tgBody->addArgument(v.getType(), v.getLoc()));
      OpBuilder ib = OpBuilder::atBlockEnd(tgBody);
      for (Operation *op : inst.ops) {
        // Weights and constants are cloned next to each use, so each use
        // can get the slice it needs.
        llvm::SmallPtrSet<Value, 4> cloned;
        for (Value v : op->getOperands())
          if (Operation *def = v.getDefiningOp();
              def && isClonedSource(def) && cloned.insert(v).second) {
            Operation *copy = ib.clone(*def);
            copy->removeAttr(ShoalDialect::kScopeAttr);
            inner.map(v, copy->getResult(0));
          }
        Operation *clone = ib.clone(*op, inner);
        clone->removeAttr(ShoalDialect::kScopeAttr);
      }
      SmallVector<Value> yielded;
      for (Value v : outputs)
        yielded.push_back(inner.lookup(v));
      ib.create<YieldOp>(tg.getLoc(), yielded);
      for (auto [v, r] : llvm::zip(outputs, tg.getResults()))
        outer.map(v, r);
    }

    if (sourceOutputs) {
      SmallVector<Value> sources;
      for (Value v : ret->getOperands())
        if (Operation *def = v.getDefiningOp();
            def && isClonedSource(def) && !llvm::is_contained(sources, v))
          sources.push_back(v);
      SmallVector<Type> types;
      for (Value v : sources)
        types.push_back(v.getType());
      auto tg = b.create<TaskGraphOp>(
          ret->getLoc(), types, "outputs", defaultScope.getStrategy(),
          defaultScope.getDevices(), mesh, ValueRange{});
      Block *tgBody = new Block();
      tg.getBody().push_back(tgBody);
      OpBuilder ib = OpBuilder::atBlockEnd(tgBody);
      SmallVector<Value> yielded;
      for (Value v : sources) {
        Operation *copy = ib.clone(*v.getDefiningOp());
        copy->removeAttr(ShoalDialect::kScopeAttr);
        yielded.push_back(copy->getResult(0));
      }
      ib.create<YieldOp>(tg.getLoc(), yielded);
      for (auto [v, r] : llvm::zip(sources, tg.getResults()))
        outer.map(v, r);
    }

    // Rewire the return and drop the originals.
    for (OpOperand &use : ret->getOpOperands())
      use.set(outer.lookupOrDefault(use.get()));
    SmallVector<Operation *> dead;
    for (Operation &op : body.without_terminator())
      if (!isa<TaskGraphOp>(op))
        dead.push_back(&op);
    for (Operation *op : llvm::reverse(dead)) {
      op->dropAllUses();
      op->erase();
    }
    return success();
  }
};

} // namespace
