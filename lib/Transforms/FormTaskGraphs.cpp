//===- FormTaskGraphs.cpp - Scopes to shoal.task_graph ----------*- C++ -*-===//
//
// Groups the ops of each scope into isolated TaskGraph regions. Ops in no
// scope go to the default strategy. A scope whose ops are interleaved with
// another's (a default scope before and after a split one, say) becomes
// several TaskGraphs, so that TaskGraphs always form a chain without cycles.
//
//===----------------------------------------------------------------------===//

#include "ShardingUtils.h"
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

/// Ops that are cloned into each TaskGraph that uses them: weights,
/// constants, and weights' views, which follow their users like weights.
bool isClonedSource(Operation *op) {
  return isa<WeightOp, ConstantOp>(op) || isWeightView(op);
}

/// One TaskGraph being formed: a scope and the ops it got, in order.
struct Instance {
  ScopeAttr scope;
  std::string name;
  SmallVector<Operation *> ops;
  /// Training, in a pipeline: "backward" or "optimizer" (empty: forward).
  /// Each phase of a stage is a TaskGraph of its own on the stage's
  /// devices, so that the schedule can run it on its own.
  std::string phase;
};

/// The suffix of a phase's TaskGraph names.
StringRef phaseSuffix(StringRef phase) {
  return phase == "backward" ? ".bwd" : phase == "optimizer" ? ".opt" : "";
}

struct FormTaskGraphsPass
    : public ::shoal::impl::FormTaskGraphsPassBase<FormTaskGraphsPass> {
  using FormTaskGraphsPassBase::FormTaskGraphsPassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    MLIRContext *ctx = module.getContext();
    // shoal-plan knows the world size from the cluster spec.
    if (worldSize == 0)
      if (auto w = module->getAttrOfType<IntegerAttr>("shoal.world_size"))
        worldSize = w.getInt();
    // shoal-plan's compiled batch shares: the program is one replica's (its
    // micro-batches are dealt out to the replicas when the plan is
    // exported, Program.micro_batch_shares).
    if (module->hasAttr(kMicroBatchSharesAttr))
      worldSize = 1;
    int64_t microBatches = 1;
    if (auto mb = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kNumMicroBatchAttr))
      microBatches = mb.getInt();
    virtualStages = 1;
    if (auto v = module->getAttrOfType<IntegerAttr>(
            ShoalDialect::kVirtualStagesAttr))
      virtualStages = v.getInt();

    // Scopes by name, in spec order.
    llvm::StringMap<ScopeAttr> scopes;
    SmallVector<ScopeAttr> ordered;
    if (auto list = module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr))
      for (auto s : list.getAsRange<ScopeAttr>()) {
        scopes[s.getName().getValue()] = s;
        ordered.push_back(s);
      }
    // Whale: consecutive TaskGraphs are pipeline stages on their own
    // devices when there are micro-batches; scopes with different device
    // counts cannot share devices either. Otherwise every TaskGraph runs on
    // all devices (EPL's colocate_split_and_replicate).
    staged = isStaged(module);
    training = module->hasAttr(ShoalDialect::kTrainingAttr);
    firstScope = ordered.empty() ? ScopeAttr() : ordered.front();
    int64_t devices = firstScope ? firstScope.getDevices() : 1;
    Strategy defaultStrategy = Strategy::replicate;
    if (auto d = module->getAttrOfType<StringAttr>(
            ShoalDialect::kDefaultStrategyAttr))
      defaultStrategy = *symbolizeStrategy(d.getValue());
    std::string defaultName = "default";
    while (scopes.count(defaultName))
      defaultName = "_" + defaultName;
    ScopeAttr defaultScope = ScopeAttr::get(
        ctx, StringAttr::get(ctx, defaultName), defaultStrategy, devices);
    if (!staged) {
      int64_t world = worldSize ? worldSize : devices;
      if (world % devices != 0) {
        module.emitError()
            << "world size " << world
            << " is not a multiple of the scopes' device count " << devices
            << (firstScope
                    ? specLocation(
                          module,
                          ("scope:" + firstScope.getName().getValue()).str())
                    : std::string());
        return signalPassFailure();
      }
    }

    for (auto func : module.getOps<func::FuncOp>()) {
      if (func.isExternal())
        continue;
      if (!func.getBody().hasOneBlock()) {
        func.emitError() << "expected a single-block function";
        return signalPassFailure();
      }
      if (failed(formIn(func, scopes, defaultScope, microBatches)))
        return signalPassFailure();
    }
  }

  bool staged = false;
  bool training = false;
  int64_t virtualStages = 1;
  ScopeAttr firstScope;

  /// Where each instance runs: its mesh, device group and ranks.
  struct Place {
    MeshAttr mesh;
    int64_t stage = 0, offset = 0, stride = 0;
  };

  FailureOr<SmallVector<Place>> placeInstances(func::FuncOp func,
                                               ArrayRef<Instance> instances,
                                               int64_t microBatches) {
    MLIRContext *ctx = func.getContext();
    auto meshOf = [&](int64_t dp, int64_t tp) {
      Builder b(ctx);
      if (microBatches > 1)
        return MeshAttr::get(
            ctx, b.getStrArrayAttr({ShoalDialect::kMicroBatchAxis, "dp", "tp"}),
            {microBatches, dp, tp});
      return MeshAttr::get(ctx, b.getStrArrayAttr({"dp", "tp"}), {dp, tp});
    };
    SmallVector<Place> places(instances.size());
    if (!staged) {
      int64_t devices = instances.empty() ? 1 : instances[0].scope.getDevices();
      int64_t world = worldSize ? worldSize : devices;
      for (Place &p : places) {
        p.mesh = meshOf(world / devices, devices);
        p.stride = devices;
      }
      return places;
    }
    // Device groups: forward instance k runs on group k % p, with p =
    // forward instances / v (interleaved schedules give each group v model
    // chunks). A backward or optimizer instance runs on its scope's group.
    SmallVector<unsigned> fwd;
    for (auto [k, inst] : llvm::enumerate(instances))
      if (inst.phase.empty())
        fwd.push_back(k);
    int64_t n = fwd.size();
    if (n == 0)
      return places;
    if (n % virtualStages != 0)
      return func.emitError()
             << "virtual_stages = " << virtualStages << " needs a multiple of "
             << virtualStages << " TaskGraphs, but the scopes form " << n;
    int64_t groups = n / virtualStages;
    SmallVector<int64_t> groupDevices(groups), groupOffset(groups);
    int64_t total = 0;
    for (int64_t g = 0; g < groups; ++g) {
      groupDevices[g] = instances[fwd[g]].scope.getDevices();
      groupOffset[g] = total;
      total += groupDevices[g];
    }
    for (int64_t k = groups; k < n; ++k)
      if (instances[fwd[k]].scope.getDevices() != groupDevices[k % groups])
        return func.emitError()
               << "TaskGraph '" << instances[fwd[k]].name << "' uses "
               << instances[fwd[k]].scope.getDevices()
               << " devices but shares pipeline stage " << k % groups
               << " with '" << instances[fwd[k % groups]].name
               << "', which uses " << groupDevices[k % groups]
               << "; the virtual stages of one stage need the same count";
    if (auto kind =
            func->getParentOfType<ModuleOp>()->getAttrOfType<StringAttr>(
                ShoalDialect::kScheduleKindAttr);
        kind && kind.getValue() == "interleaved" && microBatches % groups != 0)
      return func.emitError()
             << "the interleaved schedule needs num_micro_batch ("
             << microBatches << ") to be a multiple of the " << groups
             << " pipeline stages";
    int64_t world = worldSize ? worldSize : total;
    if (world % total != 0)
      return func.emitError()
             << "world size " << world
             << " is not a multiple of the pipeline's " << total
             << " devices (the sum of its stages' device counts)";
    // shoal-plan may have placed the stages elsewhere (stage-major ranks).
    SmallVector<int64_t> groupStride(groups, total);
    if (auto plan =
            func->getParentOfType<ModuleOp>()->getAttrOfType<DictionaryAttr>(
                "shoal.plan"))
      if (auto list = plan.getAs<ArrayAttr>("placements")) {
        if (static_cast<int64_t>(list.size()) != groups)
          return func.emitError()
                 << "shoal.plan has " << list.size() << " placements for "
                 << groups << " pipeline stages";
        std::vector<char> used(world, 0);
        for (int64_t g = 0; g < groups; ++g) {
          auto p = dyn_cast<DenseI64ArrayAttr>(list[g]);
          if (!p || p.size() != 2)
            return func.emitError() << "shoal.plan placement " << g
                                    << " is not [offset, stride]";
          groupOffset[g] = p[0];
          groupStride[g] = p[1];
          for (int64_t i = 0; i < world / total; ++i)
            for (int64_t t = 0; t < groupDevices[g]; ++t) {
              int64_t r = p[0] + i * p[1] + t;
              if (r < 0 || r >= world || used[r]++)
                return func.emitError()
                       << "shoal.plan placements do not tile the " << world
                       << " ranks (rank " << r << " of stage " << g << ")";
            }
        }
      }
    llvm::DenseMap<Attribute, int64_t> groupOfScope;
    for (int64_t k = 0; k < n; ++k) {
      int64_t g = k % groups;
      groupOfScope.try_emplace(instances[fwd[k]].scope, g);
    }
    for (auto [k, inst] : llvm::enumerate(instances)) {
      auto it = groupOfScope.find(inst.scope);
      if (it == groupOfScope.end())
        return func.emitError() << "the " << inst.phase << " ops of scope '"
                                << inst.scope.getName().getValue()
                                << "' have no forward TaskGraph to follow";
      int64_t g = it->second;
      places[k] = {meshOf(world / total, groupDevices[g]), g, groupOffset[g],
                   groupStride[g]};
    }
    return places;
  }

  LogicalResult formIn(func::FuncOp func, llvm::StringMap<ScopeAttr> &scopes,
                       ScopeAttr defaultScope, int64_t microBatches) {
    Block &body = func.getBody().front();
    if (!body.getOps<TaskGraphOp>().empty())
      return func.emitError() << "already has TaskGraphs";

    // Assign ops to instances: an op joins the latest instance of its scope
    // that is not earlier than any instance it reads from; otherwise it
    // starts a new one. Instance edges then only go forward.
    std::vector<Instance> instances;
    llvm::DenseMap<Operation *, unsigned> instanceOf;
    SmallVector<Operation *> floating;
    llvm::StringMap<unsigned> count;
    for (Operation &op : body.without_terminator()) {
      if (isClonedSource(&op))
        continue;
      if (op.getNumRegions() != 0)
        return op.emitError() << "ops with regions cannot be placed in a "
                                 "TaskGraph";
      unsigned minIdx = 0;
      bool readsInstance = false;
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp())
          if (auto it = instanceOf.find(def); it != instanceOf.end()) {
            minIdx = std::max(minIdx, it->second);
            readsInstance = true;
          }
      // Training in a pipeline: an op in no scope that reads no op (the
      // loss gradient's seed, say) joins its first reader's TaskGraph,
      // decided below; the first stage is no better a guess.
      if (staged && training && !readsInstance &&
          !op.hasAttr(ShoalDialect::kScopeAttr)) {
        floating.push_back(&op);
        continue;
      }
      ScopeAttr scope = defaultScope;
      // In a pipeline, an op in no scope joins the stage it reads from (the
      // first scope's if it reads from none).
      if (staged && firstScope)
        scope = readsInstance ? instances[minIdx].scope : firstScope;
      if (auto name = op.getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr)) {
        auto it = scopes.find(name.getValue());
        if (it == scopes.end())
          return op.emitError()
                 << "scope '" << name.getValue() << "' is not declared in '"
                 << ShoalDialect::kScopesAttr << "'";
        scope = it->second;
      }
      // In a pipeline, each training phase of a scope is a TaskGraph of its
      // own; otherwise the phases share their scope's TaskGraph.
      std::string phase;
      if (staged)
        if (auto p = op.getAttrOfType<StringAttr>(ShoalDialect::kPhaseAttr))
          phase = p.getValue().str();
      int chosen = -1;
      for (int i = (int)instances.size() - 1; i >= (int)minIdx; --i)
        if (instances[i].scope == scope && instances[i].phase == phase) {
          chosen = i;
          break;
        }
      if (chosen < 0) {
        // TaskGraph names are unique: a scope's later instances are
        // "name.1", ... unless a scope already has that name.
        std::string name =
            (scope.getName().getValue() + phaseSuffix(phase)).str();
        while (true) {
          unsigned n = count[name]++;
          std::string candidate = n ? name + "." + std::to_string(n) : name;
          if (n == 0 || !scopes.count(candidate)) {
            name = candidate;
            break;
          }
        }
        instances.push_back({scope, name, {}, phase});
        chosen = instances.size() - 1;
      }
      instances[chosen].ops.push_back(&op);
      instanceOf[&op] = chosen;
    }

    // Floating ops go first in the earliest TaskGraph that reads them (they
    // read no TaskGraph, so anywhere is before their readers).
    for (Operation *op : llvm::reverse(floating)) {
      unsigned idx = instances.empty() ? 0 : instances.size() - 1;
      for (Operation *user : op->getUsers())
        if (auto it = instanceOf.find(user); it != instanceOf.end())
          idx = std::min(idx, it->second);
      if (instances.empty())
        return op->emitError() << "reads nothing and nothing reads it";
      auto &ops = instances[idx].ops;
      ops.insert(ops.begin(), op);
      instanceOf[op] = idx;
    }

    // A graph output that is a weight or a constant (no node computes it)
    // is copied out by a TaskGraph of its own.
    Operation *ret = body.getTerminator();
    bool sourceOutputs = llvm::any_of(ret->getOperands(), [](Value v) {
      Operation *def = v.getDefiningOp();
      return def && isClonedSource(def);
    });
    auto places = placeInstances(func, instances, microBatches);
    if (failed(places))
      return failure();
    auto setPlace = [&](TaskGraphOp tg, const Place &p) {
      if (!staged)
        return;
      Builder pb(tg.getContext());
      tg->setAttr(ShoalDialect::kStageAttr, pb.getI64IntegerAttr(p.stage));
      tg->setAttr(ShoalDialect::kPlacementAttr,
                  pb.getDenseI64ArrayAttr({p.offset, p.stride}));
    };
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
                                      inst.scope.getDevices(),
                                      (*places)[idx].mesh, operands);
      setPlace(tg, (*places)[idx]);
      if (auto sp = func->getParentOfType<ModuleOp>()->getAttrOfType<ArrayAttr>(
              kScopeSequenceParallelAttr);
          sp && llvm::is_contained(sp.getValue(), inst.scope.getName()))
        tg->setAttr(kSequenceParallelAttr, b.getUnitAttr());
      if (!inst.phase.empty())
        tg->setAttr(ShoalDialect::kPhaseAttr, b.getStringAttr(inst.phase));
      Block *tgBody = new Block();
      tg.getBody().push_back(tgBody);
      IRMapping inner;
      for (Value v : inputs)
        inner.map(v, tgBody->addArgument(v.getType(), v.getLoc()));
      OpBuilder ib = OpBuilder::atBlockEnd(tgBody);
      for (Operation *op : inst.ops) {
        // Weights and constants are cloned next to each use, so each use
        // can get the slice it needs. In training, a weight is one value
        // per TaskGraph (its optimizer update must reach every reader).
        llvm::SmallPtrSet<Value, 4> cloned;
        for (Value v : op->getOperands())
          if (Operation *def = v.getDefiningOp();
              def && isClonedSource(def) && cloned.insert(v).second &&
              !(training && (isa<WeightOp>(def) || isWeightView(def)) &&
                inner.contains(v))) {
            // A view takes its weight along.
            if (isWeightView(def)) {
              Value w = def->getOperand(0);
              if (!inner.contains(w)) {
                Operation *wc = ib.clone(*w.getDefiningOp());
                wc->removeAttr(ShoalDialect::kScopeAttr);
                inner.map(w, wc->getResult(0));
              }
            }
            Operation *copy = ib.clone(*def, inner);
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
      // On the last TaskGraph's devices (the whole mesh without stages).
      Place last;
      if (places->empty()) {
        int64_t world = worldSize ? worldSize : defaultScope.getDevices();
        Builder pb(func.getContext());
        last.mesh = MeshAttr::get(
            func.getContext(), pb.getStrArrayAttr({"dp", "tp"}),
            {world / defaultScope.getDevices(), defaultScope.getDevices()});
      } else {
        last = places->back();
      }
      int64_t devices = last.mesh.getAxisSize("tp");
      std::string outputsName = "outputs";
      while (scopes.count(outputsName) ||
             llvm::any_of(instances, [&](const Instance &i) {
               return i.name == outputsName;
             }))
        outputsName = "_" + outputsName;
      auto tg = b.create<TaskGraphOp>(ret->getLoc(), types, outputsName,
                                      Strategy::replicate, devices, last.mesh,
                                      ValueRange{});
      setPlace(tg, last);
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
