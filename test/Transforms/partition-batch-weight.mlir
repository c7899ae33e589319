// shoal-partition: a weight that holds a batch (a constant the exporter
// folded to the batch size, such as a causal mask or vit's class token
// expanded to the batch) is the same for every micro-batch: it is loaded
// whole and each micro-batch slices its rows, instead of a weight split
// over "mb", which the runtime refuses.
// RUN: shoal-opt %s --shoal-annotate="spec=%S/Inputs/spec_stage_batch.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition | FileCheck %s

// CHECK: shoal.task_graph "s0"
// CHECK: %[[W:.*]] = shoal.weight "mask" {shoal.global_shape = array<i64: 4, 8>, shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]} : tensor<4x8xf32>
// CHECK-NEXT: %[[S:.*]] = shoal.local_slice %[[W]] dim 0 over ["mb"] : (tensor<4x8xf32>) -> tensor<2x8xf32>
// CHECK: shoal.add %{{.*}}, %[[S]] : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>

module {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %m = shoal.weight "mask" : tensor<4x8xf32> loc("mask")
    %h = shoal.add %x, %m : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s0/Add")
    %y = shoal.relu %h : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s1/Relu")
    return %y : tensor<4x8xf32>
  }
}
