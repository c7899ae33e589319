// Sequence parallelism with a multi-query attention computed along its
// queries (GPTBigCode's: one key/value head, the heads merged into the
// queries, [batch, queries * heads, head size]): the keys and values are
// gathered along the sequence, so their gradients are partial sums over tp.
// They are summed and scattered along the keys' sequence (reduce_scatter),
// not all-reduced: the value gradient [batch, keys, head size] along
// dimension 1, the transposed key gradient [batch, head size, keys] along
// dimension 2, found by following the keys' sequence from the split hidden
// states rather than by its size. No rank-3 value is all-reduced, and the
// key/value projection's input gradient is computed on the local sequence
// (no local_slice after it). (The test's output is taken for logits: their
// vocabulary-parallel cross-entropy all-reduces its statistics, rank 3.)
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2_sp.yaml" --shoal-autodiff --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition 2>&1 | FileCheck %s

// CHECK: shoal.vocab_cross_entropy_grad
// CHECK-NOT: shoal.all_reduce {{.*}} : tensor<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}xf32>
// CHECK: %[[DV:.*]] = shoal.matmul %{{.*}}, %{{.*}} {shoal.phase = "backward"} : (tensor<2x8x8xf32>, tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
// CHECK-NEXT: %[[DVS:.*]] = shoal.reduce_scatter %[[DV]] dim 1 over ["tp"] {{.*}} : (tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NOT: shoal.all_reduce {{.*}} : tensor<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}xf32>
// CHECK: %[[DK:.*]] = shoal.matmul %{{.*}}, %{{.*}} {shoal.phase = "backward"} : (tensor<2x4x8xf32>, tensor<2x8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[DKS:.*]] = shoal.reduce_scatter %[[DK]] dim 2 over ["tp"] {{.*}} : (tensor<2x4x8xf32>) -> tensor<2x4x4xf32>
// CHECK-NOT: shoal.all_reduce {{.*}} : tensor<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}xf32>
// CHECK: %[[DKT:.*]] = shoal.transpose %[[DKS]] {{.*}} -> tensor<2x4x4xf32>
// CHECK-NEXT: %[[DKV:.*]] = shoal.onnx "Concat"(%[[DKT]], %[[DVS]]) {{.*}} -> tensor<2x4x8xf32>
// CHECK-NOT: local_slice
// CHECK: shoal.gemm %{{.*}}, %{{.*}} {shoal.phase = "backward", transB = true} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
// CHECK-NOT: shoal.all_reduce {{.*}} : tensor<{{[0-9]+}}x{{[0-9]+}}x{{[0-9]+}}xf32>
// CHECK-NOT: local_slice

module {
  func.func @main(%e: tensor<2x8x8xf32> {shoal.name = "x"}) -> (tensor<2x8x8xf32> {shoal.name = "y"}) {
    %g = shoal.weight "ln.weight" : tensor<8xf32> loc("ln.weight")
    %gb = shoal.weight "ln.bias" : tensor<8xf32> loc("ln.bias")
    %x = shoal.layer_norm %e, %g, %gb {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x8x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x8xf32> loc("/h.0/ln/LayerNormalization")
    %wq = shoal.weight "q" : tensor<8x8xf32> loc("q")
    %q = shoal.matmul %x, %wq : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32> loc("/h.0/attn/q/MatMul")
    %wkv = shoal.weight "kv" : tensor<8x8xf32> loc("kv")
    %kv = shoal.matmul %x, %wkv : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32> loc("/h.0/attn/kv/MatMul")
    %k, %v = shoal.onnx "Split"(%kv) {axis = -1 : i64, split = array<i64: 4, 4>} : (tensor<2x8x8xf32>) -> (tensor<2x8x4xf32>, tensor<2x8x4xf32>) loc("/h.0/attn/Split")
    %kt = shoal.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<2x8x4xf32>) -> tensor<2x4x8xf32> loc("/h.0/attn/Transpose")
    %qm = shoal.reshape %q : (tensor<2x8x8xf32>) -> tensor<2x16x4xf32> loc("/h.0/attn/Reshape")
    %s = shoal.matmul %qm, %kt : (tensor<2x16x4xf32>, tensor<2x4x8xf32>) -> tensor<2x16x8xf32> loc("/h.0/attn/MatMul")
    %p = shoal.softmax %s {axis = -1 : i64} : (tensor<2x16x8xf32>) -> tensor<2x16x8xf32> loc("/h.0/attn/Softmax")
    %c = shoal.matmul %p, %v : (tensor<2x16x8xf32>, tensor<2x8x4xf32>) -> tensor<2x16x4xf32> loc("/h.0/attn/MatMul_1")
    %cm = shoal.reshape %c : (tensor<2x16x4xf32>) -> tensor<2x8x8xf32> loc("/h.0/attn/Reshape_1")
    %wo = shoal.weight "o" : tensor<8x8xf32> loc("o")
    %o = shoal.matmul %cm, %wo : (tensor<2x8x8xf32>, tensor<8x8xf32>) -> tensor<2x8x8xf32> loc("/h.0/attn/o/MatMul")
    %r = shoal.add %e, %o : (tensor<2x8x8xf32>, tensor<2x8x8xf32>) -> tensor<2x8x8xf32> loc("/h.0/Add")
    return %r : tensor<2x8x8xf32>
  }
}
