//===- Passes.cpp - Pass registration and pipelines -------------*- C++ -*-===//

#include "shoal/Transforms/Passes.h"

#include "mlir/Pass/PassRegistry.h"

namespace shoal {
#define GEN_PASS_REGISTRATION
#include "shoal/Transforms/Passes.h.inc"
} // namespace shoal

using namespace mlir;

namespace {
struct ParallelizePipelineOptions
    : public PassPipelineOptions<ParallelizePipelineOptions> {
  Option<std::string> spec{*this, "spec",
                           llvm::cl::desc("YAML annotation spec to apply"),
                           llvm::cl::init("")};
  Option<int64_t> worldSize{
      *this, "world-size",
      llvm::cl::desc("Number of ranks (0: the scopes' device count)"),
      llvm::cl::init(0)};
  Option<bool> fuse{*this, "fuse",
                    llvm::cl::desc("Fuse GELU, add+LayerNorm and attention "
                                   "chains in the local programs"),
                    llvm::cl::init(true)};
  Option<std::string> cluster{
      *this, "cluster",
      llvm::cl::desc("Cluster spec for shoal-plan (balancing, placement, "
                     "memory check; a search when there is no spec)"),
      llvm::cl::init("")};
  Option<bool> explain{*this, "explain",
                       llvm::cl::desc("shoal-plan prints its candidates"),
                       llvm::cl::init(false)};
  Option<std::string> report{
      *this, "report",
      llvm::cl::desc("Write the parallelism report to this file (-: stdout)"),
      llvm::cl::init("")};
  Option<std::string> reportDot{
      *this, "report-dot",
      llvm::cl::desc("Write the parallelism report as Graphviz dot here"),
      llvm::cl::init("")};
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
                                   const ParallelizeOptions &options) {
  pm.addPass(createAnnotatePass(AnnotatePassOptions{options.spec}));
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
  // Not attention under mixed precision: shoal-mixed-precision rounds the
  // chain's two products to the low type (tensor cores on a GPU), while
  // shoal.attention and its gradient compute in float32.
  std::vector<std::string> earlyChains = options.fuseBeforeAutodiff;
  if (options.train && options.train->mixedPrecision.precision != "fp32")
    llvm::erase(earlyChains, "attention");
  if (options.train && options.fuse && !earlyChains.empty()) {
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
    plan.batchBlocks = options.batchBlocks;
    // Products at their element type's precision unless training says.
    plan.precision = "";
    // A training compile plans a training step, with its ZeRO stage.
    if (options.train) {
      // Full recomputation keeps only the layer inputs (the planner's
      // train-recompute); selective all but the attention cores.
      plan.step = options.train->recompute == "full"        ? "train-recompute"
                  : options.train->recompute == "selective" ? "train-selective"
                                                            : "train";
      plan.zero = options.train->zero;
      // Mixed precision: the products at the low type's peak; the weights
      // and gradients stay float32 (docs/Training.md "Mixed precision").
      if (options.train->mixedPrecision.precision != "fp32") {
        plan.precision = options.train->mixedPrecision.precision;
        plan.fp32Weights = true;
      }
    }
    pm.addPass(createPlanPass(plan));
  }
  pm.addPass(createFusedWeightViewsPass());
  if (options.train)
    addTrainingPasses(pm, *options.train);
  pm.addPass(
      createFormTaskGraphsPass(FormTaskGraphsPassOptions{options.worldSize}));
  pm.addPass(createPropagateShardingPass());
  pm.addPass(createInsertBridgesPass());
  pm.addPass(createPartitionPass());
  if (options.train && options.train->zero > 0)
    pm.addPass(createZeroPass(ZeroPassOptions{options.train->zero}));
  // On the local programs: the casts then never stand between a weight and
  // the product that lays it out.
  if (options.train && options.train->mixedPrecision.precision != "fp32")
    pm.addPass(createMixedPrecisionPass(options.train->mixedPrecision));
  pm.addPass(createPipelinePass());
  // Before shoal-fuse: fused ops would hide the node names.
  if (!options.report.empty())
    pm.addPass(createReportPass(ReportPassOptions{options.report, "text"}));
  if (!options.reportDot.empty())
    pm.addPass(createReportPass(ReportPassOptions{options.reportDot, "dot"}));
  if (options.fuse)
    pm.addPass(createFusePass());
}

void shoal::registerAllShoalPasses() {
  registerShoalPasses();
  PassPipelineRegistration<ParallelizePipelineOptions>(
      "shoal-parallelize",
      "Annotate, plan for a cluster, form TaskGraphs, propagate shardings, "
      "insert bridges, "
      "partition and schedule pipeline stages",
      [](OpPassManager &pm, const ParallelizePipelineOptions &o) {
        ParallelizeOptions options{o.spec, o.worldSize, o.fuse, o.cluster,
                                   o.explain};
        options.report = o.report;
        options.reportDot = o.reportDot;
        addParallelizePipeline(pm, options);
      });
}
