// shoal-autodiff: the gradient of a Gather along axis 1 is a scatter-add
// along axis 0 (gather_grad) between two transposes: the data's axis 1
// moves to the front, the gradient's index dimensions too, and back.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s

// CHECK: %[[T:.*]] = shoal.transpose %{{.*}} {perm = array<i64: 1, 2, 0, 3>{{.*}}} : (tensor<3x2x2x4xf32>) -> tensor<2x2x3x4xf32>
// CHECK: %[[S:.*]] = shoal.gather_grad %{{.*}}, %[[T]] {{.*}}: (tensor<2x2xi64>, tensor<2x2x3x4xf32>) -> tensor<5x3x4xf32>
// CHECK: shoal.transpose %[[S]] {perm = array<i64: 1, 0, 2>{{.*}}} : (tensor<5x3x4xf32>) -> tensor<3x5x4xf32>

module attributes {shoal.source = "/models/gather.onnx"} {
  func.func @main(%i: tensor<2x2xi64> {shoal.name = "i"}) -> (tensor<3x2x2x4xf32> {shoal.name = "y"}) {
    %w = shoal.weight "w" : tensor<3x5x4xf32>
    %y = shoal.gather %w, %i {axis = 1 : i64} : (tensor<3x5x4xf32>, tensor<2x2xi64>) -> tensor<3x2x2x4xf32>
    return %y : tensor<3x2x2x4xf32>
  }
}
