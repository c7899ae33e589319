// shoal-autodiff: a shoal.layer_norm with rms = true (RMSNorm, which a
// training compile fuses before shoal-autodiff) differentiates into
// layer_norm_grad and layer_norm_scale_grad that keep rms = true and the
// epsilon. The plan export writes the attribute as rms: 1.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" -o - | shoal-opt -o /dev/null
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | shoal-opt --shoal-parallelize="world-size=1" | shoal-translate --export-plan-text | FileCheck %s --check-prefix=PLAN

// PLAN: kind: "LayerNormalization"
// PLAN: key: "rms"
// PLAN-NEXT: value {
// PLAN-NEXT: i: 1
// PLAN: kind: "LayerNormalizationGrad"
// PLAN: key: "rms"
// PLAN-NEXT: value {
// PLAN-NEXT: i: 1
// PLAN: kind: "LayerNormalizationScaleGrad"
// PLAN: key: "rms"
// PLAN-NEXT: value {
// PLAN-NEXT: i: 1

// CHECK: %[[H:.*]] = shoal.add %arg0
// CHECK: shoal.layer_norm_grad %[[H]], %{{.*}}, %{{.*}} {epsilon = 9.99999997E-7 : f32, rms = true, shoal.phase = "backward"} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: shoal.layer_norm_scale_grad %[[H]], %{{.*}} {epsilon = 9.99999997E-7 : f32, rms = true, shoal.grad_of = ["w"], shoal.phase = "backward"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8xf32>

module attributes {shoal.source = "/models/rms.onnx"} {
  func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
    %w = shoal.weight "w" : tensor<8xf32>
    %b = shoal.weight "b" : tensor<8xf32>
    %h = shoal.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %y = shoal.layer_norm %h, %w {epsilon = 1.0e-6 : f32, rms = true} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}
