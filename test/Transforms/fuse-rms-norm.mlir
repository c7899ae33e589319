// shoal-fuse's RMSNorm: the chain Hugging Face's LlamaRMSNorm exports
// (identity Casts, Pow 2, ReduceMean over the last axis, Add eps, Sqrt,
// Div(1, .), Mul x, Mul weight), T5LayerNorm's (x * x, Reciprocal, the
// products in the other order) and a Div form become shoal.layer_norm with
// rms = true; near misses stay as they are; chains= picks it.
// RUN: shoal-opt %s -split-input-file --shoal-fuse | FileCheck %s
// RUN: shoal-opt %s -split-input-file --shoal-fuse="chains=rms-norm" | FileCheck %s
// RUN: shoal-opt %s -split-input-file --shoal-fuse="chains=gelu,attention" | FileCheck %s --check-prefix=OFF

// OFF-LABEL: func.func @llama
// OFF-NOT: shoal.layer_norm
// OFF: shoal.reduce_mean

// CHECK-LABEL: func.func @llama
// CHECK-NEXT: %[[W:.*]] = shoal.weight "w"
// CHECK-NEXT: %[[Y:.*]] = shoal.layer_norm %arg0, %[[W]] {epsilon = 9.99999997E-7 : f32, rms = true, shoal.scope = "s"} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @llama(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %0 = shoal.cast %x {shoal.scope = "s"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %c2 = shoal.constant dense<2.0> : tensor<f32>
  %1 = shoal.pow %0, %c2 {shoal.scope = "s"} : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %2 = shoal.reduce_mean %1 {axes = array<i64: -1>, shoal.scope = "s"} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %eps = shoal.constant dense<1.0e-6> : tensor<f32>
  %3 = shoal.add %2, %eps {shoal.scope = "s"} : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %4 = shoal.sqrt %3 {shoal.scope = "s"} : (tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %one = shoal.constant dense<1.0> : tensor<f32>
  %5 = shoal.div %one, %4 {shoal.scope = "s"} : (tensor<f32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %6 = shoal.mul %0, %5 {shoal.scope = "s"} : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %7 = shoal.cast %6 {shoal.scope = "s"} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %w = shoal.weight "w" : tensor<8xf32>
  %8 = shoal.mul %w, %7 {shoal.scope = "s"} : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %8 : tensor<2x4x8xf32>
}

// -----

// CHECK-LABEL: func.func @t5
// CHECK-NEXT: %[[W:.*]] = shoal.weight "w"
// CHECK-NEXT: %[[Y:.*]] = shoal.layer_norm %arg0, %[[W]] {epsilon = 9.99999997E-7 : f32, rms = true} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @t5(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %1 = shoal.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = shoal.reduce_mean %1 {axes = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %eps = shoal.constant dense<1.0e-6> : tensor<f32>
  %3 = shoal.add %eps, %2 : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %4 = shoal.sqrt %3 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = shoal.reciprocal %4 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = shoal.mul %5, %x : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %w = shoal.weight "w" : tensor<8xf32>
  %8 = shoal.mul %6, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}

// -----

// x / sqrt(mean(x^2) + eps) * w, epsilon 1e-5 (the default: not printed).
// CHECK-LABEL: func.func @div_form
// CHECK: shoal.layer_norm %arg0, %{{.*}} {rms = true}
// CHECK-NOT: shoal.sqrt
func.func @div_form(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c2 = shoal.constant dense<2.0> : tensor<f32>
  %1 = shoal.pow %x, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = shoal.reduce_mean %1 {axes = array<i64: -1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %eps = shoal.constant dense<1.0e-5> : tensor<f32>
  %3 = shoal.add %2, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %4 = shoal.sqrt %3 : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = shoal.div %x, %4 : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %w = shoal.weight "w" : tensor<8xf32>
  %6 = shoal.mul %5, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %6 : tensor<4x8xf32>
}

// -----

// Near misses: the mean over the first axis; the statistic read elsewhere
// too (returned); the square of another tensor; Pow 3; the mean without
// keepdims (a broadcast along another axis).
// CHECK-LABEL: func.func @near_misses
// CHECK-NOT: shoal.layer_norm
// CHECK: return
func.func @near_misses(%x: tensor<8x8xf32>, %z: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<1x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x1xf32>) {
  %w = shoal.weight "w" : tensor<8xf32>
  %eps = shoal.constant dense<1.0e-6> : tensor<f32>
  %c2 = shoal.constant dense<2.0> : tensor<f32>
  %c3 = shoal.constant dense<3.0> : tensor<f32>
  // axis 0
  %a1 = shoal.pow %x, %c2 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %a2 = shoal.reduce_mean %a1 {axes = array<i64: 0>} : (tensor<8x8xf32>) -> tensor<1x8xf32>
  %a3 = shoal.add %a2, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %a4 = shoal.sqrt %a3 : (tensor<1x8xf32>) -> tensor<1x8xf32>
  %a5 = shoal.div %x, %a4 : (tensor<8x8xf32>, tensor<1x8xf32>) -> tensor<8x8xf32>
  %a6 = shoal.mul %a5, %w : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  // the statistic also returned
  %b1 = shoal.pow %x, %c2 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %b2 = shoal.reduce_mean %b1 {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8x1xf32>
  %b3 = shoal.add %b2, %eps : (tensor<8x1xf32>, tensor<f32>) -> tensor<8x1xf32>
  %b4 = shoal.sqrt %b3 : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %b5 = shoal.div %x, %b4 : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %b6 = shoal.mul %b5, %w : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  // the square of another tensor
  %c1 = shoal.pow %z, %c2 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %cm = shoal.reduce_mean %c1 {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8x1xf32>
  %c3a = shoal.add %cm, %eps : (tensor<8x1xf32>, tensor<f32>) -> tensor<8x1xf32>
  %c4 = shoal.sqrt %c3a : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %c5 = shoal.div %x, %c4 : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %c6 = shoal.mul %c5, %w : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  // Pow 3
  %d1 = shoal.pow %x, %c3 : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %d2 = shoal.reduce_mean %d1 {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8x1xf32>
  %d3 = shoal.add %d2, %eps : (tensor<8x1xf32>, tensor<f32>) -> tensor<8x1xf32>
  %d4 = shoal.sqrt %d3 : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %d5 = shoal.div %x, %d4 : (tensor<8x8xf32>, tensor<8x1xf32>) -> tensor<8x8xf32>
  %d6 = shoal.mul %d5, %w : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  return %a6, %a2, %c6, %d6, %b4 : tensor<8x8xf32>, tensor<1x8xf32>, tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x1xf32>
}

// -----

// A chain across two scopes stays as it is.
// CHECK-LABEL: func.func @two_scopes
// CHECK-NOT: shoal.layer_norm
// CHECK: shoal.reduce_mean
func.func @two_scopes(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c2 = shoal.constant dense<2.0> : tensor<f32>
  %1 = shoal.pow %x, %c2 {shoal.scope = "a"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = shoal.reduce_mean %1 {axes = array<i64: -1>, shoal.scope = "a"} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %eps = shoal.constant dense<1.0e-6> : tensor<f32>
  %3 = shoal.add %2, %eps {shoal.scope = "a"} : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %4 = shoal.sqrt %3 {shoal.scope = "a"} : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = shoal.div %x, %4 {shoal.scope = "a"} : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %w = shoal.weight "w" : tensor<8xf32>
  %6 = shoal.mul %5, %w {shoal.scope = "b"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %6 : tensor<4x8xf32>
}
