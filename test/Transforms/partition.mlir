// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=4" --shoal-propagate-sharding --shoal-partition | FileCheck %s
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-annotate="spec=%inputs/spec_blocks.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=BLOCKS

// DP2 x TP2: each rank holds half the batch (dp) and half of each split
// weight (tp). The row-split Gemm's bias is added once, after the sum.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<4x32xf32> {shoal.name = "x", shoal.sharding = #shoal.sharding<{{\[}}["dp"], []]>}) -> (tensor<4x24xf32> {shoal.name = "y", shoal.sharding = #shoal.sharding<{{\[}}["dp"], []]>})
// CHECK: shoal.task_graph "model" split(2)
// CHECK: %[[W1:.*]] = shoal.weight "fc1.weight" {{.*}} : tensor<64x32xf32>
// CHECK: %[[B1:.*]] = shoal.weight "fc1.bias" {{.*}} : tensor<64xf32>
// CHECK: %[[H:.*]] = shoal.gemm %{{.*}}, %[[W1]], %[[B1]] {transB = true} : (tensor<4x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<4x64xf32>
// CHECK: %[[G:.*]] = shoal.erf %[[H]]
// CHECK: %[[W2:.*]] = shoal.weight "fc2.weight" {{.*}} : tensor<32x64xf32>
// CHECK: %[[B2:.*]] = shoal.weight "fc2.bias" {{.*}} : tensor<32xf32>
// CHECK: %[[P:.*]] = shoal.gemm %[[G]], %[[W2]] {transB = true} : (tensor<4x64xf32>, tensor<32x64xf32>) -> tensor<4x32xf32>
// CHECK: %[[S:.*]] = shoal.all_reduce %[[P]] over ["tp"] : tensor<4x32xf32>
// CHECK: %[[O:.*]] = shoal.add %[[S]], %[[B2]]
// CHECK: %[[R:.*]] = shoal.relu %[[O]]
// CHECK: shoal.weight "fc3.weight" {{.*}} : tensor<12x32xf32>
// CHECK: %[[Y:.*]] = shoal.gemm %[[R]], {{.*}} -> tensor<4x12xf32>
// CHECK: %[[YG:.*]] = shoal.all_gather %[[Y]] dim 1 over ["tp"] : (tensor<4x12xf32>) -> tensor<4x24xf32>
// CHECK: shoal.yield %[[YG]] : tensor<4x24xf32>

// A replicate TaskGraph feeding a split one: the batch, split over the
// scope's two devices, is gathered at the split TaskGraph's entry.
// BLOCKS: func.func @main(%arg0: tensor<1x4xi64>
// BLOCKS: shoal.task_graph "default" replicate(2) {{.*}} -> tensor<1x4x16xf32>
// BLOCKS: shoal.task_graph "blocks" split(2) {{.*}} -> tensor<2x4x16xf32>
// BLOCKS-NEXT: ^bb0(%[[A:.*]]: tensor<1x4x16xf32>):
// BLOCKS-NEXT: %[[X:.*]] = shoal.all_gather %[[A]] dim 0 over ["tp"] : (tensor<1x4x16xf32>) -> tensor<2x4x16xf32>
// BLOCKS: shoal.layer_norm %[[X]]
// Attention runs on 2 of the 4 heads per rank.
// BLOCKS: shoal.softmax %{{.*}} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
// BLOCKS: shoal.all_reduce
// BLOCKS: shoal.all_reduce
// BLOCKS: shoal.task_graph "default.1" replicate(2)
