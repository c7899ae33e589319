// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_blocks.yaml" --shoal-form-taskgraphs="world-size=4" | FileCheck %s
// RUN: shoal-opt %inputs/mlp.mlir --shoal-form-taskgraphs="world-size=2" | FileCheck %s --check-prefix=NOSPEC
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=3" 2>&1 | FileCheck %s --check-prefix=WORLD
// RUN: not shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_pipeline.yaml" --shoal-form-taskgraphs 2>&1 | FileCheck %s --check-prefix=PIPE

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
// PIPE: num_micro_batch = 4 asks for pipeline stages, which are not supported yet
