// A training compile fuses the attention chain before shoal-autodiff
// (shoal-fuse chains=attention), and shoal.attention's gradient rule is one
// shoal.attention_grad of q, kt, v and the mask, which recomputes the
// probabilities: the backward reads no softmax output.
// RUN: shoal-opt %s --split-input-file --shoal-fuse="chains=attention" --shoal-autodiff="loss=mse frozen=mask" | FileCheck %s
// RUN: shoal-opt %s --split-input-file --shoal-fuse="chains=attention" --shoal-autodiff="loss=mse frozen=mask" -o - | shoal-opt --split-input-file -o /dev/null
// The plan op, with its scale:
// RUN: shoal-opt %s --split-input-file --shoal-fuse="chains=attention" --shoal-autodiff="loss=mse frozen=mask" | shoal-opt --split-input-file --shoal-parallelize="world-size=1" | shoal-translate --split-input-file --export-plan-text | FileCheck %s --check-prefix=PLAN

// CHECK-LABEL: func.func @main
// CHECK: %[[M:.*]] = shoal.weight "mask"
// CHECK: %[[Q:.*]] = shoal.matmul %arg0, %{{.*}} :
// CHECK: %[[KT:.*]] = shoal.transpose
// CHECK: %[[V:.*]] = shoal.matmul %arg0, %{{.*}} :
// CHECK: shoal.attention %[[Q]], %[[KT]], %[[V]], %[[M]] {scale = 5.000000e-01 : f32}
// CHECK-NOT: shoal.softmax
// CHECK: %dq, %dkt, %dv = shoal.attention_grad %{{.*}}, %[[Q]], %[[KT]], %[[V]], %[[M]] {scale = 5.000000e-01 : f32, shoal.phase = "backward"} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>)
// CHECK-NOT: shoal.softmax_grad

// PLAN: kind: "Attention"
// PLAN: kind: "AttentionGrad"
// PLAN: key: "scale"
// PLAN-NEXT: value {
// PLAN-NEXT: f: 0.5

module attributes {shoal.source = "/models/attention.onnx"} {
  func.func @main(%x: tensor<2x4x8xf32> {shoal.name = "x"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %m = shoal.weight "mask" : tensor<4x4xf32>
    %wq = shoal.weight "wq" : tensor<8x8xf32>
    %wk = shoal.weight "wk" : tensor<8x8xf32>
    %wv = shoal.weight "wv" : tensor<8x8xf32>
    %q = shoal.matmul %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %k = shoal.matmul %x, %wk : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %kt = shoal.transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
    %v = shoal.matmul %x, %wv : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %s = shoal.matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
    %c = shoal.constant dense<2.0> : tensor<f32>
    %s1 = shoal.div %s, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
    %s2 = shoal.add %s1, %m : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
    %p = shoal.softmax %s2 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %o = shoal.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %o : tensor<2x4x8xf32>
  }
}

// -----

// A mask that is a frozen weight (the GPT example's causal buffer) keeps
// the fused op; one that is trained (a learned position bias) gets no
// gradient from shoal.attention_grad, so shoal-autodiff turns that
// attention back into its chain, whose rules give the bias its gradient.
// CHECK-LABEL: func.func @main
// CHECK: shoal.attention %arg0, %arg1, %{{.*}}, %{{.*}} {scale = 5.000000e-01 : f32}
// CHECK: shoal.softmax
// CHECK: shoal.softmax_grad
// CHECK: shoal.grad_of = ["bias"]
// CHECK: shoal.attention_grad
// CHECK: shoal.grad_of = ["wv"]

module attributes {shoal.source = "/models/attention-bias.onnx"} {
  func.func @main(%q: tensor<2x4x8xf32> {shoal.name = "q"}, %kt: tensor<2x8x4xf32> {shoal.name = "kt"}) -> (tensor<2x4x8xf32> {shoal.name = "y"}) {
    %wv = shoal.weight "wv" : tensor<8x8xf32>
    %mask = shoal.weight "mask" : tensor<4x4xf32>
    %bias = shoal.weight "bias" : tensor<4x4xf32>
    %v = shoal.matmul %q, %wv : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %s = shoal.matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
    %c = shoal.constant dense<2.0> : tensor<f32>
    %s1 = shoal.div %s, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
    %s2 = shoal.add %s1, %mask : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
    %p = shoal.softmax %s2 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %o = shoal.matmul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %t = shoal.matmul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
    %t1 = shoal.div %t, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
    %t2 = shoal.add %t1, %bias : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
    %pt = shoal.softmax %t2 : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %o2 = shoal.matmul %pt, %o : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    return %o2 : tensor<2x4x8xf32>
  }
}
