//===- Passes.cpp - Pass registration and pipelines -------------*- C++ -*-===//

#include "shoal/Transforms/Passes.h"
#include "shoal/Target/Plan.h"
#include "shoal/Transforms/CompileOptions.h"

#include "mlir/Pass/PassRegistry.h"

namespace shoal {
#define GEN_PASS_REGISTRATION
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;

namespace {

/// The options of the shoal-parallelize pipeline: CompileOptions.def's, as
/// shoal-compile's flags are.
struct ParallelizePipelineOptions
    : public PassPipelineOptions<ParallelizePipelineOptions> {
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  Option<Type> Field{*this, Key, llvm::cl::desc(Desc),                         \
                     llvm::cl::value_desc(ValueDesc),                          \
                     llvm::cl::init(Default)};
#include "shoal/Transforms/CompileOptions.def"

  shoal::CompileOptions get() const {
    shoal::CompileOptions o;
#define SHOAL_COMPILE_OPTION(Type, Field, Flag, Key, Default, ValueDesc, Desc) \
  o.Field = Field;
#include "shoal/Transforms/CompileOptions.def"
    return o;
  }
};

/// Records the device a plan runs on by default (`shoal.device`, which the
/// plan export writes as Plan.default_device): shoal-compile's --device, the
/// first step of shoal-parallelize.
struct SetDevicePass
    : public PassWrapper<SetDevicePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(SetDevicePass)

  SetDevicePass() = default;
  SetDevicePass(const SetDevicePass &other) : PassWrapper(other) {}
  explicit SetDevicePass(StringRef name) { device = name.str(); }

  StringRef getArgument() const final { return "shoal-set-device"; }
  StringRef getDescription() const final {
    return "Record the device the plan runs on by default (shoal.device)";
  }

  void runOnOperation() final {
    ModuleOp module = getOperation();
    if (device != "cpu" && device != "cuda") {
      module.emitError() << "device must be cpu or cuda, got '" << device
                         << "'";
      return signalPassFailure();
    }
    module->setAttr(shoal::kDeviceAttr,
                    StringAttr::get(module.getContext(), device));
  }

  Option<std::string> device{*this, "device", llvm::cl::desc("cpu or cuda"),
                             llvm::cl::init("cpu")};
};

} // namespace

void shoal::addTrainingPasses(mlir::OpPassManager &pm,
                              const TrainConfig &config) {
  AutodiffPassOptions a;
  a.loss = config.loss;
  a.output = config.output;
  a.labels = config.labels;
  a.ignoreIndex = config.ignoreIndex;
  a.frozen = config.frozen;
  a.frozenWhere = config.frozenWhere;
  a.lossScaleSeed = config.mixedPrecision.lossScale;
  pm.addPass(createAutodiffPass(a));
  pm.addPass(createOptimizerPass(config.optimizer));
  // Always: a per-scope `recompute:` of the annotation spec applies even
  // when the config's is none.
  pm.addPass(createRecomputePass(RecomputePassOptions{config.recompute}));
}

void shoal::addParallelizePipeline(OpPassManager &pm,
                                   const shoal::CompileOptions &options) {
  assert((options.train.empty() || options.trainConfig) &&
         "resolveCompileOptions reads the training config");
  const std::optional<TrainConfig> &train = options.trainConfig;
  if (!options.device.empty())
    pm.addPass(std::make_unique<SetDevicePass>(options.device));
  // The spec as resolveCompileOptions read it: the file is read once.
  pm.addPass(createAnnotatePass(AnnotatePassOptions{options.spec},
                                options.annotationSpec));
  // Training: the erf GELU, the RMSNorm and the attention chains fuse
  // before shoal-autodiff, whose rule for shoal.gelu is one shoal.gelu_grad
  // (the chain's own rules would be eight ops, and the backward would read
  // the chain's values, so that it could not fuse later); RMSNorm's
  // likewise, and attention's one shoal.attention_grad that recomputes the
  // probabilities (flash attention: the step keeps no [T, S] scores).
  // Before shoal-plan, which then plans what runs. Not yet the tanh form: with
  // it fused, the planner's activation estimate for Hugging Face GPT-2 leaves
  // the 10% that zoo.memory holds it to (TP2 + SP with full recomputation: 20%
  // under the arena).
  // Not attention under autocast mixed precision: it rounds the chain's two
  // products to the low type, which a fused attention does not do. The
  // default mixed precision fuses it (low-type shoal.attention and
  // attention_grad, float32 statistics inside).
  std::vector<std::string> earlyChains = options.earlyChains();
  if (train && train->mixedPrecision.precision != "fp32" &&
      train->mixedPrecision.autocast)
    llvm::erase(earlyChains, "attention");
  if (train && options.fuse && !earlyChains.empty()) {
    FusePassOptions early;
    early.chains = earlyChains;
    pm.addPass(createFusePass(early));
  }
  if (!options.cluster.empty()) {
    PlanPassOptions plan;
    plan.clusterPath = options.cluster;
    plan.worldSize = options.worldSize;
    plan.explain = options.explain;
    plan.shardMultiple = options.shardMultiple;
    plan.batchBlocks = options.batchBlocks();
    // Products at their element type's precision unless training says.
    plan.precision = "";
    // A training compile plans a training step, with its ZeRO stage.
    if (train) {
      // Full recomputation keeps only the layer inputs (the planner's
      // train-recompute); selective all but the attention cores.
      plan.step = train->recompute == "full"        ? "train-recompute"
                  : train->recompute == "selective" ? "train-selective"
                                                    : "train";
      plan.zero = train->zero;
      // Mixed precision: the products at the low type's peak; the weights
      // and gradients stay float32 (docs/Training.md "Mixed precision").
      if (train->mixedPrecision.precision != "fp32") {
        plan.precision = train->mixedPrecision.precision;
        plan.fp32Weights = true;
        plan.lowActivations = !train->mixedPrecision.autocast;
      }
    }
    pm.addPass(createPlanPass(plan));
  }
  pm.addPass(createFusedWeightViewsPass());
  if (train)
    addTrainingPasses(pm, *train);
  pm.addPass(
      createFormTaskGraphsPass(FormTaskGraphsPassOptions{options.worldSize}));
  pm.addPass(createPropagateShardingPass());
  pm.addPass(createInsertBridgesPass());
  pm.addPass(createPartitionPass());
  if (train && train->zero > 0)
    pm.addPass(createZeroPass(ZeroPassOptions{train->zero}));
  // On the local programs: the casts then never stand between a weight and
  // the product that lays it out.
  if (train && train->mixedPrecision.precision != "fp32")
    pm.addPass(createMixedPrecisionPass(train->mixedPrecision));
  pm.addPass(createPipelinePass(PipelinePassOptions{options.scatterGather}));
  // Before shoal-fuse: fused ops would hide the node names.
  if (!options.report.empty())
    pm.addPass(createReportPass(ReportPassOptions{options.report, "text"}));
  if (!options.reportDot.empty())
    pm.addPass(createReportPass(ReportPassOptions{options.reportDot, "dot"}));
  if (options.fuse)
    pm.addPass(createFusePass());
  // After shoal-fuse, which makes the attention ops whose masks it shrinks.
  pm.addPass(createCompactConstantsPass());
}

void shoal::registerAllShoalPasses() {
  registerShoalPasses();
  PassRegistration<SetDevicePass>();
  // registerPassPipeline rather than PassPipelineRegistration: reading the
  // training config may fail, and the error should say why.
  registerPassPipeline(
      "shoal-parallelize",
      "Annotate, plan for a cluster, form TaskGraphs, propagate shardings, "
      "insert bridges, partition and schedule pipeline stages; for training "
      "(train=train.yaml) differentiate, add the optimizer, ZeRO and mixed "
      "precision: what shoal-compile runs, with its options",
      [](OpPassManager &pm, StringRef text,
         function_ref<LogicalResult(const Twine &)> errorHandler) {
        ParallelizePipelineOptions parsed;
        if (failed(parsed.parseFromString(text)))
          return failure();
        shoal::CompileOptions options = parsed.get();
        if (std::string err = shoal::resolveCompileOptions(
                options, shoal::OptionSpelling::Key);
            !err.empty()) {
          (void)errorHandler("shoal-parallelize: " + err);
          return failure();
        }
        addParallelizePipeline(pm, options);
        return success();
      },
      [](function_ref<void(const mlir::detail::PassOptions &)> optHandler) {
        optHandler(ParallelizePipelineOptions());
      });
}
