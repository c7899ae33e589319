// A fused projection cut in blocks whose *wider* block is kept whole beside
// split narrower ones (here the first block feeds a softmax over its
// columns, so its column split would be gathered at once) is replicated
// work like any whole product: warned, with the reason. Only a whole block
// narrower than its widest split sibling (a multi-query key/value head beside
// split query heads, fused-weight-blocks-report.mlir) gets the
// by-design note.
// RUN: shoal-opt %s --shoal-fused-weight-views --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null 2>&1 | FileCheck %s

// CHECK-NOT: note:
// CHECK: warning: TaskGraph "blk": /qkv/MatMul[0:8] splits no weight over tp: a column split would be gathered at once, as node '/Softmax' needs its output whole before any product contracts it; the 2 ranks of a tp group all compute it whole (replicated work)
// CHECK-NOT: note:
// CHECK: total: {{.*}}; 1 warning

module attributes {shoal.scopes = [#shoal.scope<"blk", split, 2>]} {
  func.func @f(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "qkv.weight" : tensor<8x16xf32>
    %p = shoal.matmul %x, %w {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/qkv/MatMul")
    %q = shoal.onnx "Slice"(%p) {axes = array<i64: 2>, ends = array<i64: 8>, starts = array<i64: 0>, steps = array<i64: 1>} {shoal.scope = "blk"} : (tensor<2x4x16xf32>) -> tensor<2x4x8xf32> loc("/Slice")
    %k = shoal.onnx "Slice"(%p) {axes = array<i64: 2>, ends = array<i64: 12>, starts = array<i64: 8>, steps = array<i64: 1>} {shoal.scope = "blk"} : (tensor<2x4x16xf32>) -> tensor<2x4x4xf32> loc("/Slice_1")
    %v = shoal.onnx "Slice"(%p) {axes = array<i64: 2>, ends = array<i64: 16>, starts = array<i64: 12>, steps = array<i64: 1>} {shoal.scope = "blk"} : (tensor<2x4x16xf32>) -> tensor<2x4x4xf32> loc("/Slice_2")
    %s = shoal.softmax %q {axis = -1 : i64, shoal.scope = "blk"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/Softmax")
    %wq = shoal.weight "q_out.weight" : tensor<8x8xf32>
    %yq = shoal.matmul %s, %wq {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/q_out/MatMul")
    %wk = shoal.weight "k_out.weight" : tensor<4x8xf32>
    %yk = shoal.matmul %k, %wk {shoal.scope = "blk"} : (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32> loc("/k_out/MatMul")
    %wv = shoal.weight "v_out.weight" : tensor<4x8xf32>
    %yv = shoal.matmul %v, %wv {shoal.scope = "blk"} : (tensor<2x4x4xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32> loc("/v_out/MatMul")
    %a = shoal.add %yq, %yk {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/Add")
    %y = shoal.add %a, %yv {shoal.scope = "blk"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/Add_1")
    return %y : tensor<2x4x8xf32>
  }
}
