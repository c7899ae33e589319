// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_blocks.yaml" --shoal-form-taskgraphs="world-size=4" | FileCheck %s
// RUN: shoal-opt %inputs/mlp.mlir --shoal-form-taskgraphs="world-size=2" | FileCheck %s --check-prefix=NOSPEC
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=3" 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pipeline.yaml" --shoal-form-taskgraphs="world-size=2" | FileCheck %s --check-prefix=PIPE
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_rep1_split2.yaml" --shoal-form-taskgraphs="world-size=6" | FileCheck %s --check-prefix=STAGES
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp_partial.yaml" --shoal-form-taskgraphs | FileCheck %s --check-prefix=PARTIAL
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_rep1_split2.yaml" --shoal-form-taskgraphs="world-size=4" 2>&1 | FileCheck %s --check-prefix=STAGEWORLD
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pp_virtual_bad.yaml" --shoal-form-taskgraphs 2>&1 | FileCheck %s --check-prefix=VIRTUAL

// The default scope comes before and after the split blocks, so it becomes
// two TaskGraphs and the chain default -> blocks -> default.1 has no cycle.
// Weights and constants are cloned into the TaskGraph that uses them.
// CHECK-LABEL: func.func @main
// CHECK: %[[E:.*]] = shoal.task_graph "default" replicate(2) mesh <["dp", "tp"], [2, 2]>(%arg0 : tensor<2x4xi64>) -> tensor<2x4x16xf32> {
// CHECK-NEXT: ^bb0(%[[IDS:.*]]: tensor<2x4xi64>):
// CHECK-NEXT: %[[W:.*]] = shoal.weight "wte.weight"
// CHECK-NEXT: %[[G:.*]] = shoal.gather %[[W]], %[[IDS]]
// CHECK-NEXT: shoal.yield %[[G]]
// CHECK: %[[B:.*]] = shoal.task_graph "blocks" split(2) mesh <["dp", "tp"], [2, 2]>(%[[E]] : tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
// CHECK-NOT: shoal.scope
// CHECK: shoal.constant dense<5.000000e-01>
// CHECK: shoal.softmax
// CHECK: %[[L:.*]] = shoal.task_graph "default.1" replicate(2) mesh <["dp", "tp"], [2, 2]>(%[[B]] : tensor<2x4x16xf32>) -> tensor<2x4x32xf32> {
// CHECK: shoal.layer_norm
// CHECK: shoal.weight "lm_head"
// CHECK: return %[[L]]

// Without annotations everything is one default replicate(1) TaskGraph and
// the world is data parallel.
// NOSPEC: shoal.task_graph "default" replicate(1) mesh <["dp", "tp"], [2, 1]>
// NOSPEC-NOT: shoal.task_graph

// WORLD: world size 3 is not a multiple of the scopes' device count 2
// One scope with micro-batches: one TaskGraph on every device, its batch cut
// into 4 micro-batches (gradient accumulation): a pipeline of one stage.
// PIPE: shoal.task_graph "a" replicate(1) mesh <["mb", "dp", "tp"], [4, 2, 1]>
// PIPE-SAME: shoal.placement = array<i64: 0, 1>, shoal.stage = 0
// PIPE-NOT: shoal.task_graph

// Pipeline stages on their own devices: 1 + 2 devices per pipeline, so 6
// ranks hold 2 pipelines. Stage 0 is ranks {0, 3}, stage 1 ranks {1, 2, 4, 5}.
// STAGES: shoal.task_graph "s0" replicate(1) mesh <["mb", "dp", "tp"], [2, 2, 1]>
// STAGES-SAME: shoal.placement = array<i64: 0, 3>, shoal.stage = 0
// STAGES: shoal.task_graph "s1" split(2) mesh <["mb", "dp", "tp"], [2, 2, 2]>
// STAGES-SAME: shoal.placement = array<i64: 1, 3>, shoal.stage = 1

// In a pipeline, ops in no scope join the stage they read from: the GELU
// (erf) goes with fc1 to "head", relu and fc3 with fc2 to "body".
// PARTIAL: shoal.task_graph "head"
// PARTIAL: shoal.erf
// PARTIAL: shoal.task_graph "body"
// PARTIAL: shoal.relu
// PARTIAL: shoal.gemm
// PARTIAL-NOT: shoal.task_graph

// STAGEWORLD: world size 4 is not a multiple of the pipeline's 3 devices (the sum of its stages' device counts)
// VIRTUAL: virtual_stages = 2 needs a multiple of 2 TaskGraphs, but the scopes form 3
