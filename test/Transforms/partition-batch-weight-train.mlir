// shoal-partition in training: a weight that holds a batch (a causal mask
// the exporter folded to the batch size) and that nothing updates (frozen,
// or no gradient reaches it) is like a constant: loaded whole, each
// micro-batch slices its rows (partition-batch-weight.mlir), where it was
// split over "mb" and the runtime refused the plan. The trained weight and
// its optimizer state keep their layout. A trained batch-sized weight would
// need every micro-batch's rows for its update and stays refused by the
// runtime (shoal-run: "weights are the same for every micro-batch").
// RUN: shoal-opt %s --shoal-annotate="spec=%S/Inputs/spec_stage_batch.yaml" --shoal-autodiff="loss=mse frozen=mask" --shoal-optimizer --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition | FileCheck %s

// CHECK: shoal.task_graph "s0"
// CHECK: %[[W:.*]] = shoal.weight "mask" {shoal.global_shape = array<i64: 4, 8>, shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]} : tensor<4x8xf32>
// CHECK-NEXT: %[[S:.*]] = shoal.local_slice %[[W]] dim 0 over ["mb"] : (tensor<4x8xf32>) -> tensor<2x8xf32>
// CHECK: shoal.add %{{.*}}, %[[S]] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
// CHECK: shoal.task_graph "s1"
// CHECK: shoal.weight "w" {shoal.global_shape = array<i64: 8, 8>, shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]} : tensor<8x8xf32>
// CHECK: shoal.adamw

module {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %m = shoal.weight "mask" : tensor<4x8xf32> loc("mask")
    %h = shoal.add %x, %m : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s0/Add")
    %w = shoal.weight "w" : tensor<8x8xf32> loc("w")
    %p = shoal.matmul %h, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> loc("/s1/MatMul")
    %y = shoal.relu %p : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s1/Relu")
    return %y : tensor<4x8xf32>
  }
}
