// shoal-propagate-sharding under split(2), layouts that gather nothing
// inside a layer:
// - @lone_projection: a projection at the scope's edge (ALBERT's embedding
//   projection, ViT's patch convolution) whose output a LayerNorm needs
//   whole before any product contracts it stays whole (and says why in
//   shoal.tp_kept_whole); the MLP after it pairs column then row.
// - @merged_heads: scores of [batch * heads, T, T] plus a constant of that
//   shape (a baddbmm's zeros) keep the head split: the constant takes the
//   strided split (one block of heads per sample).
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// CHECK-LABEL: func.func @lone_projection
// CHECK: shoal.weight "proj.weight" {shoal.sharding = [#shoal.sharding<{{\[}}[], []]>]}
// CHECK: shoal.matmul {{.*}}shoal.tp_kept_whole = "node '/ln/LayerNormalization'"
// CHECK: shoal.weight "fc1.weight" {shoal.sharding = [#shoal.sharding<{{\[}}[], ["tp"]]>]}
// CHECK: shoal.weight "fc2.weight" {shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]}
// PART-LABEL: func.func @lone_projection
// PART-NOT: shoal.all_gather
// PART: shoal.all_reduce
// PART-NOT: shoal.all_gather
// PART-LABEL: func.func @merged_heads

// CHECK-LABEL: func.func @merged_heads
// CHECK: shoal.add {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["tp"], [], []], outer = [2, 1, 1]>]
// PART-NOT: shoal.all_gather
// PART: return

module {
  func.func @lone_projection(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x16xf32> {shoal.name = "y"}) {
    %wp = shoal.weight "proj.weight" : tensor<8x16xf32> loc("proj.weight")
    %h = shoal.matmul %x, %wp : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/proj/MatMul")
    %g = shoal.weight "ln.weight" : tensor<16xf32> loc("ln.weight")
    %bt = shoal.weight "ln.bias" : tensor<16xf32> loc("ln.bias")
    %n = shoal.layer_norm %h, %g, %bt : (tensor<2x4x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32> loc("/ln/LayerNormalization")
    %w1 = shoal.weight "fc1.weight" : tensor<16x32xf32> loc("fc1.weight")
    %a = shoal.matmul %n, %w1 : (tensor<2x4x16xf32>, tensor<16x32xf32>) -> tensor<2x4x32xf32> loc("/fc1/MatMul")
    %r = shoal.relu %a : (tensor<2x4x32xf32>) -> tensor<2x4x32xf32> loc("/act/Relu")
    %w2 = shoal.weight "fc2.weight" : tensor<32x16xf32> loc("fc2.weight")
    %o = shoal.matmul %r, %w2 : (tensor<2x4x32xf32>, tensor<32x16xf32>) -> tensor<2x4x16xf32> loc("/fc2/MatMul")
    %y = shoal.add %n, %o : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32> loc("/res/Add")
    return %y : tensor<2x4x16xf32>
  }

  func.func @merged_heads(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %wq = shoal.weight "q.weight" : tensor<8x8xf32> loc("q.weight")
    %q = shoal.matmul %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/q/MatMul")
    %q4 = shoal.reshape %q : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32> loc("/q/Reshape")
    %qh = shoal.transpose %q4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32> loc("/q/Transpose")
    %qm = shoal.reshape %qh : (tensor<2x2x4x4xf32>) -> tensor<4x4x4xf32> loc("/q/Merge")
    %kt = shoal.transpose %qm {perm = array<i64: 0, 2, 1>} : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32> loc("/k/Transpose")
    %s = shoal.matmul %qm, %kt : (tensor<4x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32> loc("/scores/MatMul")
    %z = shoal.constant dense<0.0> : tensor<4x4x4xf32> loc("/zeros")
    %sz = shoal.add %s, %z : (tensor<4x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32> loc("/baddbmm/Add")
    %p = shoal.softmax %sz : (tensor<4x4x4xf32>) -> tensor<4x4x4xf32> loc("/Softmax")
    %c = shoal.matmul %p, %qm : (tensor<4x4x4xf32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32> loc("/ctx/MatMul")
    %c4 = shoal.reshape %c : (tensor<4x4x4xf32>) -> tensor<2x2x4x4xf32> loc("/ctx/Split")
    %ct = shoal.transpose %c4 {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x4xf32>) -> tensor<2x4x2x4xf32> loc("/ctx/Transpose")
    %cm = shoal.reshape %ct : (tensor<2x4x2x4xf32>) -> tensor<2x4x8xf32> loc("/ctx/Reshape")
    %wo = shoal.weight "o.weight" : tensor<8x8xf32> loc("o.weight")
    %y = shoal.matmul %cm, %wo : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32> loc("/o/MatMul")
    return %y : tensor<2x4x8xf32>
  }
}
