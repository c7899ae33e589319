// RUN: shoal-opt %s -split-input-file --shoal-fuse | FileCheck %s

// PyTorch's exact GELU after a bias add.
// CHECK-LABEL: func.func @gelu
// CHECK-NEXT: %[[B:.*]] = shoal.weight "b"
// CHECK-NEXT: %[[Y:.*]] = shoal.gelu %arg0, %[[B]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @gelu(%h: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %b = shoal.weight "b" : tensor<8xf32>
  %x = shoal.add %b, %h : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c0 = shoal.constant dense<1.41421354> : tensor<f32>
  %0 = shoal.div %x, %c0 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = shoal.erf %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c1 = shoal.constant dense<1.0> : tensor<f32>
  %2 = shoal.add %1, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = shoal.mul %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c2 = shoal.constant dense<0.5> : tensor<f32>
  %4 = shoal.mul %3, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// A chain whose intermediate is used elsewhere, or with another constant,
// stays as it is.
// CHECK-LABEL: func.func @not_gelu
// CHECK-NOT: shoal.gelu
// CHECK: shoal.erf
func.func @not_gelu(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c0 = shoal.constant dense<1.41421354> : tensor<f32>
  %0 = shoal.div %x, %c0 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = shoal.erf %0 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %c1 = shoal.constant dense<1.0> : tensor<f32>
  %2 = shoal.add %1, %c1 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = shoal.mul %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c2 = shoal.constant dense<0.5> : tensor<f32>
  %4 = shoal.mul %3, %c2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %4, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// The residual sum stays available next to the normalized value.
// CHECK-LABEL: func.func @add_layer_norm
// CHECK: %[[S:.*]], %[[Y:.*]] = shoal.add_layer_norm %arg0, %arg1, %{{.*}} {epsilon = 9.99999997E-7 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK: return %[[S]], %[[Y]]
func.func @add_layer_norm(%a: tensor<2x4x8xf32>, %b: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %s = shoal.add %a, %b : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %g = shoal.weight "g" : tensor<8xf32>
  %y = shoal.layer_norm %s, %g {epsilon = 1.0e-6 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %s, %y : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// Scores divided by sqrt(d), a causal mask, softmax over keys: one op with
// scale 1/2.
// CHECK-LABEL: func.func @attention
// CHECK-NEXT: %[[M:.*]] = shoal.weight "mask"
// CHECK-NEXT: %[[O:.*]] = shoal.attention %arg0, %arg1, %arg2, %[[M]] {scale = 5.000000e-01 : f32} : (tensor<2x3x5x4xf32>, tensor<2x3x4x6xf32>, tensor<2x3x6x7xf32>, tensor<5x6xf32>) -> tensor<2x3x5x7xf32>
// CHECK-NEXT: return %[[O]]
func.func @attention(%q: tensor<2x3x5x4xf32>, %kt: tensor<2x3x4x6xf32>, %v: tensor<2x3x6x7xf32>) -> tensor<2x3x5x7xf32> {
  %s = shoal.matmul %q, %kt : (tensor<2x3x5x4xf32>, tensor<2x3x4x6xf32>) -> tensor<2x3x5x6xf32>
  %c = shoal.constant dense<2.0> : tensor<f32>
  %s1 = shoal.div %s, %c : (tensor<2x3x5x6xf32>, tensor<f32>) -> tensor<2x3x5x6xf32>
  %m = shoal.weight "mask" : tensor<5x6xf32>
  %s2 = shoal.add %s1, %m : (tensor<2x3x5x6xf32>, tensor<5x6xf32>) -> tensor<2x3x5x6xf32>
  %p = shoal.softmax %s2 : (tensor<2x3x5x6xf32>) -> tensor<2x3x5x6xf32>
  %o = shoal.matmul %p, %v : (tensor<2x3x5x6xf32>, tensor<2x3x6x7xf32>) -> tensor<2x3x5x7xf32>
  return %o : tensor<2x3x5x7xf32>
}

// -----

// Identity casts between the softmax and the product (Hugging Face LLaMA's
// `softmax(..., dtype=float32).to(q.dtype)` in float32) are part of the
// chain; a padding mask [B, 1, 1, S] broadcasts.
// CHECK-LABEL: func.func @attention_casts
// CHECK-NEXT: %[[O:.*]] = shoal.attention %arg0, %arg1, %arg2, %arg3 {scale = 2.500000e-01 : f32}
// CHECK-NEXT: return %[[O]]
func.func @attention_casts(%q: tensor<2x3x5x4xf32>, %kt: tensor<2x3x4x6xf32>, %v: tensor<2x3x6x7xf32>, %m: tensor<2x1x1x6xf32>) -> tensor<2x3x5x7xf32> {
  %s = shoal.matmul %q, %kt : (tensor<2x3x5x4xf32>, tensor<2x3x4x6xf32>) -> tensor<2x3x5x6xf32>
  %c = shoal.constant dense<4.0> : tensor<f32>
  %s1 = shoal.div %s, %c : (tensor<2x3x5x6xf32>, tensor<f32>) -> tensor<2x3x5x6xf32>
  %s2 = shoal.add %s1, %m : (tensor<2x3x5x6xf32>, tensor<2x1x1x6xf32>) -> tensor<2x3x5x6xf32>
  %p = shoal.softmax %s2 : (tensor<2x3x5x6xf32>) -> tensor<2x3x5x6xf32>
  %p1 = shoal.cast %p : (tensor<2x3x5x6xf32>) -> tensor<2x3x5x6xf32>
  %p2 = shoal.cast %p1 : (tensor<2x3x5x6xf32>) -> tensor<2x3x5x6xf32>
  %o = shoal.matmul %p2, %v : (tensor<2x3x5x6xf32>, tensor<2x3x6x7xf32>) -> tensor<2x3x5x7xf32>
  return %o : tensor<2x3x5x7xf32>
}

// -----

// Softmax over another axis is not attention.
// CHECK-LABEL: func.func @softmax_axis
// CHECK-NOT: shoal.attention
func.func @softmax_axis(%q: tensor<3x5x4xf32>, %kt: tensor<3x4x5xf32>, %v: tensor<3x5x7xf32>) -> tensor<3x5x7xf32> {
  %s = shoal.matmul %q, %kt : (tensor<3x5x4xf32>, tensor<3x4x5xf32>) -> tensor<3x5x5xf32>
  %c = shoal.constant dense<0.5> : tensor<f32>
  %s1 = shoal.mul %s, %c : (tensor<3x5x5xf32>, tensor<f32>) -> tensor<3x5x5xf32>
  %p = shoal.softmax %s1 {axis = 1 : i64} : (tensor<3x5x5xf32>) -> tensor<3x5x5xf32>
  %o = shoal.matmul %p, %v : (tensor<3x5x5xf32>, tensor<3x5x7xf32>) -> tensor<3x5x7xf32>
  return %o : tensor<3x5x7xf32>
}

// -----

// In f16 the constants are rounded (sqrt 2 is 1.4140625): they match within
// the type's precision, so f16 and bf16 models fuse too.
// CHECK-LABEL: func.func @gelu_f16
// CHECK: shoal.gelu %arg0 : (tensor<4x8xf16>) -> tensor<4x8xf16>
// CHECK-NOT: shoal.erf
func.func @gelu_f16(%x: tensor<4x8xf16>) -> tensor<4x8xf16> {
  %c0 = shoal.constant dense<1.41421356> : tensor<f16>
  %0 = shoal.div %x, %c0 : (tensor<4x8xf16>, tensor<f16>) -> tensor<4x8xf16>
  %1 = shoal.erf %0 : (tensor<4x8xf16>) -> tensor<4x8xf16>
  %c1 = shoal.constant dense<1.0> : tensor<f16>
  %2 = shoal.add %1, %c1 : (tensor<4x8xf16>, tensor<f16>) -> tensor<4x8xf16>
  %3 = shoal.mul %x, %2 : (tensor<4x8xf16>, tensor<4x8xf16>) -> tensor<4x8xf16>
  %c2 = shoal.constant dense<0.5> : tensor<f16>
  %4 = shoal.mul %3, %c2 : (tensor<4x8xf16>, tensor<f16>) -> tensor<4x8xf16>
  return %4 : tensor<4x8xf16>
}
