// transformers 5's batched_mm experts: each token's fused gate/up matrices
// are looked up by its expert id (`gate_up_proj[ids]`, a Gather of a
// [experts, 2 * inner, hidden] stack), multiplied by the token as a column
// ([tokens, 2 * inner, 1]), squeezed and Split into gate and up.
// shoal-fused-weight-views computes such a product by pieces: each reads
// the lookup (by the same ids) of its block of the stack, named after the
// block, and no view of the stack is made (the lookup would read it).
// Under split(2), shoal-propagate-sharding then splits each piece's rows
// over tp, and the down projection's columns (Megatron-LM's expert tensor
// parallelism with a fused gate/up): one all_reduce, no gather.
// RUN: shoal-opt %s --shoal-fused-weight-views --mlir-print-debuginfo | FileCheck %s
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-fused-weight-views --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report 2>&1 | FileCheck %s --check-prefix=PART

// CHECK: %[[G:.*]] = shoal.weight "gate_up[:, 0:16]" {shoal.source_range = {axis = 1 : i64, initializer = "gate_up", shape = array<i64: 3, 32, 8>, start = 0 : i64}} : tensor<3x16x8xf32>
// CHECK: %[[GL:.*]] = shoal.gather %[[G]], %{{.*}} : (tensor<3x16x8xf32>, tensor<6xi64>) -> tensor<6x16x8xf32>
// CHECK: shoal.matmul %[[GL]], %{{.*}} : (tensor<6x16x8xf32>, tensor<6x8x1xf32>) -> tensor<6x16x1xf32>
// CHECK: shoal.reshape {{.*}} : (tensor<6x16x1xf32>) -> tensor<6x16xf32>
// CHECK: %[[U:.*]] = shoal.weight "gate_up[:, 16:32]" {{.*}}start = 16 : i64}} : tensor<3x16x8xf32>
// CHECK: shoal.gather %[[U]], %{{.*}} : (tensor<3x16x8xf32>, tensor<6xi64>) -> tensor<6x16x8xf32>
// CHECK-NOT: "Split"
// CHECK-NOT: tensor<6x32
// CHECK: return
// CHECK: loc("/experts/Gather[0:16]")
// CHECK: loc("/experts/MatMul[16:32]")

// PART: all_reduce over tp at /experts/MatMul_1: partial sums of a contraction split over tp
// PART-NOT: all_gather
// PART: total: 1 all_reduce; 0 warnings
// PART: shoal.weight "gate_up[:, 0:16]" {shoal.global_shape = array<i64: 3, 16, 8>, shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"], []]>]
// PART: shoal.weight "gate_up[:, 16:32]" {shoal.global_shape = array<i64: 3, 16, 8>, shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"], []]>]
// PART: shoal.weight "down" {shoal.global_shape = array<i64: 3, 8, 16>, shoal.sharding = [#shoal.sharding<{{\[}}[], [], ["tp"]]>]

module attributes {shoal.source = "/models/moe.onnx"} {
  func.func @main(%x: tensor<6x8xf32> {shoal.name = "x"}, %ids: tensor<6xi64> {shoal.name = "expert_ids"}) -> (tensor<6x8xf32> {shoal.name = "y"}) {
    %gu = shoal.weight "gate_up" : tensor<3x32x8xf32> loc("gate_up")
    %g = shoal.gather %gu, %ids : (tensor<3x32x8xf32>, tensor<6xi64>) -> tensor<6x32x8xf32> loc("/experts/Gather")
    %xc = shoal.reshape %x : (tensor<6x8xf32>) -> tensor<6x8x1xf32> loc("/experts/Unsqueeze")
    %p = shoal.matmul %g, %xc : (tensor<6x32x8xf32>, tensor<6x8x1xf32>) -> tensor<6x32x1xf32> loc("/experts/MatMul")
    %p2 = shoal.reshape %p : (tensor<6x32x1xf32>) -> tensor<6x32xf32> loc("/experts/Squeeze")
    %s:2 = shoal.onnx "Split"(%p2) {axis = 1 : i64} : (tensor<6x32xf32>) -> (tensor<6x16xf32>, tensor<6x16xf32>) loc("/experts/Split")
    %a = shoal.sigmoid %s#0 : (tensor<6x16xf32>) -> tensor<6x16xf32> loc("/experts/Sigmoid")
    %h = shoal.mul %a, %s#1 : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32> loc("/experts/Mul")
    %hc = shoal.reshape %h : (tensor<6x16xf32>) -> tensor<6x16x1xf32> loc("/experts/Unsqueeze_1")
    %dw = shoal.weight "down" : tensor<3x8x16xf32> loc("down")
    %d = shoal.gather %dw, %ids : (tensor<3x8x16xf32>, tensor<6xi64>) -> tensor<6x8x16xf32> loc("/experts/Gather_1")
    %o = shoal.matmul %d, %hc : (tensor<6x8x16xf32>, tensor<6x16x1xf32>) -> tensor<6x8x1xf32> loc("/experts/MatMul_1")
    %y = shoal.reshape %o : (tensor<6x8x1xf32>) -> tensor<6x8xf32> loc("/experts/Squeeze_1")
    return %y : tensor<6x8xf32>
  }
}
