// shoal-autodiff: shoal.gelu's gradient rule is one shoal.gelu_grad of the
// argument (input + bias) in the GELU's form; the bias's gradient is it
// summed over the rows. A training compile fuses the erf GELU chains
// before shoal-autodiff (shoal-fuse chains=gelu-erf), so that the rule
// applies; the tanh form's rule is here for modules that hold the op.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" -o - | shoal-opt -o /dev/null

// The tanh GELU of the second layer first (reverse order).
// CHECK: %[[DT:.*]] = shoal.gelu_grad %{{.*}}, %[[H:.*]] {approximate = "tanh", shoal.phase = "backward"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[DZ:.*]] = shoal.gelu_grad %{{.*}}, %arg0, %{{.*}} {shoal.phase = "backward"} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: shoal.reduce_sum %[[DZ]] {axes = array<i64: 0>, {{.*}}shoal.grad_of = ["b"]{{.*}}} : (tensor<4x8xf32>) -> tensor<8xf32>

module attributes {shoal.source = "/models/gelu.onnx"} {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %b = shoal.weight "b" : tensor<8xf32>
    %w = shoal.weight "w" : tensor<8x8xf32>
    %h = shoal.gelu %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %m = shoal.matmul %h, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %y = shoal.gelu %m {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
