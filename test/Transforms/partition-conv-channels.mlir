// RUN: shoal-opt %s --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s

// A split(2) CNN: the first Conv splits its output channels (its weight's
// dimension 0 and its bias, no collective); BatchNormalization, MaxPool and
// GlobalAveragePool stay per channel; the grouped Conv (group 2) takes one
// group per rank (group 1 locally, no collective); the next Conv
// (group 1) finds its input channels split and sums partial products, its
// bias added once after the all-reduce.
// CHECK-LABEL: func.func @cnn
// CHECK: shoal.weight "w1" {{.*}} : tensor<4x3x3x3xf32>
// CHECK: shoal.weight "b1" {{.*}} : tensor<4xf32>
// CHECK: %[[C1:.*]] = shoal.onnx "Conv"(%{{.*}}, %{{.*}}, %{{.*}}) {{.*}}group = 1 {{.*}} : (tensor<4x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<4x4x8x8xf32>
// CHECK-NOT: shoal.all_
// CHECK: shoal.onnx "BatchNormalization"(%[[C1]], {{.*}} : (tensor<4x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4x4x8x8xf32>
// CHECK: shoal.onnx "MaxPool"({{.*}} -> tensor<4x4x4x4xf32>
// CHECK: shoal.weight "w2" {{.*}} : tensor<8x4x3x3xf32>
// CHECK: shoal.onnx "Conv"({{.*}}group = 1 {{.*}} : (tensor<4x4x4x4xf32>, tensor<8x4x3x3xf32>) -> tensor<4x8x4x4xf32>
// CHECK: shoal.weight "w3" {{.*}} : tensor<6x8x1x1xf32>
// CHECK: shoal.weight "b3" {{.*}} : tensor<6xf32>
// CHECK: %[[P:.*]] = shoal.onnx "Conv"(%{{.*}}, %{{.*}}) {{.*}} : (tensor<4x8x4x4xf32>, tensor<6x8x1x1xf32>) -> tensor<4x6x4x4xf32>
// CHECK: %[[S:.*]] = shoal.all_reduce %[[P]] over ["tp"] : tensor<4x6x4x4xf32>
// CHECK: %[[B:.*]] = shoal.reshape %{{.*}} : (tensor<6xf32>) -> tensor<1x6x1x1xf32>
// CHECK: shoal.add %[[S]], %[[B]]
// CHECK: shoal.onnx "GlobalAveragePool"({{.*}} -> tensor<4x6x1x1xf32>
func.func @cnn(%x: tensor<4x3x8x8xf32>) -> tensor<4x6x1x1xf32> {
  %w1 = shoal.weight "w1" : tensor<8x3x3x3xf32>
  %b1 = shoal.weight "b1" : tensor<8xf32>
  %c1 = shoal.onnx "Conv"(%x, %w1, %b1) {group = 1 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<4x3x8x8xf32>, tensor<8x3x3x3xf32>, tensor<8xf32>) -> tensor<4x8x8x8xf32> loc("/c1")
  %s = shoal.weight "s" : tensor<8xf32>
  %b = shoal.weight "b" : tensor<8xf32>
  %m = shoal.weight "m" : tensor<8xf32>
  %v = shoal.weight "v" : tensor<8xf32>
  %n = shoal.onnx "BatchNormalization"(%c1, %s, %b, %m, %v) {} : (tensor<4x8x8x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8x8x8xf32> loc("/n")
  %p = shoal.onnx "MaxPool"(%n) {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<4x8x8x8xf32>) -> tensor<4x8x4x4xf32> loc("/p")
  %w2 = shoal.weight "w2" : tensor<16x4x3x3xf32>
  %c2 = shoal.onnx "Conv"(%p, %w2) {group = 2 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<4x8x4x4xf32>, tensor<16x4x3x3xf32>) -> tensor<4x16x4x4xf32> loc("/c2")
  %w3 = shoal.weight "w3" : tensor<6x16x1x1xf32>
  %b3 = shoal.weight "b3" : tensor<6xf32>
  %c3 = shoal.onnx "Conv"(%c2, %w3, %b3) {group = 1 : i64, kernel_shape = array<i64: 1, 1>} : (tensor<4x16x4x4xf32>, tensor<6x16x1x1xf32>, tensor<6xf32>) -> tensor<4x6x4x4xf32> loc("/c3")
  %g = shoal.onnx "GlobalAveragePool"(%c3) {} : (tensor<4x6x4x4xf32>) -> tensor<4x6x1x1xf32> loc("/g")
  return %g : tensor<4x6x1x1xf32>
}
