// shoal-autodiff: the gradient of a constant Pad is a Pad by the negated
// pads (negative pads crop); other modes are refused.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=y" | FileCheck %s
// RUN: not shoal-opt %s --shoal-autodiff="loss=mse output=r" 2>&1 | FileCheck %s --check-prefix=EMODE

// CHECK: shoal.onnx "Pad"(%{{.*}}) {mode = "constant", pads = array<i64: -1, 0, 0, -2>} {shoal.phase = "backward"} : (tensor<4x6xf32>) -> tensor<3x4xf32>
// EMODE: gradient of a Pad in mode 'reflect' is not supported yet (only constant)

module attributes {shoal.source = "/models/pad.onnx"} {
  func.func @main(%x: tensor<3x4xf32> {shoal.name = "x"}) -> (tensor<4x6xf32> {shoal.name = "y"}, tensor<4x6xf32> {shoal.name = "r"}) {
    %w = shoal.weight "w" : tensor<3x4xf32>
    %m = shoal.mul %w, %x : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
    %y = shoal.onnx "Pad"(%m) {mode = "constant", pads = array<i64: 1, 0, 0, 2>} : (tensor<3x4xf32>) -> tensor<4x6xf32>
    %r = shoal.onnx "Pad"(%m) {mode = "reflect", pads = array<i64: 1, 0, 0, 2>} : (tensor<3x4xf32>) -> tensor<4x6xf32>
    return %y, %r : tensor<4x6xf32>, tensor<4x6xf32>
  }
}
