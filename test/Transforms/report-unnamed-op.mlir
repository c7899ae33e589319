// A TaskGraph that holds only an optimizer update (here the update of a
// fused projection viewed as blocks, in a TaskGraph of its own) has no
// ONNX node to name: the replicated-work warning names the op's kind
// (once an empty name: "all compute  and the rest whole").
// RUN: shoal-opt %s --shoal-fused-weight-views --shoal-autodiff="loss=mse output=y" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null 2>/dev/null | FileCheck %s

// CHECK: warning: TaskGraph "blk": split(2) but no weight or input is split over tp: the 2 ranks of a tp group all compute /fc/MatMul and the rest whole (replicated work)
// CHECK: warning: TaskGraph "blk.1": split(2) but no weight or input is split over tp: the 2 ranks of a tp group all compute 'shoal.adamw' and the rest whole (replicated work)

module attributes {shoal.scopes = [#shoal.scope<"blk", split, 2>]} {
  func.func @f(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "fc.weight" : tensor<8x16xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/fc/MatMul")
    %a = shoal.onnx "Slice"(%p) {axes = array<i64: 2>, ends = array<i64: 8>, starts = array<i64: 0>, steps = array<i64: 1>} {shoal.scope = "blk"} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32> loc("/Slice")
    %b = shoal.onnx "Slice"(%p) {axes = array<i64: 2>, ends = array<i64: 16>, starts = array<i64: 8>, steps = array<i64: 1>} {shoal.scope = "blk"} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32> loc("/Slice_1")
    %wo = shoal.weight "o.weight" : tensor<8x8xf32>
    %y1 = shoal.matmul %a, %wo {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/o/MatMul")
    %s = shoal.softmax %b {axis = -1 : i64, shoal.scope = "blk"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/Softmax")
    %y = shoal.add %y1, %s {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/Add")
    return %y : tensor<2x4x8xf32>
  }
}
