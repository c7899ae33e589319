// shoal-autodiff: gradient rules of HardSigmoid and HardSwish (shoal.onnx),
// built from graph ops: t = alpha x + beta, the derivative inside
// 0 < t < 1 (alpha; for HardSwish 2 alpha x + beta), 1 above for HardSwish,
// 0 elsewhere.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s

// CHECK: shoal.constant {{.*}}dense<1.000000e+00>
// HardSwish: the slope 2 alpha x + beta inside, the gradient itself above.
// CHECK: %[[IN:.*]] = shoal.and
// CHECK: %[[ABOVE:.*]] = shoal.where %{{.*}}, %{{.*}}, %{{.*}} {{.*}}: (tensor<2x4xi1>, tensor<2x4xf32>, tensor<f32>) -> tensor<2x4xf32>
// CHECK: shoal.where %[[IN]], %{{.*}}, %[[ABOVE]]
// HardSigmoid (alpha 0.25): alpha times the gradient inside, else 0.
// CHECK: shoal.constant {{.*}}dense<2.500000e-01> : tensor<f32>
// CHECK: shoal.and
// CHECK: shoal.where {{.*}}{shoal.grad_of = ["w"], shoal.phase = "backward"}

module attributes {shoal.source = "/models/act.onnx"} {
  func.func @main(%x: tensor<2x4xf32> {shoal.name = "x"}) -> (tensor<2x4xf32> {shoal.name = "y"}) {
    %w = shoal.weight "w" : tensor<2x4xf32>
    %a = shoal.onnx "HardSigmoid"(%w) {alpha = 2.500000e-01 : f32, beta = 5.000000e-01 : f32} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %m = shoal.mul %a, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %y = shoal.onnx "HardSwish"(%m) {} : (tensor<2x4xf32>) -> tensor<2x4xf32>
    return %y : tensor<2x4xf32>
  }
}
