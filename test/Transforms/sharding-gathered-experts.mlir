// shoal-propagate-sharding under split: a stack of experts' matrices looked
// up per token by routing ids computed at run time (transformers 5's
// batched_mm experts, `w1[expert_ids]`: a Gather along axis 0 of a rank-3
// weight) is laid out by the product that reads it, like a weight view.
// The first product splits each expert's columns over tp, the second its
// rows (Megatron-LM's expert tensor parallelism), and each rank looks up
// its blocks: one all_reduce after the second product, no gather, and the
// report warns of no replicated work. In training, the backward multiplies
// by the matrices' transposes (a product with a weight, not a product of
// two activations): the layout holds, and the gradient of the product's
// input (scaled by a trained weight) is all-reduced as a column-parallel
// product's is.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report 2>&1 | FileCheck %s --check-prefix=FWD
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-report 2>&1 | FileCheck %s --check-prefix=TRAIN

// FWD: all_reduce over tp at /moe/MatMul_1: partial sums of a contraction split over tp
// FWD-NOT: all_gather
// FWD: total: 1 all_reduce; 0 warnings
// FWD: shoal.weight "w1" {shoal.global_shape = array<i64: 3, 8, 16>, shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]]>]} : tensor<3x8x8xf32>
// FWD-NEXT: shoal.gather %{{.*}} : (tensor<3x8x8xf32>, tensor<6xi64>) -> tensor<6x8x8xf32>
// FWD: shoal.weight "w2" {shoal.global_shape = array<i64: 3, 16, 8>, shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"], []]>]} : tensor<3x8x8xf32>
// FWD-NEXT: shoal.gather %{{.*}} : (tensor<3x8x8xf32>, tensor<6xi64>) -> tensor<6x8x8xf32>
// FWD: shoal.matmul {{.*}} -> tensor<6x1x8xf32>
// FWD-NEXT: shoal.all_reduce {{.*}} over ["tp"]

// TRAIN: all_reduce over tp at /moe/MatMul_1: partial sums of a contraction split over tp
// TRAIN: all_reduce over tp at /moe/MatMul (backward): partial sums of a contraction split over tp
// TRAIN-NOT: all_gather
// TRAIN: total: 2 all_reduce; 0 warnings
// TRAIN: shoal.weight "w1" {shoal.global_shape = array<i64: 3, 8, 16>, shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]]>]} : tensor<3x8x8xf32>
// TRAIN: shoal.weight "adam.m/w1" {shoal.global_shape = array<i64: 3, 8, 16>, shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]]>]
// TRAIN: shoal.adamw

module attributes {shoal.source = "/models/moe.onnx"} {
  func.func @main(%x: tensor<6x8xf32> {shoal.name = "x"}, %ids: tensor<6xi64> {shoal.name = "expert_ids"}) -> (tensor<6x8xf32> {shoal.name = "y"}) {
    %w1 = shoal.weight "w1" : tensor<3x8x16xf32> loc("w1")
    %g1 = shoal.gather %w1, %ids : (tensor<3x8x16xf32>, tensor<6xi64>) -> tensor<6x8x16xf32> loc("/moe/Gather")
    %sc = shoal.weight "scale" : tensor<8xf32> loc("scale")
    %xs = shoal.mul %x, %sc : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32> loc("/moe/Mul")
    %x3 = shoal.reshape %xs : (tensor<6x8xf32>) -> tensor<6x1x8xf32> loc("/moe/Unsqueeze")
    %h = shoal.matmul %x3, %g1 : (tensor<6x1x8xf32>, tensor<6x8x16xf32>) -> tensor<6x1x16xf32> loc("/moe/MatMul")
    %a = shoal.relu %h : (tensor<6x1x16xf32>) -> tensor<6x1x16xf32> loc("/moe/Relu")
    %w2 = shoal.weight "w2" : tensor<3x16x8xf32> loc("w2")
    %g2 = shoal.gather %w2, %ids : (tensor<3x16x8xf32>, tensor<6xi64>) -> tensor<6x16x8xf32> loc("/moe/Gather_1")
    %p = shoal.matmul %a, %g2 : (tensor<6x1x16xf32>, tensor<6x16x8xf32>) -> tensor<6x1x8xf32> loc("/moe/MatMul_1")
    %y = shoal.reshape %p : (tensor<6x1x8xf32>) -> tensor<6x8xf32> loc("/moe/Squeeze")
    return %y : tensor<6x8xf32>
  }
}
