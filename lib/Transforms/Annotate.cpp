//===- Annotate.cpp - Apply a replicate/split spec --------------*- C++ -*-===//
//
// Reads the YAML annotation spec and marks matching ops with their scope.
//
//===----------------------------------------------------------------------===//

#include "Recompute.h"
#include "ShardingUtils.h"
#include "shoal/Support/Files.h"
#include "shoal/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/GlobPattern.h"
#include <yaml-cpp/yaml.h>

namespace shoal {
#define GEN_PASS_DEF_ANNOTATEPASS
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;
using namespace shoal;

/// The number of micro-batches of the spec at `path` (1 when it has no
/// pipeline, or cannot be read: shoal-annotate reports that).
int64_t shoal::readSpecMicroBatches(llvm::StringRef path) {
  std::string text;
  if (!readRegularFile(path.str(), text, kMaxSpecBytes).empty())
    return 1;
  try {
    YAML::Node root = YAML::Load(text);
    if (auto m = root["pipeline"]["num_micro_batch"])
      return std::max<int64_t>(1, m.as<int64_t>());
  } catch (const YAML::Exception &) {
  }
  return 1;
}

namespace {

/// One pattern of a scope, with where it was written.
struct SpecPattern {
  /// The pattern text; on the heap because GlobPattern keeps pointers into
  /// it and patterns are moved around.
  std::unique_ptr<std::string> storage;
  StringRef text;
  llvm::GlobPattern glob;
  int line;
  int matches = 0;
};

struct SpecScope {
  std::string name;
  Strategy strategy;
  int64_t devices;
  int line;
  std::vector<SpecPattern> patterns;
  /// `recompute:` (none|full|selective; empty: the training config's).
  std::string recompute;
  /// `sequence_parallel: true` (split scopes only): Megatron-LM's sequence
  /// parallelism in the scope's TaskGraphs.
  bool sequenceParallel = false;
  int sequenceParallelLine = -1;
};

/// Settings of one graph input (`inputs:` in the spec).
struct SpecInput {
  std::string name;
  int line;
  int64_t batchDim = 0;
  int batchDimLine = -1;
};

struct Spec {
  std::vector<SpecInput> inputs;
  Strategy defaultStrategy = Strategy::replicate;
  int64_t numMicroBatch = 1;
  int numMicroBatchLine = -1;
  std::string schedule = "gpipe";
  int64_t virtualStages = 1;
  std::vector<SpecScope> scopes;
};

/// Parses and checks the spec; errors name the file and line.
class SpecReader {
public:
  SpecReader(StringRef path, Location loc) : path(path.str()), loc(loc) {}

  FailureOr<Spec> read() {
    YAML::Node root;
    std::string text;
    if (std::string e = readRegularFile(path, text, kMaxSpecBytes); !e.empty())
      return fail(-1, "cannot read the annotation spec: " + e);
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception &e) {
      return fail(e.mark.line, "invalid YAML: " + e.msg);
    }
    try {
      return readRoot(root);
    } catch (const YAML::Exception &e) {
      return fail(e.mark.line, "invalid spec: " + e.msg);
    }
  }

private:
  std::string path;
  Location loc;

  LogicalResult fail(int line, const llvm::Twine &msg) {
    if (line >= 0)
      emitError(loc) << path << ":" << line + 1 << ": " << msg;
    else
      emitError(loc) << path << ": " << msg;
    return failure();
  }
  static int lineOf(const YAML::Node &n) { return n.Mark().line; }

  /// What `n` holds, for messages.
  static std::string describe(const YAML::Node &n) {
    if (n.IsScalar())
      return "'" + n.Scalar() + "'";
    if (n.IsSequence())
      return "a list";
    if (n.IsMap())
      return "a mapping";
    return "nothing";
  }
  /// `n` as an integer, or an error at its line saying what was expected
  /// (yaml-cpp's own says only "bad conversion").
  static int64_t asInt(const YAML::Node &n, const std::string &what) {
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v))
      throw YAML::Exception(n.Mark(),
                            what + " must be an integer, got " + describe(n));
    return v;
  }
  static std::string asString(const YAML::Node &n, const std::string &what) {
    if (!n.IsScalar())
      throw YAML::Exception(n.Mark(),
                            what + " must be a string, got " + describe(n));
    return n.Scalar();
  }

  FailureOr<Spec> readRoot(const YAML::Node &root) {
    Spec spec;
    if (!root.IsMap())
      return fail(root.IsDefined() ? lineOf(root) : -1,
                  "expected a mapping with 'version' and 'scopes'");
    for (auto kv : root) {
      std::string key = asString(kv.first, "a key");
      if (key != "version" && key != "default" && key != "scopes" &&
          key != "pipeline" && key != "inputs")
        return fail(lineOf(kv.first),
                    "unknown key '" + key +
                        "' (expected version, default, pipeline, inputs, "
                        "scopes)");
    }
    if (!root["version"] || asString(root["version"], "version") != "1")
      return fail(root["version"] ? lineOf(root["version"]) : 0,
                  "expected 'version: 1'");
    if (auto def = root["default"]) {
      auto s = symbolizeStrategy(asString(def, "default"));
      if (!s)
        return fail(lineOf(def), "default strategy must be 'replicate' or "
                                 "'split', got '" +
                                     def.as<std::string>() + "'");
      spec.defaultStrategy = *s;
    }
    if (auto pipe = root["pipeline"]) {
      if (!pipe.IsMap())
        return fail(lineOf(pipe), "'pipeline' must be a mapping");
      if (auto m = pipe["num_micro_batch"]) {
        spec.numMicroBatch = asInt(m, "pipeline.num_micro_batch");
        spec.numMicroBatchLine = lineOf(m);
        if (spec.numMicroBatch < 1)
          return fail(lineOf(m), "num_micro_batch must be at least 1");
      }
      for (auto kv : pipe) {
        std::string key = asString(kv.first, "a key");
        if (key != "num_micro_batch" && key != "schedule" &&
            key != "virtual_stages")
          return fail(lineOf(kv.first),
                      "unknown pipeline key '" + key +
                          "' (expected num_micro_batch, schedule, "
                          "virtual_stages)");
      }
      if (auto sc = pipe["schedule"]) {
        spec.schedule = asString(sc, "pipeline.schedule");
        if (spec.schedule != "gpipe" && spec.schedule != "1f1b" &&
            spec.schedule != "interleaved")
          return fail(lineOf(sc), "schedule must be gpipe, 1f1b or "
                                  "interleaved, got '" +
                                      spec.schedule + "'");
      }
      if (auto v = pipe["virtual_stages"]) {
        spec.virtualStages = asInt(v, "pipeline.virtual_stages");
        if (spec.virtualStages < 1)
          return fail(lineOf(v), "virtual_stages must be at least 1");
      }
      if (spec.virtualStages > 1 && spec.schedule != "interleaved")
        return fail(lineOf(pipe), "virtual_stages needs schedule: "
                                  "interleaved");
      if (spec.schedule == "interleaved" && spec.virtualStages < 2)
        return fail(lineOf(pipe), "schedule: interleaved needs "
                                  "virtual_stages of at least 2");
    }
    if (auto ins = root["inputs"]) {
      if (!ins.IsMap())
        return fail(lineOf(ins), "'inputs' must be a mapping from graph "
                                 "input names to settings, e.g. "
                                 "{src: {batch_dim: 1}}");
      for (auto kv : ins) {
        SpecInput in;
        in.name = asString(kv.first, "a key");
        in.line = lineOf(kv.first);
        if (!kv.second.IsMap())
          return fail(lineOf(kv.second), "input '" + in.name +
                                             "': expected a mapping such as "
                                             "{batch_dim: 1}");
        for (auto setting : kv.second) {
          std::string key = asString(setting.first, "a key");
          if (key != "batch_dim")
            return fail(lineOf(setting.first), "unknown key '" + key +
                                                   "' of input '" + in.name +
                                                   "' (expected batch_dim)");
        }
        if (auto bd = kv.second["batch_dim"]) {
          in.batchDim = asInt(bd, "batch_dim");
          in.batchDimLine = lineOf(bd);
          if (in.batchDim < 0)
            return fail(in.batchDimLine, "batch_dim of input '" + in.name +
                                             "' must be non-negative, got " +
                                             std::to_string(in.batchDim));
        }
        spec.inputs.push_back(std::move(in));
      }
    }
    auto scopes = root["scopes"];
    if (!scopes)
      return spec;
    if (!scopes.IsSequence())
      return fail(lineOf(scopes), "'scopes' must be a list");
    llvm::StringMap<int> names;
    for (const YAML::Node &s : scopes) {
      auto scope = readScope(s);
      if (failed(scope))
        return failure();
      auto [it, inserted] = names.try_emplace(scope->name, scope->line);
      if (!inserted)
        return fail(scope->line, "scope '" + scope->name +
                                     "' is already defined on line " +
                                     std::to_string(it->second + 1));
      spec.scopes.push_back(std::move(*scope));
    }
    return spec;
  }

  FailureOr<SpecScope> readScope(const YAML::Node &s) {
    SpecScope scope;
    scope.line = lineOf(s);
    if (!s.IsMap())
      return fail(scope.line, "a scope must be a mapping like "
                              "{split: 2, name: x, nodes: [...]}");
    int strategies = 0;
    for (auto kv : s) {
      std::string key = asString(kv.first, "a key");
      if (key == "replicate" || key == "split") {
        ++strategies;
        scope.strategy = *symbolizeStrategy(key);
        scope.devices = asInt(kv.second, key.c_str());
        if (scope.devices < 1)
          return fail(lineOf(kv.second),
                      key + " needs a device count of at least 1, got " +
                          std::to_string(scope.devices));
      } else if (key == "name") {
        scope.name = asString(kv.second, "name");
      } else if (key == "recompute") {
        scope.recompute = kv.second.IsScalar() ? kv.second.Scalar() : "";
        if (scope.recompute != "none" && scope.recompute != "full" &&
            scope.recompute != "selective")
          return fail(lineOf(kv.second),
                      "recompute must be none, full or selective, got '" +
                          scope.recompute + "'");
      } else if (key == "sequence_parallel") {
        scope.sequenceParallelLine = lineOf(kv.second);
        std::string v = kv.second.IsScalar() ? kv.second.Scalar() : "";
        if (v == "true")
          scope.sequenceParallel = true;
        else if (v != "false")
          return fail(lineOf(kv.second),
                      "sequence_parallel must be true or false, got '" + v +
                          "'");
      } else if (key != "nodes") {
        return fail(lineOf(kv.first),
                    "unknown scope key '" + key +
                        "' (expected replicate, split, name, nodes, "
                        "recompute, sequence_parallel)");
      }
    }
    if (strategies != 1)
      return fail(scope.line,
                  "a scope needs exactly one of 'replicate: n' or 'split: n'");
    if (scope.name.empty())
      return fail(scope.line, "a scope needs a 'name'");
    if (scope.sequenceParallel && scope.strategy != Strategy::split)
      return fail(scope.sequenceParallelLine,
                  "sequence_parallel needs a split scope: it splits the "
                  "sequence over the devices a split scope splits its "
                  "weights over (scope '" +
                      scope.name + "' is replicate)");
    auto nodes = s["nodes"];
    if (!nodes || !nodes.IsSequence() || nodes.size() == 0)
      return fail(scope.line, "scope '" + scope.name +
                                  "' needs 'nodes': a list of node name "
                                  "patterns");
    for (const YAML::Node &n : nodes) {
      SpecPattern p;
      p.storage = std::make_unique<std::string>(asString(n, "a node pattern"));
      p.text = *p.storage;
      p.line = lineOf(n);
      auto glob = llvm::GlobPattern::create(p.text);
      if (!glob) {
        std::string msg = llvm::toString(glob.takeError());
        return fail(p.line, "bad pattern '" + p.text.str() + "': " + msg);
      }
      p.glob = std::move(*glob);
      scope.patterns.push_back(std::move(p));
    }
    return scope;
  }
};

struct AnnotatePass : public ::shoal::impl::AnnotatePassBase<AnnotatePass> {
  using AnnotatePassBase::AnnotatePassBase;

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (specPath.empty()) {
      if (failed(checkExisting(module)))
        signalPassFailure();
      return;
    }
    auto spec = SpecReader(specPath, module.getLoc()).read();
    if (failed(spec) || failed(apply(module, *spec)))
      signalPassFailure();
  }

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
  LogicalResult applyInputs(ModuleOp module, const Spec &spec) {
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

  LogicalResult apply(ModuleOp module, Spec &spec) {
    MLIRContext *ctx = module.getContext();
    if (failed(applyInputs(module, spec)))
      return failure();
    // Which scope (and pattern line) claimed each op.
    llvm::DenseMap<Operation *, std::pair<SpecScope *, int>> claimed;
    bool ok = true;
    bool anyNamed = false;
    module.walk([&](Operation *op) {
      if (!ok || isa<WeightOp, func::FuncOp, func::ReturnOp, ModuleOp>(op))
        return;
      StringRef node = onnxNodeName(op);
      if (node.empty())
        return;
      anyNamed = true;
      for (SpecScope &scope : spec.scopes) {
        for (SpecPattern &p : scope.patterns) {
          if (!p.glob.match(node))
            continue;
          ++p.matches;
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
    for (SpecScope &scope : spec.scopes)
      for (SpecPattern &p : scope.patterns)
        if (p.matches == 0) {
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

    for (auto &[op, owner] : claimed)
      op->setAttr(ShoalDialect::kScopeAttr,
                  StringAttr::get(ctx, owner.first->name));
    SmallVector<Attribute> scopes;
    for (SpecScope &s : spec.scopes)
      scopes.push_back(ScopeAttr::get(ctx, StringAttr::get(ctx, s.name),
                                      s.strategy, s.devices));
    module->setAttr(ShoalDialect::kScopesAttr, ArrayAttr::get(ctx, scopes));
    // Where each scope and the micro-batch count were written, for later
    // passes' errors (a batch that does not divide, a world size that is
    // not a multiple).
    SmallVector<NamedAttribute> where;
    auto at = [&](int line) {
      return StringAttr::get(ctx, specPath.getValue() + ":" +
                                      std::to_string(line + 1));
    };
    for (SpecScope &s : spec.scopes)
      where.push_back(
          NamedAttribute(StringAttr::get(ctx, "scope:" + s.name), at(s.line)));
    if (spec.numMicroBatchLine >= 0)
      where.push_back(NamedAttribute(StringAttr::get(ctx, "num_micro_batch"),
                                     at(spec.numMicroBatchLine)));
    module->setAttr(kSpecLocationsAttr, DictionaryAttr::get(ctx, where));
    SmallVector<NamedAttribute> recompute;
    for (SpecScope &s : spec.scopes)
      if (!s.recompute.empty())
        recompute.push_back(NamedAttribute(StringAttr::get(ctx, s.name),
                                           StringAttr::get(ctx, s.recompute)));
    if (!recompute.empty())
      module->setAttr(kScopeRecomputeAttr, DictionaryAttr::get(ctx, recompute));
    SmallVector<Attribute> sequenceParallel;
    for (SpecScope &s : spec.scopes)
      if (s.sequenceParallel)
        sequenceParallel.push_back(StringAttr::get(ctx, s.name));
    if (!sequenceParallel.empty())
      module->setAttr(kScopeSequenceParallelAttr,
                      ArrayAttr::get(ctx, sequenceParallel));
    module->setAttr(
        ShoalDialect::kDefaultStrategyAttr,
        StringAttr::get(ctx, stringifyStrategy(spec.defaultStrategy)));
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
