// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding | FileCheck %s
// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs --shoal-propagate-sharding --shoal-partition | FileCheck %s --check-prefix=PART

// nn.Linear as torch.onnx.export writes it in training mode without
// constant folding: MatMul(x, Transpose(W)), W [out, in]. The transpose is a
// weight view: the product splits it as it would split a direct weight, and
// the weight takes the matching block split of its own [out, in] layout
// (Megatron's column-parallel fc1: rows of W1; row-parallel fc2: columns of
// W2), with one all_reduce after fc2.

// CHECK-LABEL: shoal.task_graph "model" split(2)
// CHECK: shoal.weight "fc1.weight" {shoal.sharding = [#shoal.sharding<{{\[\[}}"tp"], []]>]} : tensor<128x32xf32>
// CHECK: shoal.transpose {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>]
// CHECK: shoal.weight "fc2.weight" {shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>]} : tensor<32x128xf32>
// CHECK: shoal.transpose {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}"tp"], []]>]

// PART-LABEL: shoal.task_graph "model" split(2)
// PART: shoal.weight "fc1.weight" {{.*}} : tensor<64x32xf32>
// PART: shoal.transpose {{.*}} : (tensor<64x32xf32>) -> tensor<32x64xf32>
// PART: shoal.weight "fc2.weight" {{.*}} : tensor<32x64xf32>
// PART: shoal.transpose {{.*}} : (tensor<32x64xf32>) -> tensor<64x32xf32>
// PART: shoal.all_reduce {{.*}} over ["tp"]
// PART-NOT: shoal.all_reduce
// PART-NOT: shoal.all_gather {{.*}}tensor<8x128xf32>

module attributes {shoal.source = "/models/mlp.onnx"} {
  func.func @main(%x: tensor<8x32xf32> {shoal.name = "x"}) -> (tensor<8x32xf32> {shoal.name = "y"}) {
    %w1 = shoal.weight "fc1.weight" : tensor<128x32xf32> loc("fc1.weight")
    %t1 = shoal.transpose %w1 {perm = array<i64: 1, 0>} : (tensor<128x32xf32>) -> tensor<32x128xf32> loc("/fc1/Transpose")
    %h = shoal.matmul %x, %t1 : (tensor<8x32xf32>, tensor<32x128xf32>) -> tensor<8x128xf32> loc("/fc1/MatMul")
    %g = shoal.relu %h : (tensor<8x128xf32>) -> tensor<8x128xf32> loc("/act/Relu")
    %w2 = shoal.weight "fc2.weight" : tensor<32x128xf32> loc("fc2.weight")
    %t2 = shoal.transpose %w2 {perm = array<i64: 1, 0>} : (tensor<32x128xf32>) -> tensor<128x32xf32> loc("/fc2/Transpose")
    %y = shoal.matmul %g, %t2 : (tensor<8x128xf32>, tensor<128x32xf32>) -> tensor<8x32xf32> loc("/fc2/MatMul")
    return %y : tensor<8x32xf32>
  }
}
