//===- Annotate.cpp - Apply a replicate/split spec --------------*- C++ -*-===//
//
// Reads the YAML annotation spec and marks matching ops with their scope.
//
//===----------------------------------------------------------------------===//

#include "AnnotationSpec.h"
#include "Recompute.h"
#include "ShardingUtils.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

namespace shoal {
#define GEN_PASS_DEF_ANNOTATEPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

namespace {

struct AnnotatePass : public ::shoal::impl::AnnotatePassBase<AnnotatePass> {
  using AnnotatePassBase::AnnotatePassBase;

  AnnotatePass(const AnnotatePassOptions &options,
               std::shared_ptr<const AnnotationSpec> spec)
      : AnnotatePassBase(options), parsed(std::move(spec)) {}

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (specPath.empty()) {
      if (failed(checkExisting(module)))
        signalPassFailure();
      return;
    }
    // The spec shoal-compile read (once, before the import), or else the
    // file itself (shoal-opt --shoal-annotate="spec=...").
    std::shared_ptr<const AnnotationSpec> spec = parsed;
    if (!spec) {
      AnnotationSpec read;
      if (std::string e = readAnnotationSpec(specPath, read); !e.empty()) {
        emitError(module.getLoc()) << e;
        return signalPassFailure();
      }
      spec = std::make_shared<const AnnotationSpec>(std::move(read));
    }
    if (failed(apply(module, *spec)))
      signalPassFailure();
  }

  /// The spec as read before the pass runs; null: read `specPath`.
  std::shared_ptr<const AnnotationSpec> parsed;

  /// Checks that in-IR annotations name declared scopes.
  LogicalResult checkExisting(ModuleOp module) {
    llvm::StringSet<> names; // declared scopes
    if (auto scopes =
            module->getAttrOfType<ArrayAttr>(ShoalDialect::kScopesAttr))
      for (auto s : scopes.getAsRange<ScopeAttr>())
        names.insert(s.getName().getValue());
    WalkResult r = module.walk([&](Operation *op) {
      auto scope = op->getAttrOfType<StringAttr>(ShoalDialect::kScopeAttr);
      if (scope && !names.contains(scope.getValue())) {
        op->emitError() << "scope '" << scope.getValue()
                        << "' is not declared in the module's '"
                        << ShoalDialect::kScopesAttr << "'";
        return WalkResult::interrupt();
      }
      return WalkResult::advance();
    });
    return failure(r.wasInterrupted());
  }

  /// `inputs:` of the spec: the batch dimension of named graph inputs.
  LogicalResult applyInputs(ModuleOp module, const AnnotationSpec &spec) {
    for (const SpecInput &in : spec.inputs) {
      bool found = false;
      std::string names;
      for (auto func : module.getOps<func::FuncOp>()) {
        if (func.isExternal())
          continue;
        for (unsigned i = 0; i < func.getNumArguments(); ++i) {
          auto name = func.getArgAttrOfType<StringAttr>(i, "shoal.name");
          if (!name)
            continue;
          names += (names.empty() ? "" : ", ") + name.getValue().str();
          if (name.getValue() != in.name)
            continue;
          found = true;
          auto type = dyn_cast<RankedTensorType>(func.getArgument(i).getType());
          if (!type || in.batchDim >= type.getRank())
            return emitError(module.getLoc())
                   << specPath << ":" << in.batchDimLine + 1 << ": batch_dim "
                   << in.batchDim << " of input '" << in.name
                   << "' is out of range: the input has rank "
                   << (type ? type.getRank() : 0);
          func.setArgAttr(
              i, ShoalDialect::kBatchDimAttr,
              IntegerAttr::get(IntegerType::get(module.getContext(), 64),
                               in.batchDim));
        }
      }
      if (!found)
        return emitError(module.getLoc())
               << specPath << ":" << in.line + 1 << ": '" << in.name
               << "' is not a graph input (graph inputs: "
               << (names.empty() ? "none" : names) << ")";
    }
    return success();
  }

  LogicalResult apply(ModuleOp module, const AnnotationSpec &spec) {
    MLIRContext *ctx = module.getContext();
    if (failed(applyInputs(module, spec)))
      return failure();
    // Which scope (and pattern line) claimed each op; which patterns matched
    // an op (kept here: the spec is shared, and stays as it was read).
    llvm::DenseMap<Operation *, std::pair<const SpecScope *, int>> claimed;
    llvm::SmallPtrSet<const SpecPattern *, 16> matched;
    // Patterns that matched only nodes their scope excludes.
    llvm::SmallPtrSet<const SpecPattern *, 16> matchedExcluded;
    bool ok = true;
    bool anyNamed = false;
    module.walk([&](Operation *op) {
      if (!ok || isa<WeightOp, func::FuncOp, func::ReturnOp, ModuleOp>(op))
        return;
      StringRef node = onnxNodeName(op);
      if (node.empty())
        return;
      anyNamed = true;
      for (const SpecScope &scope : spec.scopes) {
        for (const SpecPattern &p : scope.patterns) {
          if (!p.glob.match(node))
            continue;
          // Excluded: the scope does not take it (another scope may).
          bool excluded = false;
          for (const SpecPattern &e : scope.excludes)
            if (e.glob.match(node)) {
              matched.insert(&e);
              excluded = true;
            }
          if (excluded) {
            matchedExcluded.insert(&p);
            break;
          }
          matched.insert(&p);
          auto [it, inserted] = claimed.try_emplace(op, &scope, p.line);
          if (!inserted && it->second.first != &scope) {
            emitError(op->getLoc())
                << specPath << ":" << p.line + 1 << ": node '" << node
                << "' is claimed by scope '" << it->second.first->name
                << "' (line " << it->second.second + 1 << ") and by scope '"
                << scope.name << "'";
            ok = false;
            return;
          }
          break;
        }
      }
    });
    if (!ok)
      return failure();
    // Nodes the importer folded away (Constants, shape computations) left
    // no op to place: a pattern naming only those is no typo.
    auto folded =
        module->getAttrOfType<ArrayAttr>(ShoalDialect::kFoldedNodesAttr);
    auto foldedMatch = [&](const SpecPattern &p) -> StringRef {
      if (folded)
        for (auto name : folded.getAsValueRange<StringAttr>())
          if (p.glob.match(name))
            return name;
      return {};
    };
    for (const SpecScope &scope : spec.scopes)
      for (const SpecPattern &p : scope.patterns)
        if (!matched.contains(&p)) {
          if (StringRef name = foldedMatch(p); !name.empty()) {
            emitWarning(module.getLoc())
                << specPath << ":" << p.line + 1 << ": pattern '" << p.text
                << "' of scope '" << scope.name
                << "' matches only nodes the importer folded into "
                   "constants, shapes or attributes (such as '"
                << name << "'): it places nothing";
            continue;
          }
          if (matchedExcluded.contains(&p))
            return emitError(module.getLoc())
                   << specPath << ":" << p.line + 1 << ": pattern '" << p.text
                   << "' of scope '" << scope.name
                   << "' matches only nodes that the scope excludes";
          InFlightDiagnostic d = emitError(module.getLoc())
                                 << specPath << ":" << p.line + 1
                                 << ": pattern '" << p.text << "' of scope '"
                                 << scope.name << "' matches no node";
          // Node names are the ops' locations: a module printed without
          // them (shoal-translate without --mlir-print-debuginfo) has none.
          if (!anyNamed)
            d << " (no op of this module has an ONNX node name: write "
                 "the imported .mlir with --mlir-print-debuginfo, e.g. "
                 "shoal-translate --import-onnx model.onnx "
                 "--mlir-print-debuginfo -o model.mlir)";
          return d;
        }

    // An exclude pattern that takes nothing out of its scope is a typo or
    // a stale name, as a pattern that matches no node is.
    for (const SpecScope &scope : spec.scopes)
      for (const SpecPattern &p : scope.excludes)
        if (!matched.contains(&p))
          return emitError(module.getLoc())
                 << specPath << ":" << p.line + 1 << ": exclude pattern '"
                 << p.text << "' of scope '" << scope.name
                 << "' matches no node that the scope's patterns match";

    for (auto &[op, owner] : claimed)
      op->setAttr(ShoalDialect::kScopeAttr,
                  StringAttr::get(ctx, owner.first->name));
    SmallVector<Attribute> scopes;
    for (const SpecScope &s : spec.scopes)
      scopes.push_back(ScopeAttr::get(
          ctx, StringAttr::get(ctx, s.name),
          s.split ? Strategy::split : Strategy::replicate, s.devices));
    module->setAttr(ShoalDialect::kScopesAttr, ArrayAttr::get(ctx, scopes));
    // Where each scope and the micro-batch count were written, for later
    // passes' errors (a batch that does not divide, a world size that is
    // not a multiple).
    SmallVector<NamedAttribute> where;
    auto at = [&](int line) {
      return StringAttr::get(ctx, specPath.getValue() + ":" +
                                      std::to_string(line + 1));
    };
    for (const SpecScope &s : spec.scopes)
      where.push_back(
          NamedAttribute(StringAttr::get(ctx, "scope:" + s.name), at(s.line)));
    if (spec.numMicroBatchLine >= 0)
      where.push_back(NamedAttribute(StringAttr::get(ctx, "num_micro_batch"),
                                     at(spec.numMicroBatchLine)));
    module->setAttr(kSpecLocationsAttr, DictionaryAttr::get(ctx, where));
    SmallVector<NamedAttribute> recompute;
    for (const SpecScope &s : spec.scopes)
      if (!s.recompute.empty())
        recompute.push_back(NamedAttribute(StringAttr::get(ctx, s.name),
                                           StringAttr::get(ctx, s.recompute)));
    if (!recompute.empty())
      module->setAttr(kScopeRecomputeAttr, DictionaryAttr::get(ctx, recompute));
    SmallVector<Attribute> sequenceParallel;
    for (const SpecScope &s : spec.scopes)
      if (s.sequenceParallel)
        sequenceParallel.push_back(StringAttr::get(ctx, s.name));
    if (!sequenceParallel.empty())
      module->setAttr(kScopeSequenceParallelAttr,
                      ArrayAttr::get(ctx, sequenceParallel));
    module->setAttr(
        ShoalDialect::kDefaultStrategyAttr,
        StringAttr::get(ctx, stringifyStrategy(spec.defaultSplit
                                                   ? Strategy::split
                                                   : Strategy::replicate)));
    // Training-mode BatchNormalization takes its statistics per micro-batch
    // (the importer's groups): the model must be imported for this count.
    WalkResult groups = module.walk([&](Operation *op) {
      auto g =
          op->getAttrOfType<IntegerAttr>(ShoalDialect::kBatchNormGroupsAttr);
      if (!g || g.getInt() == spec.numMicroBatch)
        return WalkResult::advance();
      op->emitError() << "BatchNormalization in training mode was imported "
                         "with statistics over "
                      << g.getInt() << " group(s) of samples, but the spec has "
                      << spec.numMicroBatch
                      << " micro-batch(es); import the model for them "
                         "(shoal-compile does; shoal-translate "
                         "--batch-norm-groups=N)";
      return WalkResult::interrupt();
    });
    if (groups.wasInterrupted())
      return failure();
    module->setAttr(
        ShoalDialect::kNumMicroBatchAttr,
        IntegerAttr::get(IntegerType::get(ctx, 64), spec.numMicroBatch));
    module->setAttr(ShoalDialect::kScheduleKindAttr,
                    StringAttr::get(ctx, spec.schedule));
    module->setAttr(
        ShoalDialect::kVirtualStagesAttr,
        IntegerAttr::get(IntegerType::get(ctx, 64), spec.virtualStages));
    return success();
  }
};

} // namespace

std::unique_ptr<Pass>
shoal::createAnnotatePass(const AnnotatePassOptions &options,
                          std::shared_ptr<const AnnotationSpec> spec) {
  return std::make_unique<AnnotatePass>(options, std::move(spec));
}
