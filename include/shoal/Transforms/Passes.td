//===- Passes.td - shoal passes ----------------------------*- tablegen -*-===//

#ifndef SHOAL_TRANSFORMS_PASSES_TD
#define SHOAL_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def AnnotatePass : Pass<"shoal-annotate", "::mlir::ModuleOp"> {
  let summary = "Apply a replicate/split annotation spec to the graph";
  let description = [{
    Reads a YAML spec (see docs/Annotations.md) and marks every op whose
    ONNX node name (its `loc("name")`) matches a scope's patterns with
    `shoal.scope = "<scope>"`. The module gets the ordered scope list in
    `shoal.scopes`. Without `spec`, annotations already in the IR are kept
    and checked.

    Before:
    ```mlir
    %0 = shoal.matmul %x, %w : ... loc("/h.0/mlp/fc/MatMul")
    ```
    After (`- {split: 2, name: blocks, nodes: ["/h.*"]}`):
    ```mlir
    module attributes {shoal.scopes = [#shoal.scope<"blocks", split, 2>]} {
      %0 = shoal.matmul %x, %w {shoal.scope = "blocks"} : ...
    ```
  }];
  let options = [
    Option<"specPath", "spec", "std::string", /*default=*/"\"\"",
           "YAML annotation spec to apply">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def AutodiffPass : Pass<"shoal-autodiff", "::mlir::ModuleOp"> {
  let summary = "Append a loss and build the backward graph";
  let description = [{
    Turns a forward graph into a training graph (docs/Training.md). The
    function gets a new input (`labels`) and one output, the scalar `loss`:
    the mean over the global batch of the softmax cross-entropy of `output`
    (or of the squared error). Reverse-mode differentiation then walks the
    ops from the loss back to every trained weight, with each op's gradient
    rule (GradientOpInterface). Backward ops keep their forward op's scope
    and location and get `shoal.phase = "backward"`, so they follow their
    forward op into its TaskGraph (Whale's rule: users annotate only the
    forward graph). The gradient of each trained weight is marked with
    `shoal.grad_of = ["<initializer>"]` for shoal-optimizer.

    Every float initializer not `frozen` is trained if a gradient reaches
    it. One that the loss depends on only through ops of zero gradient (a
    comparison, a Where condition, Floor, a cast to integers), or not at
    all, gets no mark, so no update and no optimizer state; the pass lists
    them in a remark and in `shoal.training`'s `untrained`, which the
    parallelism report prints.

    Runs after shoal-annotate (and shoal-plan), before
    shoal-form-taskgraphs.
  }];
  let options = [
    Option<"loss", "loss", "std::string", /*default=*/"\"cross_entropy\"",
           "cross_entropy or mse">,
    Option<"output", "output", "std::string", /*default=*/"\"\"",
           "name of the graph output the loss reads (default: the first)">,
    Option<"labels", "labels", "std::string", /*default=*/"\"labels\"",
           "name of the new labels input">,
    Option<"ignoreIndex", "ignore-index", "int64_t", /*default=*/"-100",
           "cross_entropy: label value that adds nothing to the loss">,
    ListOption<"frozen", "frozen", "std::string",
               "initializers not trained (glob patterns)">,
    Option<"lossScaleSeed", "loss-scale-seed", "bool", /*default=*/"false",
           "mark the gradient seed shoal.loss_scale (fp16 loss scaling: "
           "shoal-run sets it to the current scale)">,
    ListOption<"frozenWhere", "frozen-where", "std::string",
               "where each frozen pattern was written (file:line), for "
               "the error when one matches no initializer">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def OptimizerPass : Pass<"shoal-optimizer", "::mlir::ModuleOp"> {
  let summary = "One optimizer update per trained weight";
  let description = [{
    For every gradient shoal-autodiff marked, adds the optimizer's state
    (zero-initialized weights `adam.m/<name>`, `adam.v/<name>` or
    `sgd.momentum/<name>`, marked `shoal.zero_init`) and a `shoal.adamw` or
    `shoal.sgd` op that updates the weight in place. Updates keep the scope
    of the weight's first user and get `shoal.phase = "optimizer"`.
    Backward ops whose results nothing reads (gradients of inputs) are
    erased.
  }];
  let options = [
    Option<"optimizer", "optimizer", "std::string", /*default=*/"\"adamw\"",
           "adamw or sgd">,
    Option<"lr", "lr", "double", /*default=*/"1e-3", "learning rate">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"momentum", "momentum", "double", /*default=*/"0.0",
           "SGD momentum">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.0",
           "weight decay (decoupled for AdamW)">,
    Option<"clipNorm", "clip-norm", "double", /*default=*/"0.0",
           "clip the global gradient norm to this (0: off)">,
    Option<"warmupSteps", "warmup-steps", "int64_t", /*default=*/"0",
           "linear learning-rate warmup steps">,
    Option<"totalSteps", "total-steps", "int64_t", /*default=*/"0",
           "cosine decay ends here (0: constant after warmup)">,
    Option<"minLr", "min-lr", "double", /*default=*/"0.0",
           "learning rate at the end of the decay">,
    Option<"lrSchedule", "lr-schedule", "std::string",
           /*default=*/"\"cosine\"",
           "after the warmup: cosine or linear decay from lr to min-lr at "
           "total-steps, or constant">,
    Option<"decayAll", "decay-all", "bool", /*default=*/"false",
           "weight decay on every weight; by default biases and norms get "
           "none (weights of one dimension in the source model, or named "
           "*bias), as in Megatron-LM">,
    ListOption<"noDecay", "no-decay", "std::string",
               "more weights without weight decay: initializer name "
               "patterns (* and ?)">,
    Option<"gradBucketMb", "grad-bucket-mb", "double", /*default=*/"25.0",
           "gradient all-reduces packed into buckets of this many MiB "
           "(0: one per gradient); recorded in the plan for shoal-run">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def PlanPass : Pass<"shoal-plan", "::mlir::ModuleOp"> {
  let summary = "Hardware-aware planning: balance, placement, memory check, "
                "search";
  let description = [{
    Runs between `shoal-annotate` and `shoal-form-taskgraphs` when a cluster
    spec is given (docs/Planner.md); without one it does nothing.

    On an annotated module it makes the layout hardware-aware as Whale does:
    pipeline stage boundaries move so that each stage takes the same time on
    its own devices (layers in proportion to speed; ops get new
    `shoal.scope` labels), the stages that keep the most micro-batches in
    flight go to the devices with the most memory (stage placements), and
    data-parallel replicas get batch shares in proportion to their speed.
    A layout that does not fit in some device's memory is refused with each
    stage's estimate and capacity.

    On a module with no annotation it searches (dp, tp, pp, micro-batches,
    schedule, rank order), ranks the layouts by predicted step time among
    those that fit, and annotates the module with the winner.

    The decisions are in the module attribute `shoal.plan`:

    ```mlir
    module attributes {shoal.plan = {layout = "dp=1 tp=1 pp=2 m=4 1f1b stage-major",
        placements = [array<i64: 0, 1>, array<i64: 8, 1>], step_ms = 1.5 : f64, ...}}
    ```
  }];
  let options = [
    Option<"clusterPath", "cluster", "std::string", /*default=*/"\"\"",
           "Cluster spec (YAML)">,
    Option<"worldSize", "world-size", "int64_t", /*default=*/"0",
           "Number of ranks (0: the cluster's device count)">,
    Option<"step", "step", "std::string", /*default=*/"\"forward\"",
           "What a step does for the time and memory model: forward, train, "
           "train-recompute (full recomputation) or train-selective">,
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "Precision of matrix products: fp32, tf32, bf16, fp16">,
    Option<"fp32Weights", "fp32-weights", "bool", /*default=*/"false",
           "Mixed-precision training: weights and gradients stay float32 "
           "(only the products run in `precision`)">,
    Option<"lowActivations", "low-activations", "bool", /*default=*/"false",
           "With fp32-weights: the activations in `precision` too (the "
           "default mixed precision; false: bf16-autocast's casts around "
           "each product)">,
    Option<"balance", "balance", "bool", /*default=*/"true",
           "Whale's balancing (false: keep the annotated layout)">,
    Option<"zero", "zero", "int64_t", /*default=*/"0",
           "ZeRO stage of a training step (the memory model splits the "
           "optimizer state, gradients, weights over the dp replicas)">,
    Option<"explain", "explain", "bool", /*default=*/"false",
           "Print the candidates and why the chosen one won (to stderr)">,
    Option<"top", "top", "int64_t", /*default=*/"5",
           "Candidates --explain prints">,
    Option<"globalBatch", "global-batch", "int64_t", /*default=*/"0",
           "Samples per step when the graph is written for fewer "
           "(0: the graph's batch)">,
    Option<"matmulEfficiency", "matmul-efficiency", "double",
           /*default=*/"1.0",
           "Fraction of the peak FLOP/s matrix products reach (calibration)">,
    Option<"memoryEfficiency", "memory-efficiency", "double",
           /*default=*/"1.0",
           "Fraction of the memory bandwidth other ops reach (calibration)">,
    Option<"linkEfficiency", "link-efficiency", "double", /*default=*/"1.0",
           "Fraction of a link's bandwidth transfers reach (calibration)">,
    Option<"dp", "dp", "int64_t", /*default=*/"0", "Search only this dp">,
    Option<"tp", "tp", "int64_t", /*default=*/"0", "Search only this tp">,
    Option<"pp", "pp", "int64_t", /*default=*/"0", "Search only this pp">,
    Option<"microBatches", "micro-batches", "int64_t", /*default=*/"0",
           "Search only this number of micro-batches">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"\"",
           "Search only this schedule: gpipe, 1f1b, interleaved">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"0",
           "Search only this many model chunks per stage (interleaved)">,
    Option<"microBatchSize", "micro-batch-size", "int64_t", /*default=*/"0",
           "Search only this micro-batch size (samples)">,
    Option<"shardMultiple", "shard-multiple", "int64_t", /*default=*/"64",
           "Shards by speed are whole multiples of this many elements of "
           "the split dimension (of 1 where it does not divide it)">,
    Option<"batchBlocks", "batch-blocks", "bool", /*default=*/"true",
           "Batch shares of one replicated scope may be compiled as uneven "
           "blocks of the batch (else as micro-batches dealt out by speed)">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def FusedWeightViewsPass
    : Pass<"shoal-fused-weight-views", "::mlir::ModuleOp"> {
  let summary = "View the weights of fused projections piece by piece";
  let description = [{
    A matrix product (with its bias) whose result is cut in equal pieces
    along its last dimension (a Split into equal parts, or Slices of one
    piece each: fused q/k/v projections) gets its weight viewed with that
    dimension made two, `[.., n, N / n]`, plus a reshape back, so that
    tensor parallelism can split every piece by heads (Megatron-LM's
    layout). The initializer's own shape goes to `shoal.source_shape`.

    Before:
    ```mlir
    %w = shoal.weight "c_attn.weight" : tensor<64x192xf32>
    %y = shoal.matmul %x, %w : (...) -> tensor<2x16x192xf32>
    %q:3 = shoal.onnx "Split"(%y) {axis = 2 : i64} : ...
    ```
    After:
    ```mlir
    %v = shoal.weight "c_attn.weight" {shoal.source_shape = array<i64: 64, 192>} : tensor<64x3x64xf32>
    %w = shoal.reshape %v : (tensor<64x3x64xf32>) -> tensor<64x192xf32>
    ```
  }];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def FormTaskGraphsPass : Pass<"shoal-form-taskgraphs", "::mlir::ModuleOp"> {
  let summary = "Turn annotated scopes into shoal.task_graph regions";
  let description = [{
    Moves the ops of each scope into an isolated `shoal.task_graph` region
    with the scope's strategy and device count. Ops in no scope go to a
    TaskGraph with the spec's default strategy. Weights and constants are
    cloned into every TaskGraph that uses them. Each TaskGraph gets the mesh
    `dp x tp` where `tp` is its device count and `dp = world-size / tp`
    (Whale's outer data parallelism).

    ```mlir
    %y = shoal.task_graph "blocks" split(2) mesh #shoal.mesh<["dp", "tp"], [2, 2]> (%x : tensor<4x64xf32>) -> tensor<4x64xf32> {
    ^bb0(%a: tensor<4x64xf32>):
      %w = shoal.weight "w" : tensor<64x64xf32>
      %r = shoal.matmul %a, %w : ...
      shoal.yield %r : tensor<4x64xf32>
    }
    ```
  }];
  let options = [
    Option<"worldSize", "world-size", "int64_t", /*default=*/"0",
           "Number of ranks (0: the scopes' device count)">,
  ];
}

def PropagateShardingPass
    : Pass<"shoal-propagate-sharding", "::mlir::ModuleOp"> {
  let summary = "Complete the shardings inside each TaskGraph";
  let description = [{
    Walks each TaskGraph in order and decides, op by op, which mesh axes
    split each factor of its sharding rule. Inputs are split over `dp` on
    their batch dimension. In a `split` TaskGraph, a contraction with a
    weight operand whose activations do not use `tp` splits the weight's
    largest free parallel factor over `tp` (a column split); one whose
    contracted factor already arrives split keeps it (a row split, partial
    sums). This yields Megatron-LM's layout for MLPs and attention without
    matching any pattern by name.

    Results get `shoal.sharding`, ops `shoal.factor_sharding`:
    ```mlir
    %h = shoal.matmul %x, %w {shoal.factor_sharding = [["dp"], [], ["tp"], []],
        shoal.sharding = [#shoal.sharding<[["dp"], [], ["tp"]]>]} : ...
    ```
  }];
}

def PartitionPass : Pass<"shoal-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrite TaskGraphs to local shapes with collectives";
  let description = [{
    Turns global shapes into each rank's local shapes and inserts the
    communication the shardings need: `shoal.all_reduce` after an op whose
    reduction factor is split, `shoal.all_gather` / `shoal.local_slice`
    where an operand's sharding differs from what its user needs (and at
    TaskGraph outputs, which are whole over `tp`).

    Before:
    ```mlir
    %y = shoal.matmul %h, %w2 {shoal.factor_sharding = [["dp"], [], [], ["tp"]], ...}
        : (tensor<4x256xf32>, tensor<256x64xf32>) -> tensor<4x64xf32>
    ```
    After (mesh dp=2, tp=2):
    ```mlir
    %p = shoal.matmul %h, %w2 : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32>
    %y = shoal.all_reduce %p over ["tp"] : tensor<2x64xf32>
    ```
  }];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def InsertBridgesPass : Pass<"shoal-insert-bridges", "::mlir::ModuleOp"> {
  let summary = "Insert bridges between TaskGraphs on different device sets";
  let description = [{
    Runs after `shoal-propagate-sharding`. Wherever a TaskGraph reads a value
    held by a TaskGraph on other ranks or another mesh (a pipeline stage
    before it, or a graph input first read by another stage), it inserts a
    `shoal.bridge` from the holder's layout to the layout the reader uses.
    Every combination works, because a bridge is resolved per rank from the
    two layouts: replicate->split, split->replicate, split->split with
    another degree, replicate->replicate with another device count, and any
    difference in data-parallel or micro-batch cuts.

    TaskGraphs on the same devices (no pipeline) need no bridge op: there,
    `shoal-partition` reshards at the TaskGraph's entry with `all_gather` and
    `local_slice`.

    ```mlir
    %b = shoal.bridge %a from #shoal.layout<mesh = #shoal.mesh<["dp", "tp"], [1, 1]>, sharding = #shoal.sharding<[[], []]>, offset = 0, stride = 3>
                         to #shoal.layout<mesh = #shoal.mesh<["dp", "tp"], [1, 2]>, sharding = #shoal.sharding<[[], []]>, offset = 1, stride = 3>
        : (tensor<8x64xf32>) -> tensor<8x64xf32>
    ```
  }];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def ZeroPass : Pass<"shoal-zero", "::mlir::ModuleOp"> {
  let summary = "ZeRO stages 1-3: optimizer state, gradients and weights "
                "split over the data-parallel replicas";
  let description = [{
    Runs after `shoal-partition` on a training module (training config
    `zero: 1|2|3`, docs/Training.md). For each AdamW/SGD update, the mesh
    axes its weight is replicated over (`mb` aside) are the ZeRO axes, and
    the update's tensors are cut along dimension 0 into one ceil-sized block
    per rank of them.

    - Stage 1: the optimizer state is the rank's block; the gradient's
      `all_reduce` becomes a `reduce_scatter` (over `mb` too: the whole
      gradient is accumulated, then scattered); the update carries
      `shoal.zero_axes`: it writes its block of the weight and gathers it.
    - Stage 2: as 1, but the gradient is scattered every micro-batch and
      only its block is accumulated.
    - Stage 3: as 2, and the weight is stored as its block, gathered
      (`all_gather`) just before each op that reads it.

    Weights that cannot be cut keep their plain update, with a warning.
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"0",
           "ZeRO stage: 0 (off), 1, 2 or 3">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def PipelinePass : Pass<"shoal-pipeline", "::mlir::ModuleOp"> {
  let summary = "Send/recv between stages and each stage's schedule";
  let description = [{
    Runs after `shoal-partition`. Each `shoal.bridge` becomes a `shoal.send`
    at the end of the producing TaskGraph and a `shoal.recv` at the start of
    the consuming one, so every stage's TaskGraphs are self-contained. The
    micro-batches (the `mb` mesh axis that `shoal-form-taskgraphs` adds when
    `num_micro_batch > 1`) are then ordered per device group by the
    schedule the spec chose (`gpipe`, `1f1b`, or `interleaved` with
    `virtual_stages`), for forward and backward work, and the order is
    written on the function:

    ```mlir
    func.func @main(...) attributes {shoal.schedule = [
        ["F0:s0", "F1:s0", "B0:s0", "F2:s0", ...],   // device group 0
        ["F0:s1", "B0:s1", "F1:s1", ...]]}           // device group 1
    ```
    `F3:s1` is the forward pass of micro-batch 3 through TaskGraph `s1`.
    Plans without backward work skip the `B` steps.

    A value both sides hold whole on each of their `tp` ranks (the same
    `tp` size on both) travels as Megatron-LM's scatter/gather: each
    sending `tp` rank sends its `1/tp` block of one dimension
    (`shoal.local_slice` before the send) and the receivers all-gather the
    blocks over `tp` (`shoal.all_gather` after the recv, inside the node),
    so the link between the stages carries `1/tp` of the bytes
    (`scatter-gather=false` sends the whole value from every rank).
  }];
  let options = [
    Option<"scatterGather", "scatter-gather", "bool", /*default=*/"true",
           "Send a value that is whole on every tp rank as 1/tp blocks, "
           "all-gathered over tp at the receivers (Megatron-LM's "
           "scatter/gather)">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def MixedPrecisionPass : Pass<"shoal-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "bf16 or fp16 training on fp32 master weights";
  let description = [{
    Runs on the local programs of a training module, after
    `shoal-partition` and `shoal-zero` (training config
    `precision: bf16|fp16`, docs/Training.md "Mixed precision").

    By default, as Megatron-LM and TransformerEngine train
    (lib/Transforms/LowPrecision.cpp): every float32 activation of the
    forward and backward TaskGraphs, and the collectives and transfers of
    activations, are in the low type; each TaskGraph reads a weight through
    one cast; weight gradients are produced in float32 from low operands and
    summed over micro-batches and replicas in float32; the loss, scalars,
    returned values, optimizer TaskGraphs and the ops the runtime computes
    in float32 only (convolutions, batch norm, the vocabulary-parallel
    loss) stay float32. Constants are rewritten in the low type.

    With `autocast` (training config `precision: bf16-autocast`): every
    float32 `MatMul`, `Gemm` and ONNX `Conv`/`ConvTranspose` (PyTorch
    autocast's lower-precision list), forward and backward, reads its
    float32 operands through a `shoal.cast` to the low type, computes in it
    (kernels accumulate in float32 and round once), and its result is cast
    back to float32 for its readers. That rounds exactly what autocast
    rounds: the forward products' operands and results, and, through the
    casts' gradients, the backward products'. Everything else (softmax,
    normalization, the loss, elementwise ops, collectives) stays in
    float32, and so do the weights, their gradients and the optimizer state
    (master weights). A value read by several products of one phase in one
    TaskGraph is cast once. Running after partitioning, the casts never
    stand between a weight and the product that decides its layout.

    The casts carry `shoal.precision_cast` (the report looks through them).
    The precision and, with `loss-scale`, fp16's dynamic loss scaler go into
    the module's `shoal.training` attribute (`shoal.mixed_precision` on a
    module without one); `shoal-autodiff{loss-scale-seed}` marked the
    gradient seed that shoal-run sets to the current scale.
  }];
  let options = [
    Option<"precision", "precision", "std::string", /*default=*/"\"fp32\"",
           "fp32 (no change), bf16 or fp16">,
    Option<"autocast", "autocast", "bool", /*default=*/"false",
           "only the matrix products in the low type, cast around each "
           "(PyTorch autocast; slower: the training config's "
           "bf16-autocast/fp16-autocast)">,
    Option<"lossScale", "loss-scale", "bool", /*default=*/"false",
           "fp16: dynamic loss scaling">,
    Option<"initialScale", "initial-scale", "double", /*default=*/"65536.0",
           "the loss scale of the first step">,
    Option<"growthInterval", "growth-interval", "int64_t",
           /*default=*/"2000",
           "the scale doubles (growth-factor) after this many clean steps">,
    Option<"growthFactor", "growth-factor", "double", /*default=*/"2.0",
           "factor of a growth">,
    Option<"backoffFactor", "backoff-factor", "double", /*default=*/"0.5",
           "factor applied on overflow">,
    Option<"minScale", "min-scale", "double", /*default=*/"1.0",
           "an overflow at this scale stops the run">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def RecomputePass : Pass<"shoal-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recomputation: backward ops read forward values "
                "recomputed from each layer's input";
  let description = [{
    Runs on a training module after `shoal-autodiff` and `shoal-optimizer`,
    before `shoal-form-taskgraphs` (training config `recompute:`, or a
    scope's `recompute:` in the annotation spec, which wins; see
    docs/Training.md "Recomputation").

    The forward ops are cut into segments:
    - `full`: one per layer, the ops whose ONNX node name shares its prefix
      up to the first numbered part (`/h.3/`, `/encoder/layer.0/`);
    - `selective` (Megatron-LM's): one per attention core, `MatMul(q, kt)`
      through the scaling, mask and `Softmax` to `MatMul(., v)`.
    A segment's values that forward ops outside it read (its outputs) are
    kept as they are. Each value inside it that a backward op reads is
    recomputed: the ops that make it are cloned, from the segment's kept
    inputs, right before the first backward op that reads one, and the
    backward ops read the clones. Forward values then die in the forward
    TaskGraph, and a layer's recomputed values die within its backward.

    Clones carry `shoal.recomputed`; the originals and the clones of values
    that had other users before carry `shoal.multi_use` (result indices), so
    `shoal-fuse` fuses exactly the chains it would fuse without
    recomputation and the results stay bit-identical.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"none\"",
           "none, full or selective (a scope's setting wins)">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def CompactConstantsPass
    : Pass<"shoal-compact-constants", "::mlir::ModuleOp"> {
  let summary = "One buffer per distinct constant; attention masks stored "
                "at their broadcast shape";
  let description = [{
    A plan keeps every constant in a buffer of its own for the whole run.
    On each rank's local program (`shoal-parallelize` runs it last):
    - a constant that only attentions and attention_grads read as their
      mask is stored at its smallest broadcastable shape: each dimension
      along which all its slices are equal becomes 1 (an exported causal
      mask `[B, 1, T, S]` becomes `[1, 1, T, S]`);
    - equal constants (value and type) of one block become one: the first.
    Constants with attributes other than `shoal.phase` and `shoal.scope`
    (the loss scale) are left alone.

    Before:
    ```mlir
    %m = shoal.constant dense<...> : tensor<4x1x16x16xf32>
    %o = shoal.attention %q, %kt, %v, %m {scale = 2.500000e-01 : f32} : ...
    %m2 = shoal.constant {shoal.phase = "backward"} dense<...> : tensor<4x1x16x16xf32>
    %g:3 = shoal.attention_grad %d, %q, %kt, %v, %m2 {...} : ...
    ```
    After:
    ```mlir
    %m = shoal.constant dense<...> : tensor<1x1x16x16xf32>
    %o = shoal.attention %q, %kt, %v, %m {scale = 2.500000e-01 : f32} : ...
    %g:3 = shoal.attention_grad %d, %q, %kt, %v, %m {...} : ...
    ```
  }];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def FusePass : Pass<"shoal-fuse", "::mlir::ModuleOp"> {
  let summary = "Fuse the op chains exporters emit into GELU, add+LayerNorm, "
                "RMSNorm and attention";
  let description = [{
    Replaces, wherever every intermediate has no other user:
    - `Div(x, sqrt 2) -> Erf -> Add 1 -> Mul x -> Mul 0.5` (PyTorch's exact
      `nn.GELU`) and `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`
      (`nn.GELU(approximate="tanh")`, Hugging Face's `NewGELUActivation`;
      the products in any order), with an optional bias `Add` before it,
      by `shoal.gelu` (`approximate = "tanh"` for the second);
    - `Add(a, b) -> LayerNorm` by `shoal.add_layer_norm` (the sum stays
      available as the next residual);
    - `MatMul(q, kt) -> Mul|Div scale -> [Add mask] -> Softmax(last) ->
      MatMul(., v)` by `shoal.attention`;
    - `scale * (x * 1 / sqrt(mean(x^2, last) + eps))` (Hugging Face's
      LlamaRMSNorm and T5LayerNorm; `Div(1, s)` or `Reciprocal(s)`, or
      `x / s`; `Pow(x, 2)` or `x * x`; identity Casts skipped) by
      `shoal.layer_norm {rms = true}`.
    It runs on any layer (before or after partitioning); `shoal-parallelize`
    runs it last, on each rank's local program. A training compile also
    fuses the erf-form GELU, the RMSNorm and the attention chains first,
    before shoal-autodiff (`chains=gelu-erf,rms-norm,attention`), so that shoal.gelu's gradient rule gives one
    shoal.gelu_grad instead of the chain's eight ops (RMSNorm's: one
    layer_norm_grad and one layer_norm_scale_grad; attention's: one
    shoal.attention_grad, which recomputes the probabilities instead of
    keeping them), and the forward chain, whose values the backward would
    read, still fuses.

    Before:
    ```mlir
    %s = shoal.matmul %q, %kt : ...
    %s1 = shoal.mul %s, %c : ...          // %c = shoal.constant dense<0.25>
    %p = shoal.softmax %s1 : ...
    %o = shoal.matmul %p, %v : ...
    ```
    After:
    ```mlir
    %o = shoal.attention %q, %kt, %v {scale = 2.500000e-01 : f32} : ...
    ```
  }];
  let options = [
    ListOption<"chains", "chains", "std::string",
               "The chains to fuse: gelu, gelu-erf (its erf form only), "
               "add-layer-norm, attention, rms-norm (default: all)">,
  ];
  let dependentDialects = ["::shoal::ShoalDialect"];
}

def ReportPass : Pass<"shoal-report", "::mlir::ModuleOp"> {
  let summary = "Write the parallelism report: TaskGraphs, collectives and "
                "why, transfers, replicated work";
  let description = [{
    Reads a partitioned module (after `shoal-partition`, best before
    `shoal-fuse`, whose fused ops hide node names) and writes, per
    TaskGraph, its strategy, mesh and ranks; every collective with its
    axes, shapes, bytes per rank, the node it serves and its reason (the
    `shoal.reason` attribute when the inserting pass wrote one, otherwise
    derived from the ops around it); sends, receives and bridges between
    TaskGraphs; a summary; and warnings where a scope computes replicated
    work (docs/Report.md). The IR is not changed. `format=dot` writes a
    Graphviz picture instead.

    ```mlir
    %p = shoal.matmul %h, %w2 : (tensor<2x128xf32>, tensor<128x64xf32>) -> tensor<2x64xf32> loc("/fc2/MatMul")
    %y = shoal.all_reduce %p over ["tp"] : tensor<2x64xf32>
    ```
    reports
    ```
    all_reduce over tp at /fc2/MatMul: partial sums of a contraction split over tp
        2x64xf32, 512 B per rank
    ```
  }];
  let options = [
    Option<"file", "file", "std::string", /*default=*/"\"-\"",
           "Where to write the report (-: stdout)">,
    Option<"format", "format", "std::string", /*default=*/"\"text\"",
           "text or dot (Graphviz)">,
  ];
}

#endif // SHOAL_TRANSFORMS_PASSES_TD
