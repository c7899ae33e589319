// shoal-fuse's GELU forms: the tanh approximation as nn.GELU(approximate=
// "tanh") exports it (x^3 as x * x * x) and as Hugging Face's
// NewGELUActivation does (Pow(x, 3), the products in another order); the
// chains= option (gelu-erf: the erf form only, what a training compile
// fuses before shoal-autodiff); a chain across two scopes stays as it is.
// ERF-LABEL: func.func @tanh_torch
// ERF-NOT: shoal.gelu
// ERF: shoal.tanh
// ERF-LABEL: func.func @tanh_hf
// ERF-NOT: shoal.gelu
// ERF: shoal.tanh
// ERF-LABEL: func.func @only_gelu
// ERF: shoal.gelu %{{.*}} {shoal.scope = "mlp"}
// RUN: shoal-opt %s -split-input-file --shoal-fuse | FileCheck %s
// RUN: shoal-opt %s -split-input-file --shoal-fuse="chains=gelu" | FileCheck %s --check-prefix=ONLY
// RUN: shoal-opt %s -split-input-file --shoal-fuse="chains=gelu-erf" | FileCheck %s --check-prefix=ERF
// RUN: not shoal-opt %s -split-input-file --shoal-fuse="chains=gelu,layernorm" 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: error: shoal-fuse: unknown chain 'layernorm' in chains= (expected gelu, gelu-erf, add-layer-norm, attention or rms-norm)

// CHECK-LABEL: func.func @tanh_torch
// CHECK-NEXT: %[[B:.*]] = shoal.weight "b"
// CHECK-NEXT: %[[Y:.*]] = shoal.gelu %arg0, %[[B]] {approximate = "tanh"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @tanh_torch(%h: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %b = shoal.weight "b" : tensor<8xf32>
  %x = shoal.add %h, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %0 = shoal.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = shoal.mul %x, %0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %k = shoal.constant dense<0.044715> : tensor<f32>
  %2 = shoal.mul %k, %1 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = shoal.add %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = shoal.constant dense<0.797884583> : tensor<f32>
  %4 = shoal.mul %c, %3 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = shoal.tanh %4 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %one = shoal.constant dense<1.0> : tensor<f32>
  %6 = shoal.add %one, %5 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %7 = shoal.mul %x, %6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %half = shoal.constant dense<0.5> : tensor<f32>
  %8 = shoal.mul %half, %7 : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %8 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @tanh_hf
// CHECK-NEXT: %[[Y:.*]] = shoal.gelu %arg0 {approximate = "tanh"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NEXT: return %[[Y]]
func.func @tanh_hf(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = shoal.constant dense<0.5> : tensor<f32>
  %0 = shoal.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %three = shoal.constant dense<3.0> : tensor<f32>
  %1 = shoal.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %k = shoal.constant dense<0.044715> : tensor<f32>
  %2 = shoal.mul %1, %k : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = shoal.add %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c = shoal.constant dense<0.797884583> : tensor<f32>
  %4 = shoal.mul %3, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %5 = shoal.tanh %4 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %one = shoal.constant dense<1.0> : tensor<f32>
  %6 = shoal.add %5, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %7 = shoal.mul %0, %6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %7 : tensor<4x8xf32>
}

// -----

// Not GELU: the cube's coefficient is another (0.05), or a value of the
// chain is read elsewhere (the tanh).
// CHECK-LABEL: func.func @not_tanh_gelu
// CHECK-NOT: shoal.gelu
// CHECK: shoal.tanh
// CHECK-NOT: shoal.gelu
// CHECK: shoal.tanh
// CHECK-NOT: shoal.gelu
func.func @not_tanh_gelu(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %half = shoal.constant dense<0.5> : tensor<f32>
  %three = shoal.constant dense<3.0> : tensor<f32>
  %k = shoal.constant dense<0.05> : tensor<f32>
  %c = shoal.constant dense<0.797884583> : tensor<f32>
  %one = shoal.constant dense<1.0> : tensor<f32>
  %0 = shoal.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = shoal.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %2 = shoal.mul %1, %k : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = shoal.add %x, %2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = shoal.mul %3, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %5 = shoal.tanh %4 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = shoal.add %5, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %7 = shoal.mul %0, %6 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %k2 = shoal.constant dense<0.044715> : tensor<f32>
  %10 = shoal.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %11 = shoal.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %12 = shoal.mul %11, %k2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %13 = shoal.add %x, %12 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %14 = shoal.mul %13, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %15 = shoal.tanh %14 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %16 = shoal.add %15, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %17 = shoal.mul %10, %16 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %7, %17, %15 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// chains=gelu leaves add+LayerNorm alone; a GELU whose chain crosses a
// scope boundary (its Erf claimed by another scope) is not fused.
// CHECK-LABEL: func.func @only_gelu
// CHECK: shoal.add_layer_norm
// CHECK: shoal.erf
// ONLY-LABEL: func.func @only_gelu
// ONLY: shoal.gelu %{{.*}} {shoal.scope = "mlp"}
// ONLY: shoal.layer_norm
// ONLY: shoal.erf
func.func @only_gelu(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %g = shoal.weight "g" : tensor<8xf32>
  %r2 = shoal.constant dense<1.41421354> : tensor<f32>
  %one = shoal.constant dense<1.0> : tensor<f32>
  %half = shoal.constant dense<0.5> : tensor<f32>
  %0 = shoal.div %a, %r2 {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = shoal.erf %0 {shoal.scope = "mlp"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = shoal.add %1, %one {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = shoal.mul %a, %2 {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = shoal.mul %3, %half {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %s = shoal.add %4, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %n = shoal.layer_norm %s, %g : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %10 = shoal.div %b, %r2 {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %11 = shoal.erf %10 {shoal.scope = "attn"} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %12 = shoal.add %11, %one {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %13 = shoal.mul %b, %12 {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %14 = shoal.mul %13, %half {shoal.scope = "mlp"} : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = shoal.add %n, %14 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %n : tensor<4x8xf32>, tensor<4x8xf32>
}
