// RUN: shoal-opt %s --shoal-parallelize="world-size=2" | FileCheck %s

// Batch-major ONNX ops (Conv, BatchNormalization, pools) keep the batch
// split under data parallelism; an axis op (Concat) keeps its other
// dimensions split; an op without a rule (TopK over the batch axis here)
// gets its input gathered first.
// CHECK-LABEL: func.func @cnn
// CHECK-SAME: %arg0: tensor<2x3x8x8xf32>
// CHECK: shoal.onnx "Conv"(%{{.*}}) {{.*}} -> tensor<2x4x8x8xf32>
// CHECK: shoal.onnx "BatchNormalization"({{.*}} -> tensor<2x4x8x8xf32>
// CHECK: shoal.onnx "MaxPool"({{.*}} -> tensor<2x4x4x4xf32>
// CHECK: shoal.onnx "GlobalAveragePool"({{.*}} -> tensor<2x4x1x1xf32>
// CHECK: shoal.onnx "Concat"({{.*}} : (tensor<2x4x1x1xf32>, tensor<2x4x1x1xf32>) -> tensor<2x8x1x1xf32>
// CHECK: %[[G:.*]] = shoal.all_gather %{{.*}} dim 0 over ["dp"] : (tensor<2x8x1x1xf32>) -> tensor<4x8x1x1xf32>
// CHECK: shoal.onnx "TopK"(%[[G]]) {{.*}} : (tensor<4x8x1x1xf32>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xi64>)
func.func @cnn(%x: tensor<4x3x8x8xf32>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xi64>) {
  %w = shoal.weight "w" : tensor<4x3x3x3xf32>
  %c = shoal.onnx "Conv"(%x, %w) {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<4x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<4x4x8x8xf32>
  %s = shoal.weight "s" : tensor<4xf32>
  %b = shoal.weight "b" : tensor<4xf32>
  %m = shoal.weight "m" : tensor<4xf32>
  %v = shoal.weight "v" : tensor<4xf32>
  %n = shoal.onnx "BatchNormalization"(%c, %s, %b, %m, %v) {} : (tensor<4x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x4x8x8xf32>
  %p = shoal.onnx "MaxPool"(%n) {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<4x4x8x8xf32>) -> tensor<4x4x4x4xf32>
  %g = shoal.onnx "GlobalAveragePool"(%p) {} : (tensor<4x4x4x4xf32>) -> tensor<4x4x1x1xf32>
  %cat = shoal.onnx "Concat"(%g, %g) {axis = 1 : i64} : (tensor<4x4x1x1xf32>, tensor<4x4x1x1xf32>) -> tensor<4x8x1x1xf32>
  %t:2 = shoal.onnx "TopK"(%cat) {axis = 0 : i64, k = 1 : i64} : (tensor<4x8x1x1xf32>) -> (tensor<1x8x1x1xf32>, tensor<1x8x1x1xi64>)
  return %t#0, %t#1 : tensor<1x8x1x1xf32>, tensor<1x8x1x1xi64>
}

// Element-wise ONNX ops (HardSigmoid, HardSwish, Mod) keep the batch split;
// ArgMax over the other axis keeps it too, but ArgMax/ArgMin over the split
// axis gets its input gathered first (an index into a block would be wrong).
// CHECK-LABEL: func.func @activations
// CHECK: shoal.onnx "HardSigmoid"(%{{.*}}) {{.*}} : (tensor<2x6xf32>) -> tensor<2x6xf32>
// CHECK: shoal.onnx "HardSwish"(%{{.*}}) {{.*}} : (tensor<2x6xf32>) -> tensor<2x6xf32>
// CHECK: shoal.onnx "Mod"(%{{.*}}, %{{.*}}) {{.*}} : (tensor<2x6xf32>, tensor<f32>) -> tensor<2x6xf32>
// CHECK: shoal.onnx "ArgMax"(%{{.*}}) {{.*}} : (tensor<2x6xf32>) -> tensor<2xi64>
// CHECK: %[[G:.*]] = shoal.all_gather %{{.*}} dim 0 over ["dp"] : (tensor<2x6xf32>) -> tensor<4x6xf32>
// CHECK: shoal.onnx "ArgMin"(%[[G]]) {{.*}} : (tensor<4x6xf32>) -> tensor<1x6xi64>
func.func @activations(%x: tensor<4x6xf32>) -> (tensor<4xi64>, tensor<1x6xi64>) {
  %a = shoal.onnx "HardSigmoid"(%x) {alpha = 2.500000e-01 : f32} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %b = shoal.onnx "HardSwish"(%a) {} : (tensor<4x6xf32>) -> tensor<4x6xf32>
  %two = shoal.constant dense<2.0> : tensor<f32>
  %m = shoal.onnx "Mod"(%b, %two) {fmod = 1 : i64} : (tensor<4x6xf32>, tensor<f32>) -> tensor<4x6xf32>
  %i = shoal.onnx "ArgMax"(%m) {axis = 1 : i64, keepdims = 0 : i64} : (tensor<4x6xf32>) -> tensor<4xi64>
  %j = shoal.onnx "ArgMin"(%m) {axis = 0 : i64} : (tensor<4x6xf32>) -> tensor<1x6xi64>
  return %i, %j : tensor<4xi64>, tensor<1x6xi64>
}

// Pad keeps the batch split when it pads other dimensions; padding the
// split dimension gathers it first.
// CHECK-LABEL: func.func @pad
// CHECK: shoal.onnx "Pad"(%{{.*}}) {{.*}} : (tensor<2x6xf32>) -> tensor<2x9xf32>
// CHECK: %[[G:.*]] = shoal.all_gather %{{.*}} dim 0 over ["dp"] : (tensor<2x6xf32>) -> tensor<4x6xf32>
// CHECK: shoal.onnx "Pad"(%[[G]]) {{.*}} : (tensor<4x6xf32>) -> tensor<5x6xf32>
func.func @pad(%x: tensor<4x6xf32>) -> (tensor<4x9xf32>, tensor<5x6xf32>) {
  %a = shoal.onnx "Pad"(%x) {mode = "constant", pads = array<i64: 0, 1, 0, 2>} : (tensor<4x6xf32>) -> tensor<4x9xf32>
  %b = shoal.onnx "Pad"(%x) {mode = "edge", pads = array<i64: 1, 0, 0, 0>} : (tensor<4x6xf32>) -> tensor<5x6xf32>
  return %a, %b : tensor<4x9xf32>, tensor<5x6xf32>
}
