// The parallelism report of fused-weight-blocks.mlir's multi-query
// attention trained under split(2): the key and value blocks, whole on each
// rank beside the split query heads, get a note (replicated by design), not
// a warning.
// RUN: shoal-opt %s --shoal-fused-weight-views --shoal-autodiff="loss=mse output=y" --shoal-optimizer --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null 2>/dev/null | FileCheck %s

// CHECK-NOT: warning:
// CHECK: note: TaskGraph "attn": 2 matrix products, /attn/qkv/MatMul[8:12] to /attn/qkv/MatMul[12:16], compute their blocks of fused projections whole, while the projections' other blocks are split: the 2 ranks of a tp group all compute them (replicated work, by design: key/value heads beside split query heads)
// CHECK-NOT: warning:
// CHECK: total: {{.*}}; 0 warnings

module attributes {shoal.scopes = [#shoal.scope<"attn", split, 2>]} {
  func.func @mqa(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "qkv.weight" : tensor<8x16xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/attn/qkv/MatMul")
    %r = shoal.reshape %p {shoal.scope = "attn"} : (tensor<2x4x16xf32>) -> tensor<2x4x4x4xf32> loc("/attn/Reshape")
    %q = shoal.onnx "Slice"(%r) {axes = array<i64: 2>, ends = array<i64: -2>, starts = array<i64: 0>, steps = array<i64: 1>} {shoal.scope = "attn"} : (tensor<2x4x4x4xf32>) -> tensor<2x4x2x4xf32> loc("/attn/Slice")
    %i2 = shoal.constant dense<-2> : tensor<1xi64>
    %k = shoal.gather %r, %i2 {axis = 2 : i64, shoal.scope = "attn"} : (tensor<2x4x4x4xf32>, tensor<1xi64>) -> tensor<2x4x1x4xf32> loc("/attn/Gather")
    %i1 = shoal.constant dense<-1> : tensor<1xi64>
    %v = shoal.gather %r, %i1 {axis = 2 : i64, shoal.scope = "attn"} : (tensor<2x4x4x4xf32>, tensor<1xi64>) -> tensor<2x4x1x4xf32> loc("/attn/Gather_1")
    %qt = shoal.transpose %q {perm = array<i64: 0, 2, 1, 3>, shoal.scope = "attn"} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/Transpose")
    %kt = shoal.transpose %k {perm = array<i64: 0, 2, 3, 1>, shoal.scope = "attn"} : (tensor<2x4x1x4xf32>) -> tensor<2x1x4x4xf32> loc("/attn/Transpose_1")
    %vt = shoal.transpose %v {perm = array<i64: 0, 2, 1, 3>, shoal.scope = "attn"} : (tensor<2x4x1x4xf32>) -> tensor<2x1x4x4xf32> loc("/attn/Transpose_2")
    %s = shoal.matmul %qt, %kt {shoal.scope = "attn"} : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/MatMul")
    %a = shoal.softmax %s {axis = -1 : i64, shoal.scope = "attn"} : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/Softmax")
    %o = shoal.matmul %a, %vt {shoal.scope = "attn"} : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/attn/MatMul_1")
    %ot = shoal.transpose %o {perm = array<i64: 0, 2, 1, 3>, shoal.scope = "attn"} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32> loc("/attn/Transpose_3")
    %m = shoal.reshape %ot {shoal.scope = "attn"} : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32> loc("/attn/Reshape_1")
    %wo = shoal.weight "o.weight" : tensor<8x8xf32>
    %y = shoal.matmul %m, %wo {shoal.scope = "attn"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/attn/o/MatMul")
    return %y : tensor<2x4x8xf32>
  }
}
