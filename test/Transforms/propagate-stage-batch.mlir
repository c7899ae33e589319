// shoal-propagate-sharding between pipeline stages: a value the first stage
// computes whole for every micro-batch (here from a constant, like T5's
// attention mask broadcast to the batch) and the second stage takes as
// the batch (its dimension 0 is the batch size) leaves the first stage cut
// per micro-batch, so that both sides of the transfer hold one
// micro-batch's block.
// RUN: shoal-opt %s --shoal-annotate="spec=%S/Inputs/spec_stage_batch.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %s --shoal-annotate="spec=%S/Inputs/spec_stage_batch.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition | FileCheck %s --check-prefix=PART

// CHECK: shoal.task_graph "s0"{{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["mb"], []]>, #shoal.sharding<{{\[}}["mb"], []]>]
// CHECK: shoal.task_graph "s1"{{.*}}shoal.in_shardings = [#shoal.sharding<{{\[}}["mb"], []]>, #shoal.sharding<{{\[}}["mb"], []]>]

// The whole [4, 8] mask is sliced to this micro-batch's [2, 8] before it
// leaves.
// PART: shoal.task_graph "s0"
// PART: shoal.local_slice %{{.*}} dim 0 over ["mb"] : (tensor<4x8xf32>) -> tensor<2x8xf32>

module {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %h = shoal.relu %x : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s0/Relu")
    %c = shoal.constant dense<1.0> : tensor<8xf32> loc("/s0/c")
    %m = shoal.expand %c : (tensor<8xf32>) -> tensor<4x8xf32> loc("/s0/Expand")
    %y = shoal.mul %h, %m : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> loc("/s1/Mul")
    return %y : tensor<4x8xf32>
  }
}
