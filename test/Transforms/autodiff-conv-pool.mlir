// shoal-autodiff: Conv's gradients are ConvInputGrad (dX) and ConvWeightGrad
// (dW) and a sum of dY over all but the channels (dB); MaxPool and
// AveragePool have MaxPoolGrad / AveragePoolGrad (recomputing the windows
// from X), GlobalAveragePool an Expand scaled by 1 / (H W), GlobalMaxPool a
// MaxPoolGrad over the whole plane. A MaxPool with storage_order 1 is
// refused.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=y" | FileCheck %s
// RUN: not shoal-opt %s --shoal-autodiff="loss=mse output=bad" 2>&1 | FileCheck %s --check-prefix=EORDER

// CHECK-LABEL: func.func @main
// CHECK-DAG: %[[W:.*]] = shoal.weight "w" : tensor<4x2x3x3xf32>
// CHECK-DAG: %[[B:.*]] = shoal.weight "b" : tensor<4xf32>
// CHECK: %[[X:.*]] = shoal.add
// CHECK: %[[C:.*]] = shoal.onnx "Conv"(%[[X]], %[[W]], %[[B]])
// CHECK: shoal.onnx "MaxPoolGrad"(%{{.*}}, %{{.*}}) {kernel_shape = array<i64: 3, 3>} {shoal.phase = "backward"} : (tensor<2x4x3x3xf32>, tensor<2x4x1x1xf32>) -> tensor<2x4x3x3xf32>
// CHECK: shoal.constant {shoal.phase = "backward"} dense<0.111111112> : tensor<f32>
// CHECK: shoal.expand %{{.*}} {shoal.phase = "backward"} : (tensor<2x4x1x1xf32>) -> tensor<2x4x3x3xf32>
// CHECK: shoal.onnx "AveragePoolGrad"(%{{.*}}, %{{.*}}) {count_include_pad = 1 : i64, kernel_shape = array<i64: 2, 2>, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 2>} {shoal.phase = "backward"} : (tensor<2x4x5x5xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x5x5xf32>
// CHECK: shoal.onnx "MaxPoolGrad"(%[[C]], %{{.*}}) {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} {shoal.phase = "backward"} : (tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
// CHECK: shoal.onnx "ConvInputGrad"(%[[X]], %[[W]], %[[G:.*]]) {dilations = array<i64: 1, 1>, group = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} {shoal.grad_of = ["s"], shoal.phase = "backward"} : (tensor<2x4x9x9xf32>, tensor<4x2x3x3xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x9x9xf32>
// CHECK: shoal.onnx "ConvWeightGrad"(%[[X]], %[[G]]) {dilations = array<i64: 1, 1>, group = 2 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} {shoal.grad_of = ["w"], shoal.phase = "backward"} : (tensor<2x4x9x9xf32>, tensor<2x4x5x5xf32>) -> tensor<4x2x3x3xf32>
// CHECK: shoal.reduce_sum %[[G]] {axes = array<i64: 0, 2, 3>, keepdims = false, shoal.grad_of = ["b"], shoal.phase = "backward"} : (tensor<2x4x5x5xf32>) -> tensor<4xf32>
// EORDER: gradient of a MaxPool with storage_order 1 is not supported (only 0)

module attributes {shoal.source = "/models/cnn.onnx"} {
  func.func @main(%x: tensor<2x4x9x9xf32> {shoal.name = "x"}) -> (tensor<2x4x1x1xf32> {shoal.name = "y"}, tensor<2x4x5x5xf32> {shoal.name = "bad"}) {
    %w = shoal.weight "w" : tensor<4x2x3x3xf32>
    %b = shoal.weight "b" : tensor<4xf32>
    %s = shoal.weight "s" : tensor<2x4x9x9xf32>
    %xs = shoal.add %x, %s : (tensor<2x4x9x9xf32>, tensor<2x4x9x9xf32>) -> tensor<2x4x9x9xf32>
    %c = shoal.onnx "Conv"(%xs, %w, %b) {dilations = array<i64: 1, 1>, group = 2 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x9x9xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<2x4x5x5xf32>
    %m = shoal.onnx "MaxPool"(%c) {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
    %a = shoal.onnx "AveragePool"(%m) {count_include_pad = 1 : i64, kernel_shape = array<i64: 2, 2>, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x5x5xf32>) -> tensor<2x4x3x3xf32>
    %g = shoal.onnx "GlobalAveragePool"(%a) {} : (tensor<2x4x3x3xf32>) -> tensor<2x4x1x1xf32>
    %gm = shoal.onnx "GlobalMaxPool"(%a) {} : (tensor<2x4x3x3xf32>) -> tensor<2x4x1x1xf32>
    %y = shoal.add %g, %gm : (tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>) -> tensor<2x4x1x1xf32>
    %bad = shoal.onnx "MaxPool"(%c) {kernel_shape = array<i64: 1, 1>, storage_order = 1 : i64} : (tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
    return %y, %bad : tensor<2x4x1x1xf32>, tensor<2x4x5x5xf32>
  }
}
