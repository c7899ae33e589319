// The whole pipeline, as shoal-compile runs it.
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-parallelize="spec=%inputs/spec_split2.yaml world-size=4" | FileCheck %s
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-parallelize | FileCheck %s --check-prefix=ONE
// RUN: shoal-opt %inputs/gpt_block.mlir --shoal-parallelize="spec=%inputs/spec_split2.yaml world-size=4 fuse=false" | FileCheck %s --check-prefix=NOFUSE

// CHECK-LABEL: func.func @main(%arg0: tensor<1x4xi64>
// CHECK: shoal.task_graph "model" split(2) mesh <["dp", "tp"], [2, 2]>
// CHECK-COUNT-3: shoal.matmul {{.*}} -> tensor<1x4x8xf32>
// Attention is fused on each rank's 2 heads (shoal-fuse runs last).
// CHECK: shoal.attention {{.*}} {scale = 5.000000e-01 : f32} : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
// CHECK: shoal.all_reduce {{.*}} over ["tp"] : tensor<1x4x16xf32>
// CHECK: shoal.all_reduce {{.*}} over ["tp"] : tensor<1x4x16xf32>
// CHECK: shoal.add_layer_norm
// CHECK: shoal.all_gather {{.*}} dim 2 over ["tp"] : (tensor<1x4x16xf32>) -> tensor<1x4x32xf32>
// CHECK-NOT: shoal.all_

// One rank: global shapes, no communication.
// ONE: shoal.task_graph "default" replicate(1) mesh <["dp", "tp"], [1, 1]>
// ONE-NOT: shoal.all_
// ONE-NOT: shoal.local_slice

// NOFUSE: shoal.softmax {{.*}} : (tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
// NOFUSE-NOT: shoal.attention
