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
