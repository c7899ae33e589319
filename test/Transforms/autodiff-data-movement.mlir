// shoal-autodiff: gradient rules of the ONNX data-movement ops (shoal.onnx):
// Concat gives each input a Slice of the result's gradient; Split
// concatenates its parts' gradients, zeros for a part nothing reads; Slice
// pads the gradient with zeros back to the input's shape, after reversing
// it for a negative step and interleaving zeros for a step above 1.
// RUN: shoal-opt %s --shoal-autodiff="loss=mse" | FileCheck %s
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=s2" | FileCheck %s --check-prefix=STEP
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=r" | FileCheck %s --check-prefix=REV
// RUN: shoal-opt %s --shoal-autodiff="loss=mse output=one" | FileCheck %s --check-prefix=ONE

// The Slice's gradient: rows 1:3 and columns 2:5 of a 3x6 input.
// CHECK: shoal.onnx "Pad"(%{{.*}}) {mode = "constant", pads = array<i64: 1, 2, 0, 1>} {{.*}}: (tensor<2x3xf32>) -> tensor<3x6xf32>
// The Split's gradient: the used part's gradient and zeros for the other.
// CHECK: %[[Z:.*]] = shoal.constant {{.*}}dense<0.000000e+00> : tensor<3x6xf32>
// CHECK: shoal.onnx "Concat"(%{{.*}}, %[[Z]]) {axis = 1 : i64} {{.*}}: (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x12xf32>
// The Concat's gradient: one Slice per input.
// CHECK-DAG: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: 1>, ends = array<i64: 6>, starts = array<i64: 0>} {{.*}}: (tensor<3x12xf32>) -> tensor<3x6xf32>
// CHECK-DAG: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: 1>, ends = array<i64: 12>, starts = array<i64: 6>} {{.*}}: (tensor<3x12xf32>) -> tensor<3x6xf32>

// Step 2 (x[:, ::2] of 3x5, GPT-J's rotate_every_two): the gradient
// [3, 3] becomes [3, 3, 1], padded to [3, 3, 2], [3, 6], cropped to 5.
// STEP: %[[R:.*]] = shoal.reshape %{{.*}}: (tensor<3x3xf32>) -> tensor<3x3x1xf32>
// STEP: %[[P:.*]] = shoal.onnx "Pad"(%[[R]]) {mode = "constant", pads = array<i64: 0, 0, 0, 0, 0, 1>} {{.*}}-> tensor<3x3x2xf32>
// STEP: %[[M:.*]] = shoal.reshape %[[P]] {{.*}}: (tensor<3x3x2xf32>) -> tensor<3x6xf32>
// STEP: shoal.onnx "Pad"(%[[M]]) {mode = "constant", pads = array<i64: 0, 0, 0, -1>} {{.*}}: (tensor<3x6xf32>) -> tensor<3x5xf32>

// Step -2 from index 4 (elements 4, 2, 0 of 5; x[:, ::-2]): reversed,
// spread to 6 and cropped from the start 0.
// REV: %[[V:.*]] = shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: 1>, ends = array<i64: -9223372036854775808>, starts = array<i64: 2>, steps = array<i64: -1>} {{.*}}: (tensor<3x3xf32>) -> tensor<3x3xf32>
// REV: shoal.reshape %[[V]] {{.*}}: (tensor<3x3xf32>) -> tensor<3x3x1xf32>
// REV: shoal.onnx "Pad"(%{{.*}}) {mode = "constant", pads = array<i64: 0, 0, 0, -1>} {{.*}}: (tensor<3x6xf32>) -> tensor<3x5xf32>

// One element taken with a huge step (x[:, 1::2**63-1]): the step does not
// matter, the gradient is padded into place.
// ONE-NOT: tensor<3x1x1xf32>
// ONE: shoal.onnx "Pad"(%{{.*}}) {mode = "constant", pads = array<i64: 0, 1, 0, 3>} {{.*}}: (tensor<3x1xf32>) -> tensor<3x5xf32>

module attributes {shoal.source = "/models/moves.onnx"} {
  func.func @main(%x: tensor<3x6xf32> {shoal.name = "x"}) -> (tensor<2x3xf32> {shoal.name = "y"}, tensor<3x3xf32> {shoal.name = "s2"}, tensor<3x3xf32> {shoal.name = "r"}, tensor<3x1xf32> {shoal.name = "one"}) {
    %a = shoal.weight "a" : tensor<3x6xf32>
    %b = shoal.weight "b" : tensor<3x6xf32>
    %c = shoal.onnx "Concat"(%a, %b) {axis = 1 : i64} : (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x12xf32>
    %p0, %p1 = shoal.onnx "Split"(%c) {axis = 1 : i64, split = array<i64: 6, 6>} : (tensor<3x12xf32>) -> (tensor<3x6xf32>, tensor<3x6xf32>)
    %m = shoal.mul %p0, %x : (tensor<3x6xf32>, tensor<3x6xf32>) -> tensor<3x6xf32>
    %q0, %q1 = shoal.onnx "Split"(%m) {axis = 1 : i64, split = array<i64: 2, 4>} : (tensor<3x6xf32>) -> (tensor<3x2xf32>, tensor<3x4xf32>)
    %s = shoal.onnx "Slice"(%m) {starts = array<i64: 1, -4>, ends = array<i64: 3, 5>, axes = array<i64: 0, 1>} : (tensor<3x6xf32>) -> tensor<2x3xf32>
    %q5 = shoal.onnx "Slice"(%m) {starts = array<i64: 0>, ends = array<i64: 5>, axes = array<i64: 1>} : (tensor<3x6xf32>) -> tensor<3x5xf32>
    %s2 = shoal.onnx "Slice"(%q5) {starts = array<i64: 0>, ends = array<i64: 9223372036854775807>, axes = array<i64: 1>, steps = array<i64: 2>} : (tensor<3x5xf32>) -> tensor<3x3xf32>
    %r = shoal.onnx "Slice"(%q5) {starts = array<i64: -1>, ends = array<i64: -9223372036854775808>, axes = array<i64: 1>, steps = array<i64: -2>} : (tensor<3x5xf32>) -> tensor<3x3xf32>
    %one = shoal.onnx "Slice"(%q5) {starts = array<i64: 1>, ends = array<i64: 9223372036854775807>, axes = array<i64: 1>, steps = array<i64: 9223372036854775807>} : (tensor<3x5xf32>) -> tensor<3x1xf32>
    return %s, %s2, %r, %one : tensor<2x3xf32>, tensor<3x3xf32>, tensor<3x3xf32>, tensor<3x1xf32>
  }
}
