// The report's replicated-work check under split: a product whose operand
// is a stack of experts' matrices gathered per token by routing ids
// (transformers 5's batched_mm experts, `gate_up_proj[expert_ids]`, a
// Gather of a rank-3 weight) computes whole on every tp rank when that
// weight is not split, and says so like a product of the weight itself
// (here it is kept whole because a softmax needs its output whole at once;
// sharding-gathered-experts.mlir splits such matrices). A
// Gather of an embedding table (rank 2) is a lookup, not a product's
// weight, and is not counted; the MLP beside them is split.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-report -o /dev/null | FileCheck %s

// A 16-bit plan reads the weights through casts (shoal-mixed-precision):
// the report looks through them and warns the same.
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition --shoal-mixed-precision="precision=bf16" --shoal-report -o %t.mlir | FileCheck %s
// RUN: FileCheck %s --check-prefix=CAST < %t.mlir
// CAST: shoal.cast {{.*}}shoal.precision_cast{{.*}} -> tensor<3x8x4xbf16>

// CHECK: warning: TaskGraph "model": /experts/MatMul splits no weight over tp: a column split would be gathered at once, as node '/experts/Softmax' needs its output whole before any product contracts it; the 2 ranks of a tp group all compute it whole (replicated work)
// CHECK-NOT: splits no weight
// CHECK: total: 1 all_reduce{{.*}}; 1 warning

module attributes {shoal.source = "/models/experts.onnx"} {
  func.func @main(%x: tensor<6x8xf32> {shoal.name = "x"}, %ids: tensor<6xi64> {shoal.name = "expert_ids"}) -> (tensor<6x4xf32> {shoal.name = "y"}, tensor<6x8xf32> {shoal.name = "e"}, tensor<6x8xf32> {shoal.name = "h"}) {
    %w = shoal.weight "experts.weight" : tensor<3x8x4xf32> loc("experts.weight")
    %g = shoal.gather %w, %ids : (tensor<3x8x4xf32>, tensor<6xi64>) -> tensor<6x8x4xf32> loc("/experts/Gather")
    %x3 = shoal.reshape %x : (tensor<6x8xf32>) -> tensor<6x1x8xf32> loc("/experts/Unsqueeze")
    %p = shoal.matmul %x3, %g : (tensor<6x1x8xf32>, tensor<6x8x4xf32>) -> tensor<6x1x4xf32> loc("/experts/MatMul")
    %r = shoal.reshape %p : (tensor<6x1x4xf32>) -> tensor<6x4xf32> loc("/experts/Squeeze")
    %y = shoal.softmax %r {axis = -1 : i64} : (tensor<6x4xf32>) -> tensor<6x4xf32> loc("/experts/Softmax")
    %t = shoal.weight "emb.weight" : tensor<3x8xf32> loc("emb.weight")
    %e = shoal.gather %t, %ids : (tensor<3x8xf32>, tensor<6xi64>) -> tensor<6x8xf32> loc("/emb/Gather")
    %w1 = shoal.weight "fc1.weight" : tensor<8x16xf32> loc("fc1.weight")
    %h1 = shoal.matmul %x, %w1 : (tensor<6x8xf32>, tensor<8x16xf32>) -> tensor<6x16xf32> loc("/fc1/MatMul")
    %a = shoal.relu %h1 : (tensor<6x16xf32>) -> tensor<6x16xf32> loc("/act/Relu")
    %w2 = shoal.weight "fc2.weight" : tensor<16x8xf32> loc("fc2.weight")
    %h = shoal.matmul %a, %w2 : (tensor<6x16xf32>, tensor<16x8xf32>) -> tensor<6x8xf32> loc("/fc2/MatMul")
    return %y, %e, %h : tensor<6x4xf32>, tensor<6x8xf32>, tensor<6x8xf32>
  }
}
