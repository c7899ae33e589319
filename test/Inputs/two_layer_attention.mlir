// Two attention-like layers (/h.0/..., /h.1/...) and a head, with ONNX
// node names as locations: the input of test/Transforms/recompute.mlir.
module {
  func.func @main(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %c = shoal.constant dense<5.000000e-01> : tensor<f32> loc("/Constant")
    %wq0 = shoal.weight "h.0.q" : tensor<8x8xf32> loc("h.0.q")
    %q0 = shoal.matmul %x, %wq0 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/h.0/q/MatMul")
    %kt0 = shoal.transpose %q0 {perm = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32> loc("/h.0/Transpose")
    %s0 = shoal.matmul %q0, %kt0 : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32> loc("/h.0/MatMul")
    %m0 = shoal.mul %s0, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32> loc("/h.0/Mul")
    %p0 = shoal.softmax %m0 {axis = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32> loc("/h.0/Softmax")
    %o0 = shoal.matmul %p0, %q0 : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.0/MatMul_1")
    %t0 = shoal.tanh %o0 : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.0/Tanh")
    %r0 = shoal.add %x, %t0 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.0/Add")
    %wq1 = shoal.weight "h.1.q" : tensor<8x8xf32> loc("h.1.q")
    %q1 = shoal.matmul %r0, %wq1 : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/h.1/q/MatMul")
    %kt1 = shoal.transpose %q1 {perm = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32> loc("/h.1/Transpose")
    %s1 = shoal.matmul %q1, %kt1 : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32> loc("/h.1/MatMul")
    %m1 = shoal.mul %s1, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32> loc("/h.1/Mul")
    %p1 = shoal.softmax %m1 {axis = -1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32> loc("/h.1/Softmax")
    %o1 = shoal.matmul %p1, %q1 : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.1/MatMul_1")
    %t1 = shoal.tanh %o1 : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.1/Tanh")
    %r1 = shoal.add %r0, %t1 : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32> loc("/h.1/Add")
    %wo = shoal.weight "head" : tensor<8x8xf32> loc("head")
    %y = shoal.matmul %r1, %wo : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/head/MatMul")
    return %y : tensor<2x4x8xf32>
  }
}
