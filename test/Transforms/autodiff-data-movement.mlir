// shoal-autodiff: gradient rules of the ONNX data-movement ops (shoal.onnx):
// Concat gives each input a Slice of the result's gradient; Split
// concatenates its parts' gradients, zeros for a part nothing reads; Slice
// (unit steps) pads the gradient with zeros back to the input's shape.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s
// RUN: not shoal-opt %s --shoal-autodiff="loss=mse output=s2" 2>&1 | FileCheck %s --check-prefix=ESTEP

// The Slice's gradient: rows 1:3 and columns 2:5 of a 3x6 input.
// CHECK: shoal.onnx "Pad"(%{{.*}}) {mode = "constant", pads = array<i64: 1, 2, 0, 1>} {{.*}}: (tensor<2x3xf32>) -> tensor<3x6xf32>
// The Split's gradient: the used part's gradient and zeros for the other.
// CHECK: %[[Z:.*]] = shoal.constant {{.*}}dense<0.000000e+00> : tensor<3x6xf32>
// CHECK: shoal.onnx "Concat"(%{{.*}}, %[[Z]]) {axis = 1 : i64} {{.*}}: (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x12xf32>
// The Concat's gradient: one Slice per input.
// CHECK-DAG: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: 1>, ends = array<i64: 6>, starts = array<i64: 0>} {{.*}}: (tensor<3x12xf32>) -> tensor<3x6xf32>
// CHECK-DAG: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: 1>, ends = array<i64: 12>, starts = array<i64: 6>} {{.*}}: (tensor<3x12xf32>) -> tensor<3x6xf32>

// ESTEP: gradient of a Slice with step 2 is not supported yet (only step 1)

module attributes {shoal.source = "/models/moves.onnx"} {
  func.func @main(%x: tensor<3x6xf32> {shoal.name = "x"}) -> (tensor<2x3xf32> {shoal.name = "y"}, tensor<3x2xf32> {shoal.name = "s2"}) {
    %a = shoal.weight "a" : tensor<3x6xf32>
    %b = shoal.weight "b" : tensor<3x6xf32>
    %c = shoal.onnx "Concat"(%a, %b) {axis = 1 : i64} : (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x12xf32>
    %p0, %p1 = shoal.onnx "Split"(%c) {axis = 1 : i64, split = array<i64: 6, 6>} : (tensor<3x12xf32>) -> (tensor<3x6xf32>, tensor<3x6xf32>)
    %m = shoal.mul %p0, %x : (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x6xf32>
    %q0, %q1 = shoal.onnx "Split"(%m) {axis = 1 : i64, split = array<i64: 2, 4>} : (tensor<3x6xf32>) -> (tensor<3x2xf32>, tensor<3x4xf32>)
    %s = shoal.onnx "Slice"(%m) {starts = array<i64: 1, -4>, ends = array<i64: 3, 5>, axes = array<i64: 0, 1>} : (tensor<3x6xf32>) -> tensor<2x3xf32>
    %s2 = shoal.onnx "Slice"(%q0) {starts = array<i64: 0>, ends = array<i64: 2>, axes = array<i64: 1>, steps = array<i64: 2>} : (tensor<3x2xf32>) -> tensor<3x1xf32>
    %t = shoal.onnx "Concat"(%s2, %s2) {axis = 1 : i64} : (tensor<3x1xf32>, tensor<3x1xf32>) -> tensor<3x2xf32>
    return %s, %t : tensor<2x3xf32>, tensor<3x2xf32>
  }
}
