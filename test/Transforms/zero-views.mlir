// ZeRO-3 of a weight that shoal-fused-weight-views views in pieces (GPT-2's
// c_attn, a Conv1D: the batch flattened for a Gemm, restored, then Split
// into q, k and v). The forward's product and the backward's input gradient
// read the view: each gets a view of its own, gathered just before it, so
// that the whole weight is not kept from the forward to the backward. (A
// replicate(2) scope's devices are its "tp" axis.)
// RUN: shoal-opt %s --shoal-annotate="spec=%S/Inputs/spec_zero_views_dp2.yaml" --shoal-fused-weight-views --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=3" | FileCheck %s

// CHECK: %[[W:.*]] = shoal.weight "c_attn.weight" {{.*}} : tensor<4x3x8xf32>
// CHECK: %[[G1:.*]] = shoal.all_gather %[[W]] dim 0 over ["tp"] {shoal.reason = "ZeRO-3: 'c_attn.weight' is stored split over tp{{.*}}"} : (tensor<4x3x8xf32>) -> tensor<8x3x8xf32>
// CHECK-NEXT: %[[V1:.*]] = shoal.reshape %[[G1]] : (tensor<8x3x8xf32>) -> tensor<8x24xf32>
// CHECK-NEXT: shoal.gemm %{{.*}}, %[[V1]], %{{.*}} : (tensor<8x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<8x24xf32>
// CHECK: %[[G2:.*]] = shoal.all_gather %[[W]] dim 0 over ["tp"] {shoal.phase = "backward", shoal.reason = "ZeRO-3: 'c_attn.weight'{{.*}}"}
// CHECK-NEXT: %[[V2:.*]] = shoal.reshape %[[G2]] {shoal.phase = "backward"} : (tensor<8x3x8xf32>) -> tensor<8x24xf32>
// CHECK-NEXT: shoal.gemm %{{.*}}, %[[V2]] {shoal.phase = "backward", transB = true}

// Stage 1: the view's gradient is the sum's reshape. The sum is
// reduce-scattered in its own shape (dimension 0 is the weight's), crosses
// as the block, and is viewed as the weight's block beside the update; the
// update gets no whole gradient to slice.
// RUN: shoal-opt %s --shoal-annotate="spec=%S/Inputs/spec_zero_views_dp2.yaml" --shoal-fused-weight-views --shoal-autodiff="loss=mse" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-insert-bridges --shoal-partition --shoal-zero="stage=1" | FileCheck %s --check-prefix=Z1

// Z1: %[[G:.*]] = shoal.gemm %{{.*}}, %{{.*}} {shoal.phase = "backward", transA = true} : (tensor<8x8xf32>, tensor<8x24xf32>) -> tensor<8x24xf32>
// Z1-NEXT: %[[RS:.*]] = shoal.reduce_scatter %[[G]] dim 0 over ["tp"] {shoal.reason = "ZeRO-1: gradient of 'c_attn.weight', this rank's block of dim 0 over tp, summed over tp"} : (tensor<8x24xf32>) -> tensor<4x24xf32>
// Z1: shoal.yield {{.*}}%[[RS]]{{.*}} : {{.*}}tensor<4x24xf32>
// Z1: shoal.task_graph "default"{{.*}}tensor<4x24xf32>{{.*}}#shoal.sharding<{{\[\["tp"\], \[\]\]}}>
// Z1: ^bb0(%{{.*}}: tensor<24xf32>, %[[A:.*]]: tensor<4x24xf32>):
// Z1: shoal.yield %{{.*}}, %[[A]] : tensor<3x8xf32>, tensor<4x24xf32>
// Z1: ^bb0(%{{.*}}: tensor<3x8xf32>, %[[B:.*]]: tensor<4x24xf32>):
// Z1: %[[W:.*]] = shoal.weight "c_attn.weight"
// Z1-NOT: local_slice
// Z1: %[[V:.*]] = shoal.reshape %[[B]] {shoal.phase = "optimizer"} : (tensor<4x24xf32>) -> tensor<4x3x8xf32>
// Z1-NEXT: shoal.adamw %[[W]], %[[V]]

module attributes {shoal.source = "/models/conv1d.onnx"} {
  func.func @main(%x: tensor<4x4x8xf32> {shoal.name = "x"}) -> (tensor<4x4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "c_attn.weight" : tensor<8x24xf32> loc("c_attn.weight")
    %b = shoal.weight "c_attn.bias" : tensor<24xf32> loc("c_attn.bias")
    %w0 = shoal.weight "ln.weight" : tensor<8xf32> loc("ln.weight")
    %h = shoal.mul %x, %w0 : (tensor<4x4x8xf32>, tensor<8xf32>) -> tensor<4x4x8xf32> loc("/ln/Mul")
    %f = shoal.reshape %h : (tensor<4x4x8xf32>) -> tensor<16x8xf32> loc("/attn/c_attn/Reshape")
    %p = shoal.gemm %f, %w, %b : (tensor<16x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<16x24xf32> loc("/attn/c_attn/Gemm")
    %u = shoal.reshape %p : (tensor<16x24xf32>) -> tensor<4x4x24xf32> loc("/attn/c_attn/Reshape_1")
    %q:3 = shoal.onnx "Split"(%u) {axis = 2 : i64, split = array<i64: 8, 8, 8>} : (tensor<4x4x24xf32>) -> (tensor<4x4x8xf32>, tensor<4x4x8xf32>, tensor<4x4x8xf32>) loc("/attn/Split")
    %m = shoal.mul %q#0, %q#1 : (tensor<4x4x8xf32>, tensor<4x4x8xf32>) -> tensor<4x4x8xf32> loc("/attn/Mul")
    %y = shoal.add %m, %q#2 : (tensor<4x4x8xf32>, tensor<4x4x8xf32>) -> tensor<4x4x8xf32> loc("/attn/Add")
    return %y : tensor<4x4x8xf32>
  }
}
