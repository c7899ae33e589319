// shoal-fused-weight-views leaves a product of gathered matrices whole when
// its users take only some of its equal pieces (Slices of the first and the
// last third): computed by pieces, the middle block would be loaded and
// multiplied for nothing, and reported as never trained.
// RUN: shoal-opt %s --shoal-fused-weight-views | FileCheck %s

// CHECK: shoal.weight "gate_up" : tensor<3x48x8xf32>
// CHECK: shoal.gather {{.*}} -> tensor<6x48x8xf32>
// CHECK: shoal.matmul {{.*}} -> tensor<6x48x1xf32>
// CHECK-NOT: gate_up[

module attributes {shoal.source = "/models/moe.onnx"} {
  func.func @main(%x: tensor<6x8xf32> {shoal.name = "x"}, %ids: tensor<6xi64> {shoal.name = "expert_ids"}) -> (tensor<6x16xf32> {shoal.name = "y"}) {
    %gu = shoal.weight "gate_up" : tensor<3x48x8xf32> loc("gate_up")
    %g = shoal.gather %gu, %ids : (tensor<3x48x8xf32>, tensor<6xi64>) -> tensor<6x48x8xf32> loc("/experts/Gather")
    %xc = shoal.reshape %x : (tensor<6x8xf32>) -> tensor<6x8x1xf32> loc("/experts/Unsqueeze")
    %p = shoal.matmul %g, %xc : (tensor<6x48x8xf32>, tensor<6x8x1xf32>) -> tensor<6x48x1xf32> loc("/experts/MatMul")
    %p2 = shoal.reshape %p : (tensor<6x48x1xf32>) -> tensor<6x48xf32> loc("/experts/Squeeze")
    %a = shoal.onnx "Slice"(%p2) {starts = array<i64: 0>, ends = array<i64: 16>, axes = array<i64: 1>} : (tensor<6x48xf32>) -> tensor<6x16xf32> loc("/experts/Slice")
    %b = shoal.onnx "Slice"(%p2) {starts = array<i64: 32>, ends = array<i64: 48>, axes = array<i64: 1>} : (tensor<6x48xf32>) -> tensor<6x16xf32> loc("/experts/Slice_1")
    %y = shoal.mul %a, %b : (tensor<6x16xf32>, tensor<6x16xf32>) -> tensor<6x16xf32> loc("/experts/Mul")
    return %y : tensor<6x16xf32>
  }
}
