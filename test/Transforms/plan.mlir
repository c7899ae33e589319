// shoal-plan's decisions on heterogeneous clusters (docs/Planner.md). The
// model is test/Inputs/gpt4.mlir: a 4-layer GPT (hidden 1024, seq 512,
// vocab 8192, batch 32), shapes only.
//
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml explain=true" 2>&1 | FileCheck %s --check-prefix=PP
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml" --shoal-form-taskgraphs | FileCheck %s --check-prefix=FORM
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml balance=false" | FileCheck %s --check-prefix=NOBAL
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml step=train" | FileCheck %s --check-prefix=NODES
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_dp.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml batch-blocks=false" 2>&1 | FileCheck %s --check-prefix=DP
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_dp.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml" 2>&1 | FileCheck %s --check-prefix=BLOCKS
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_dp.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml batch-blocks=false" --shoal-form-taskgraphs | FileCheck %s --check-prefix=SHARESFORM
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_split16.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml" 2>&1 | FileCheck %s --check-prefix=SPLIT
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml explain=true top=3" 2>&1 | FileCheck %s --check-prefix=SEARCH
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml step=train-recompute pp=2 schedule=1f1b" 2>&1 | FileCheck %s --check-prefix=SEARCHPP
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml step=train-recompute pp=2 schedule=1f1b" --shoal-form-taskgraphs | FileCheck %s --check-prefix=SEARCHFORM
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml pp=2 micro-batches=1" --shoal-form-taskgraphs | FileCheck %s --check-prefix=SEARCHM1
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_t4_3g_16g.yaml step=train explain=true" --shoal-form-taskgraphs 2>&1 | FileCheck %s --check-prefix=MEMPLACE
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml explain=true" 2>&1 | FileCheck %s --check-prefix=WHY
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp2_gpipe.yaml" --shoal-plan | FileCheck %s --check-prefix=NOCLUSTER
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_t4_small.yaml step=train" 2>&1 | FileCheck %s --check-prefix=NOFIT
// Mixed-precision training (the training config's precision: bf16) keeps
// float32 weights and gradients: the same memory as float32 (bf16 weights
// with a separate master copy would be 2 + 2 + 12 bytes per parameter).
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_t4_small.yaml step=train precision=bf16 fp32-weights=true" 2>&1 | FileCheck %s --check-prefix=FP32W
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_pp2.yaml" --shoal-plan="cluster=%inputs/cluster_t4_small.yaml step=train precision=bf16" 2>&1 | FileCheck %s --check-prefix=BF16W
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_t4_small.yaml step=train" 2>&1 | FileCheck %s --check-prefix=NOFITSEARCH
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml world-size=8" 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/no_such_cluster.yaml" 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml step=backward" 2>&1 | FileCheck %s --check-prefix=STEP
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-plan="cluster=%inputs/cluster_v100x8_t4x8.yaml precision=fp8" 2>&1 | FileCheck %s --check-prefix=PRECISION
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_interleaved.yaml" --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml step=train explain=true" --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=INTER
// RUN: not shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_interleaved.yaml" --shoal-plan="cluster=%inputs/cluster_t4_3g_16g.yaml step=train" --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=INTERNOFIT
// RUN: shoal-opt %inputs/gpt4.mlir --shoal-annotate="spec=%inputs/spec_gpt4_interleaved_unlike.yaml" --shoal-plan="cluster=%inputs/cluster_a100x2_v100x2.yaml step=train explain=true" --mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=UNLIKE
// RUN: not shoal-opt %inputs/plan_bad_placements.mlir --shoal-form-taskgraphs="world-size=2" 2>&1 | FileCheck %s --check-prefix=TILE

// 8 V100-32GB + 8 T4, two stages of one device, 8 pipelines. Pipeline-major
// ranks would give every stage a T4; stage-major puts stage 0 (1F1B keeps
// the most micro-batches there) on the V100 node, which has the most
// memory, and stage 1 on the T4 node. Then the V100 stage takes three of
// the four layers, as V100 is about twice as fast (15.7 against 8.1 fp32
// TFLOP/s), and /h.3 starts stage 1.
// PP: shoal-plan: as annotated (dp=8 tp=1 pp=2 m=4 1f1b pipeline-major): 24.06{{[0-9]+}} ms per step
// PP: shoal-plan: hardware-aware (dp=8 tp=1 pp=2 m=4 1f1b stage-major): 15.27{{[0-9]+}} ms per step, 1.58x
// PP: shoal.plan = {
// PP-SAME: layout = "dp=8 tp=1 pp=2 m=4 1f1b stage-major"
// PP-SAME: placements = [array<i64: 0, 1>, array<i64: 8, 1>]
// PP-SAME: stage_capacity_MiB = array<i64: 32768, 16384>
// PP-SAME: stage_devices = ["V100-32GB", "T4"]
// PP-SAME: stage_ops = array<i64: 104, 36>
// PP: shoal.weight "h.2.mlp.proj.bias"
// PP-NEXT: shoal.add {{.*}}{shoal.scope = "s0"}
// PP-NEXT: shoal.add {{.*}}{shoal.scope = "s0"}
// PP-NEXT: shoal.weight "h.3.ln_1.weight"
// PP-NEXT: shoal.weight "h.3.ln_1.bias"
// PP-NEXT: shoal.layer_norm {{.*}}{shoal.scope = "s1"}

// shoal-form-taskgraphs places the stages where the plan says.
// FORM: shoal.task_graph "s0" replicate(1) mesh <["mb", "dp", "tp"], [4, 8, 1]>
// FORM-SAME: shoal.placement = array<i64: 0, 1>, shoal.stage = 0
// FORM: shoal.task_graph "s1" replicate(1) mesh <["mb", "dp", "tp"], [4, 8, 1]>
// FORM-SAME: shoal.placement = array<i64: 8, 1>, shoal.stage = 1

// balance=false keeps the annotation and predicts it.
// NOBAL: layout = "dp=8 tp=1 pp=2 m=4 1f1b pipeline-major"
// NOBAL-SAME: placements = [array<i64: 0, 2>, array<i64: 1, 2>]
// NOBAL-SAME: stage_devices = ["T4", "T4"]
// NOBAL-SAME: stage_ops = array<i64: 70, 70>
// NOBAL: shoal.weight "h.2.ln_1.bias"
// NOBAL-NEXT: shoal.layer_norm {{.*}}{shoal.scope = "s1"}

// Two nodes of A100-80GB and two of V100-16GB, training: stage 0 keeps two
// micro-batches of activations, so it goes to the A100 nodes (80 GiB), and
// being faster it takes about two thirds of the ops.
// NODES: layout = "dp=16 tp=1 pp=2 m=4 1f1b stage-major"
// NODES-SAME: placements = [array<i64: 0, 1>, array<i64: 16, 1>]
// NODES-SAME: stage_capacity_MiB = array<i64: 81920, 16384>
// NODES-SAME: stage_devices = ["A100-80GB", "V100-16GB"]
// NODES-SAME: stage_ops = array<i64: 93, 47>

// Data parallel on V100 + T4: batch shares in proportion to speed (the 32
// samples as 3 per V100 and 1 per T4), compiled as batch blocks (the
// default): the scope spans the 16 ranks, and shoal-partition cuts the
// batch into blocks of 3 and 1 samples (test batch-blocks.mlir).
// BLOCKS-NOT: warning
// BLOCKS: shoal.batch_blocks = {all = array<i64: 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1>}
// BLOCKS-SAME: shoal.num_micro_batch = 1 : i64
// BLOCKS-SAME: batch_shares = array<i64: 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1>
// BLOCKS-SAME: layout = "dp=16 tp=1 pp=1 m=1 (batch blocks 3 (x8)/1 (x8))"
// BLOCKS-SAME: shoal.scopes = [#shoal.scope<"all", replicate, 16>]
// BLOCKS-NOT: shoal.micro_batch_shares
// With batch-blocks=false (shoal-compile --batch-shares micro-batches), as
// micro-batches: the scope becomes one
// replica's program (one device) with the step's 32 micro-batches of one
// sample, which the plan's export deals out 3 per V100 and 1 per T4.
// DP-NOT: warning
// DP: shoal.micro_batch_shares = array<i64: 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1>
// DP-SAME: shoal.num_micro_batch = 32 : i64
// DP-SAME: batch_shares = array<i64: 3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1>
// DP-SAME: layout = "dp=16 tp=1 pp=1 m=32 (per replica 3 (x8)/1 (x8))"
// DP-NOT: placements
// DP-SAME: shoal.scopes = [#shoal.scope<"all", replicate, 1>]
// SHARESFORM: shoal.task_graph "all" replicate(1) mesh <["mb", "dp", "tp"], [32, 1, 1]>

// A split over both nodes: shards by speed (per mille), compiled
// (shoal.uneven_shards for shoal-partition, test uneven-shards.mlir) and
// predicted that way: 34.83 ms in place of 39.28 as annotated (both with the
// logits gathered over the 16 devices; the all-reduces sum in place). By speed alone the V100s would get
// 82 and the T4s 43; every device also does the ops that are not split
// (LayerNorm, residual adds, the attention around the heads), the T4s
// slower, so the V100s get more: 90 and 35.
// SPLIT-NOT: warning
// SPLIT: as_annotated_ms = 39.27
// SPLIT-SAME: layout = "dp=1 tp=16 pp=1 m=1"
// SPLIT-SAME: shard_per_mille = {blocks = array<i64: 90, 90, 90, 90, 90, 90, 90, 90, 35, 35, 35, 35, 35, 35, 35, 35>}
// SPLIT-SAME: step_ms = 34.82
// SPLIT-SAME: shoal.shard_multiple = 64 : i64
// SPLIT-SAME: shoal.uneven_shards = {blocks = array<i64: 90, 90, 90, 90, 90, 90, 90, 90, 35, 35, 35, 35, 35, 35, 35, 35>}

// No annotation: the search ranks the layouts and annotates the winner.
// SEARCH: planner: 16 x A100-80GB + 16 x V100-16GB (32 devices); {{[0-9]+}} layouts, {{[0-9]+}} fit in memory
// SEARCH-NEXT: # layout
// SEARCH-NEXT: {{^ *}}1 dp=32 tp=1 pp=1 m=1
// SEARCH-NEXT: {{^ *}}2 dp=
// SEARCH-NEXT: {{^ *}}3 dp=
// SEARCH-NEXT: chosen: dp=32 tp=1 pp=1 m=1
// SEARCH-NEXT: against #2 ({{.*}}): {{.*}} less
// SEARCH: against the best with tp=1 pp=2
// SEARCH: shoal.plan = {{{.*}}layout = "dp=32 tp=1 pp=1 m=1"
// SEARCH-SAME: shoal.scopes = [#shoal.scope<"stage0", replicate, 1>]
// SEARCH: shoal.scope = "stage0"

// The search restricted to two 1F1B stages for training.
// SEARCHPP: shoal.num_micro_batch = [[M:[0-9]+]] : i64
// SEARCHPP-SAME: layout = "dp={{[0-9]+}} tp={{[0-9]+}} pp=2 m=[[M]] 1f1b stage-major"
// SEARCHPP-SAME: stage_devices = ["A100-80GB", "V100-16GB"]
// SEARCHPP-SAME: shoal.schedule_kind = "1f1b"
// SEARCHPP-SAME: shoal.scopes = [#shoal.scope<"stage0", {{.*}}>, #shoal.scope<"stage1", {{.*}}>]
// SEARCHFORM: shoal.task_graph "stage0"
// SEARCHFORM-SAME: shoal.placement = array<i64: 0,
// SEARCHFORM: shoal.task_graph "stage1"
// SEARCHFORM-SAME: shoal.placement = array<i64: 16,

// A searched pipeline with one micro-batch and stages of the same size is
// still a pipeline: each stage on its own devices (Whale's rule alone, no
// micro-batches and equal device counts, would lay both over all 32).
// SEARCHM1: shoal.pipelined
// SEARCHM1: shoal.task_graph "stage0"
// SEARCHM1-SAME: shoal.placement = array<i64: 0, 1>
// SEARCHM1: shoal.task_graph "stage1"
// SEARCHM1-SAME: shoal.placement = array<i64: 16, 1>

// Memory-aware placement on devices of one type: stage 0 keeps 2
// micro-batches in flight under 1F1B and needs 3.54 GiB, more than the
// first T4's 3 GiB, so it goes to the 16 GiB one (rank 1) and stage 1 to
// rank 0; --explain says why.
// MEMPLACE: shoal-plan: hardware-aware (dp=1 tp=1 pp=2 m=4 1f1b stage-major)
// MEMPLACE-NEXT: its step: compute
// MEMPLACE: stage 0 's0': on rank 1 (T4, 16.00 GiB) in place of rank 0 (T4, 3.00 GiB): it needs 3.54 GiB, more than the 3.00 GiB it had
// MEMPLACE: stage 1 's1': on rank 0 (T4, 3.00 GiB) in place of rank 1 (T4, 16.00 GiB): it needs 1.91 GiB with 1 micro-batch(es) in flight
// MEMPLACE: placements = [array<i64: 1, 1>, array<i64: 0, 1>]
// MEMPLACE-SAME: stage_capacity_MiB = array<i64: 16384, 3072>
// MEMPLACE: shoal.task_graph "s0"
// MEMPLACE-SAME: shoal.placement = array<i64: 1, 1>
// MEMPLACE: shoal.task_graph "s1"
// MEMPLACE-SAME: shoal.placement = array<i64: 0, 1>

// --explain says what balancing changed against the annotation, and why.
// WHY: stage 0 's0': ops 0-103 (annotated 0-69), so that every stage takes the same time on its own devices
// WHY-NEXT: stage 0 's0': on ranks 0-7 (V100-32GB, 32.00 GiB each) in place of ranks 0,2,4,6,8,10,12,14 (V100-32GB + T4, 16.00 GiB the smallest): its replicas run on one kind of device
// WHY-NEXT: stage 1 's1': ops 104-139 (annotated 70-139)
// WHY-NEXT: stage 1 's1': on ranks 8-15 (T4, 16.00 GiB each)

// Without a cluster the pass does nothing.
// NOCLUSTER-NOT: shoal.plan
// NOCLUSTER: shoal.scopes
// NOCLUSTER-NOT: shoal.plan

// NOFIT: error: the plan does not fit in memory on '{{.*}}cluster_t4_small.yaml' (dp=1 tp=1 pp=2 m=4 1f1b pipeline-major):
// NOFIT-NEXT: stage 0 's0' on T4: needs {{.*}} GiB of 256.00 MiB (weights {{.*}}, gradients {{.*}}, optimizer {{.*}}, activations {{.*}} for 2 micro-batches in flight, workspace {{.*}})  DOES NOT FIT
// NOFIT-NEXT: stage 1 's1' on T4: needs {{.*}} for 1 micro-batch in flight{{.*}}DOES NOT FIT
// FP32W: stage 0 's0' on T4: needs {{.*}} (weights 131.10 MiB, gradients 131.10 MiB, optimizer 262.20 MiB,
// BF16W: stage 0 's0' on T4: needs {{.*}} (weights 65.55 MiB, gradients 65.55 MiB, optimizer 393.30 MiB,
// NOFITSEARCH: error: shoal-plan: no layout fits in memory:
// NOFITSEARCH: {{[0-9]+}} layouts, 0 fit in memory
// NOFITSEARCH: does not fit
// NOFITSEARCH: no layout fits in memory
// WORLD: error: the cluster spec '{{.*}}cluster_v100x8_t4x8.yaml' has 16 devices but the world size is 8
// MISSING: error: {{.*}}no_such_cluster.yaml
// STEP: error: shoal-plan: step must be forward, train, train-recompute or train-selective, got 'backward'
// PRECISION: error: shoal-plan: precision must be fp32, tf32, bf16 or fp16, got 'fp8'
// TILE: error: shoal.plan placements do not tile the 2 ranks (rank 0 of stage 1)

// An annotated interleaved pipeline (4 chunks on 2 stages) is kept as
// annotated, but predicted as the search predicts its own interleaved
// layouts (each stage with its chunks' ops) and recorded, memory per stage
// included; the chunk scopes stay as they were.
// INTER: remark: shoal-plan: interleaved stages are kept as annotated (predicted, not balanced)
// INTER: shoal-plan: as annotated (dp=16 tp=1 pp=2 m=4 interleaved v=2 pipeline-major): {{[0-9.]+}} ms per step
// INTER-NEXT: shoal-plan: hardware-aware (dp=16 tp=1 pp=2 m=4 interleaved v=2 pipeline-major)
// INTER-NEXT: its step: compute {{[0-9.]+}} ms, tensor-parallel all-reduces 0.000 ms, stage-to-stage transfers {{[0-9.]+}} ms, pipeline bubble {{[0-9.]+}} ms
// INTER: layout = "dp=16 tp=1 pp=2 m=4 interleaved v=2 pipeline-major"
// INTER-SAME: stage_memory_MiB = array<i64: {{[0-9]+}}, {{[0-9]+}}>
// INTER-SAME: shoal.scopes = [#shoal.scope<"c0", replicate, 1>, #shoal.scope<"c1", replicate, 1>, #shoal.scope<"c2", replicate, 1>, #shoal.scope<"c3", replicate, 1>]

// ... and refused when a stage does not fit (it is not moved to another
// device as a 1F1B stage would be: the chunks keep their placement).
// INTERNOFIT: error: the plan does not fit in memory on '{{.*}}cluster_t4_3g_16g.yaml' (dp=1 tp=1 pp=2 m=4 interleaved v=2 pipeline-major):
// INTERNOFIT-NEXT: stage 0 'stage0' on T4: needs {{.*}} of 3.00 GiB {{.*}} DOES NOT FIT

// Chunks that are not alike are not predicted: the prediction's
// consecutive chunks per stage would not be the work each stage runs.
// UNLIKE: remark: shoal-plan: interleaved stages are kept as annotated (not predicted: its chunks are not alike)
// UNLIKE-NOT: shoal-plan: as annotated
