// The report's replicated-work check under sequence_parallel: a product
// whose weight stays whole but whose activation arrives split along the
// sequence over tp (a router, or a mixture of experts, on the local
// tokens) computes its block of the rows on each rank: no replicated work,
// no warning. The same scope without sequence_parallel computes the router
// whole on every rank and is warned.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2_sp.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null | FileCheck %s --check-prefix=SP
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null | FileCheck %s --check-prefix=TP

// SP: local_slice dim 1 over tp
// SP-NOT: replicated work
// SP: 0 warnings
// TP: warning: {{.*}}/router/MatMul splits no weight over tp{{.*}}(replicated work)

module attributes {shoal.source = "/models/router.onnx"} {
  func.func @main(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x3xf32> {shoal.name = "p"}, tensor<2x4x8xf32> {shoal.name = "h"}) {
    %g = shoal.weight "ln.weight" : tensor<8xf32> loc("ln.weight")
    %b = shoal.weight "ln.bias" : tensor<8xf32> loc("ln.bias")
    %n = shoal.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32> loc("/ln/LayerNormalization")
    %w = shoal.weight "router.weight" : tensor<8x3xf32> loc("router.weight")
    %l = shoal.matmul %n, %w : (tensor<2x4x8xf32>, tensor<8x3xf32>) -> tensor<2x4x3xf32> loc("/router/MatMul")
    %p = shoal.softmax %l {axis = -1 : i64} : (tensor<2x4x3xf32>) -> tensor<2x4x3xf32> loc("/router/Softmax")
    %w1 = shoal.weight "fc1.weight" : tensor<8x16xf32> loc("fc1.weight")
    %h1 = shoal.matmul %n, %w1 : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32> loc("/fc1/MatMul")
    %a = shoal.relu %h1 : (tensor<2x4x16xf32>) -> tensor<2x4x16xf32> loc("/act/Relu")
    %w2 = shoal.weight "fc2.weight" : tensor<16x8xf32> loc("fc2.weight")
    %h = shoal.matmul %a, %w2 : (tensor<2x4x16xf32>, tensor<16x8xf32>) -> tensor<2x4x8xf32> loc("/fc2/MatMul")
    return %p, %h : tensor<2x4x3xf32>, tensor<2x4x8xf32>
  }
}
