//===- ShoalDialect.td - shoal dialect definition ----------*- tablegen -*-===//

#ifndef SHOAL_DIALECT_SHOAL_IR_SHOALDIALECT_TD
#define SHOAL_DIALECT_SHOAL_IR_SHOALDIALECT_TD

include "mlir/IR/OpBase.td"

def Shoal_Dialect : Dialect {
  let name = "shoal";
  let cppNamespace = "::shoal";
  let summary = "Annotation-driven auto-parallel graph IR";
  let description = [{
    The `shoal` dialect has three layers:

    1. graph ops with ONNX semantics on ranked tensors (`shoal.matmul`,
       `shoal.layer_norm`, ...), each with a sharding rule and a cost;
    2. parallel structure: `shoal.task_graph` regions made from the user's
       `replicate(n)` / `split(n)` scopes, and shardings of values over named
       mesh axes (`#shoal.sharding`);
    3. SPMD form: local shapes and explicit collectives (`shoal.all_reduce`,
       `shoal.all_gather`, `shoal.local_slice`).

    Weights are referenced by name (`shoal.weight`), never embedded.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Discardable attribute names, kept in one place.
    static constexpr ::llvm::StringLiteral kScopeAttr = "shoal.scope";
    /// On a weight viewed in another shape than its initializer's: the
    /// initializer's shape.
    static constexpr ::llvm::StringLiteral kSourceShapeAttr =
        "shoal.source_shape";
    /// On a weight that is a block of an initializer (one piece of a fused
    /// projection cut in unequal pieces): {initializer, shape, axis, start},
    /// the initializer's name and shape and where along `axis` the block
    /// starts. The weight's own name then names the block.
    static constexpr ::llvm::StringLiteral kSourceRangeAttr =
        "shoal.source_range";
    /// On a graph input: its batch dimension (0 when absent).
    static constexpr ::llvm::StringLiteral kBatchDimAttr = "shoal.batch_dim";
    /// Training: "backward" or "optimizer" on ops and TaskGraphs (absent:
    /// forward).
    static constexpr ::llvm::StringLiteral kPhaseAttr = "shoal.phase";
    /// Training: the initializers whose gradient an op's result is.
    static constexpr ::llvm::StringLiteral kGradOfAttr = "shoal.grad_of";
    /// With kGradOfAttr on an op of several results (shoal.attention_grad):
    /// the result each name's gradient is, in the same order (absent:
    /// result 0 for all).
    static constexpr ::llvm::StringLiteral kGradOfResultsAttr =
        "shoal.grad_of_results";
    /// Training: a weight with no source, started at zeros.
    static constexpr ::llvm::StringLiteral kZeroInitAttr = "shoal.zero_init";
    /// Training, in a pipeline: an optimizer update of a weight that several
    /// stages read (tied embeddings), on a stage other than the first. Every
    /// such stage applies the same update to its own copy, as Megatron-LM
    /// does for the word embeddings of its first and last stages; the
    /// runtime counts the gradient once in the clipping norm.
    static constexpr ::llvm::StringLiteral kMirrorAttr = "shoal.mirror";
    /// Training, ZeRO stages 1 and 2 (shoal-zero): on an optimizer update
    /// of a whole weight whose gradient and state are this rank's block of
    /// dimension 0 over these mesh axes. The update writes only that block
    /// of the weight and then gathers the weight over the axes.
    static constexpr ::llvm::StringLiteral kZeroAxesAttr = "shoal.zero_axes";
    /// Training, in a pipeline: a Send to a stage's optimizer TaskGraph,
    /// which runs once per step: it is sent at the last micro-batch only.
    static constexpr ::llvm::StringLiteral kLastMicroBatchAttr =
        "shoal.last_micro_batch";
    /// Mixed precision (shoal-mixed-precision): module attribute
    /// {precision, loss_scale = {initial, growth_interval, ...}}, which
    /// shoal-autodiff copies into the training attribute.
    static constexpr ::llvm::StringLiteral kMixedPrecisionAttr =
        "shoal.mixed_precision";
    /// The gradient seed of a loss-scaled training graph (a constant that
    /// shoal-run sets to the current loss scale).
    static constexpr ::llvm::StringLiteral kLossScaleAttr = "shoal.loss_scale";
    /// Training: module attribute {loss, labels, optimizer}.
    static constexpr ::llvm::StringLiteral kTrainingAttr = "shoal.training";
    static constexpr ::llvm::StringLiteral kScopesAttr = "shoal.scopes";
    static constexpr ::llvm::StringLiteral kDefaultStrategyAttr =
        "shoal.default_strategy";
    /// On a training-mode BatchNormalization's statistics (the importer's):
    /// the number of groups of consecutive samples (micro-batches) they are
    /// taken over; shoal-annotate checks it against the spec.
    static constexpr ::llvm::StringLiteral kBatchNormGroupsAttr =
        "shoal.batch_norm_groups";
    static constexpr ::llvm::StringLiteral kNumMicroBatchAttr =
        "shoal.num_micro_batch";
    static constexpr ::llvm::StringLiteral kShardingAttr = "shoal.sharding";
    static constexpr ::llvm::StringLiteral kFactorShardingAttr =
        "shoal.factor_sharding";
    static constexpr ::llvm::StringLiteral kSourceAttr = "shoal.source";
    /// Module: names of the ONNX nodes the importer left no op for
    /// (Constants, shape computations folded into types and attributes,
    /// Identity); an annotation pattern that names only such nodes places
    /// nothing and is not an error (shoal-annotate).
    static constexpr ::llvm::StringLiteral kFoldedNodesAttr =
        "shoal.folded_nodes";
    /// A training import's restored parameters (docs/Importer.md,
    /// "Training imports"): module attribute {model = the exported file,
    /// copies = [parameters restored from Identity nodes], ties = ["copy ->
    /// parameter", ...]}; `shoal.source` is then the restored model.
    static constexpr ::llvm::StringLiteral kRestoredAttr = "shoal.restored";
    /// Module attribute: the importer's warnings (strings), which the
    /// parallelism report repeats.
    static constexpr ::llvm::StringLiteral kImportWarningsAttr =
        "shoal.import_warnings";
    /// On a collective: why it is there, when the pass that inserted it
    /// wrote one (shoal-partition, shoal-zero); the parallelism report
    /// (shoal-report) derives one from the IR otherwise.
    static constexpr ::llvm::StringLiteral kReasonAttr = "shoal.reason";
    static constexpr ::llvm::StringLiteral kScheduleKindAttr =
        "shoal.schedule_kind";
    static constexpr ::llvm::StringLiteral kVirtualStagesAttr =
        "shoal.virtual_stages";
    /// On a TaskGraph: its device group (pipeline stage) and the world ranks
    /// of its mesh, `[offset, stride]` (see #shoal.layout).
    static constexpr ::llvm::StringLiteral kStageAttr = "shoal.stage";
    static constexpr ::llvm::StringLiteral kPlacementAttr = "shoal.placement";
    /// On a function: per device group, its work in order ("F3:name").
    static constexpr ::llvm::StringLiteral kScheduleAttr = "shoal.schedule";
    /// The micro-batch mesh axis: a time axis, not devices.
    static constexpr ::llvm::StringLiteral kMicroBatchAxis = "mb";
  }];
}

#endif // SHOAL_DIALECT_SHOAL_IR_SHOALDIALECT_TD
