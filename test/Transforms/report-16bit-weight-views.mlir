// The report's replicated-work check in a 16-bit plan: an nn.Linear
// exported in training mode reads Transpose(W), which shoal-mixed-precision
// makes Transpose(Cast(W)). The product (kept whole, as a softmax needs its
// output whole) is named as replicated work in the bf16 plan as in the
// float32 one, where it was silently left out.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null | FileCheck %s
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-mixed-precision="precision=bf16" --shoal-report -o %t.mlir | FileCheck %s
// RUN: FileCheck %s --check-prefix=CAST < %t.mlir
// CAST: %[[C:.*]] = shoal.cast {{.*}}shoal.precision_cast{{.*}} -> tensor<4x8xbf16>
// CAST: shoal.transpose %[[C]]

// CHECK: warning: TaskGraph "model": /lin/MatMul splits no weight over tp: a column split would be gathered at once, as node '/lin/Softmax' needs its output whole before any product contracts it; the 2 ranks of a tp group all compute it whole (replicated work)
// CHECK: total: 1 all_reduce{{.*}}; 1 warning

module attributes {shoal.source = "/models/lin.onnx"} {
  func.func @main(%x: tensor<6x8xf32> {shoal.name = "x"}) -> (tensor<6x4xf32> {shoal.name = "y"}, tensor<6x8xf32> {shoal.name = "h"}) {
    %w = shoal.weight "lin.weight" : tensor<4x8xf32> loc("lin.weight")
    %wt = shoal.transpose %w {perm = array<i64: 1, 0>} : (tensor<4x8xf32>) -> tensor<8x4xf32> loc("/lin/Transpose")
    %p = shoal.matmul %x, %wt : (tensor<6x8xf32>, tensor<8x4xf32>) -> tensor<6x4xf32> loc("/lin/MatMul")
    %y = shoal.softmax %p {axis = -1 : i64} : (tensor<6x4xf32>) -> tensor<6x4xf32> loc("/lin/Softmax")
    %w1 = shoal.weight "fc1.weight" : tensor<8x16xf32> loc("fc1.weight")
    %h1 = shoal.matmul %x, %w1 : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32> loc("/fc1/MatMul")
    %a = shoal.relu %h1 : (tensor<6x16xf32>) -> tensor<6x16xf32> loc("/act/Relu")
    %w2 = shoal.weight "fc2.weight" : tensor<16x8xf32> loc("fc2.weight")
    %h = shoal.matmul %a, %w2 : (tensor<6x16xf32>, tensor<16x8xf32>) -> tensor<6x8xf32> loc("/fc2/MatMul")
    return %y, %h : tensor<6x4xf32>, tensor<6x8xf32>
  }
}
