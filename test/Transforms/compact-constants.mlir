// shoal-compact-constants: an attention's constant mask is stored at its
// broadcast shape, and equal constants of a block are one buffer.
// RUN: shoal-opt %s --shoal-compact-constants | FileCheck %s

// The mask [2, 1, 2, 2] is equal along the batch: [1, 1, 2, 2]; its copy
// in the backward is the same constant; the rotary-like table used by two
// products is one; a constant that differs along the batch keeps it.
// CHECK-LABEL: func.func @attention
// CHECK: %[[M:.*]] = shoal.constant dense<{{\[\[\[\[}}0.000000e+00, -1.000000e+04], [0.000000e+00, 0.000000e+00]]]]> : tensor<1x1x2x2xf32>
// CHECK-NEXT: shoal.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[M]]
// CHECK-NEXT: %[[T:.*]] = shoal.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: shoal.mul %{{.*}}, %[[T]]
// CHECK-NEXT: shoal.mul %{{.*}}, %[[T]]
// CHECK-NEXT: shoal.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[M]]
// CHECK-NEXT: return
func.func @attention(%q: tensor<2x1x2x2xf32>, %kt: tensor<2x1x2x2xf32>, %v: tensor<2x1x2x2xf32>, %d: tensor<2x1x2x2xf32>) -> (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) {
  %m = shoal.constant dense<[[[[0.0, -1.0e4], [0.0, 0.0]]], [[[0.0, -1.0e4], [0.0, 0.0]]]]> : tensor<2x1x2x2xf32>
  %o = shoal.attention %q, %kt, %v, %m {scale = 5.000000e-01 : f32} : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %t1 = shoal.constant dense<0.5> : tensor<f32>
  %a = shoal.mul %o, %t1 : (tensor<2x1x2x2xf32>, tensor<f32>) -> tensor<2x1x2x2xf32>
  %t2 = shoal.constant {shoal.phase = "backward"} dense<0.5> : tensor<f32>
  %b = shoal.mul %a, %t2 : (tensor<2x1x2x2xf32>, tensor<f32>) -> tensor<2x1x2x2xf32>
  %m2 = shoal.constant {shoal.phase = "backward"} dense<[[[[0.0, -1.0e4], [0.0, 0.0]]], [[[0.0, -1.0e4], [0.0, 0.0]]]]> : tensor<2x1x2x2xf32>
  %dq, %dkt, %dv = shoal.attention_grad %b, %q, %kt, %v, %m2 {scale = 5.000000e-01 : f32, shoal.phase = "backward"} : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>)
  return %dq, %dkt, %dv : tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>
}

// A padding mask differs along the batch and keeps it (its rows, equal
// along the queries, become [2, 1, 1, 2]); a splat mask is one element; a
// mask another op reads too keeps its shape, and the loss scale is never
// merged.
// CHECK-LABEL: func.func @kept
// CHECK: %[[P:.*]] = shoal.constant dense<{{\[\[\[\[}}0.000000e+00, -1.000000e+04]]], {{\[\[\[}}0.000000e+00, 0.000000e+00]]]]> : tensor<2x1x1x2xf32>
// CHECK-NEXT: shoal.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[P]]
// CHECK-NEXT: %[[Z:.*]] = shoal.constant dense<0.000000e+00> : tensor<1x1x1x1xf32>
// CHECK-NEXT: shoal.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[Z]]
// CHECK-NEXT: %[[W:.*]] = shoal.constant dense<{{.*}}> : tensor<2x1x2x2xf32>
// CHECK-NEXT: shoal.attention %{{.*}}, %{{.*}}, %{{.*}}, %[[W]]
// CHECK-NEXT: shoal.add %{{.*}}, %[[W]]
// CHECK-NEXT: %[[S1:.*]] = shoal.constant {shoal.loss_scale} dense<1.024000e+03> : tensor<f32>
// CHECK-NEXT: shoal.mul %{{.*}}, %[[S1]]
// CHECK-NEXT: %[[S2:.*]] = shoal.constant {shoal.loss_scale} dense<1.024000e+03> : tensor<f32>
// CHECK-NEXT: shoal.mul %{{.*}}, %[[S2]]
func.func @kept(%q: tensor<2x1x2x2xf32>, %kt: tensor<2x1x2x2xf32>, %v: tensor<2x1x2x2xf32>) -> (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) {
  %p = shoal.constant dense<[[[[0.0, -1.0e4], [0.0, -1.0e4]]], [[[0.0, 0.0], [0.0, 0.0]]]]> : tensor<2x1x2x2xf32>
  %o = shoal.attention %q, %kt, %v, %p {scale = 5.000000e-01 : f32} : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %z = shoal.constant dense<0.0> : tensor<2x1x2x2xf32>
  %o2 = shoal.attention %q, %kt, %v, %z {scale = 5.000000e-01 : f32} : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %w = shoal.constant dense<[[[[1.0, 2.0], [1.0, 2.0]]], [[[1.0, 2.0], [1.0, 2.0]]]]> : tensor<2x1x2x2xf32>
  %o3 = shoal.attention %q, %kt, %v, %w {scale = 5.000000e-01 : f32} : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %x = shoal.add %o3, %w : (tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>) -> tensor<2x1x2x2xf32>
  %s1 = shoal.constant {shoal.loss_scale} dense<1024.0> : tensor<f32>
  %y = shoal.mul %o2, %s1 : (tensor<2x1x2x2xf32>, tensor<f32>) -> tensor<2x1x2x2xf32>
  %s2 = shoal.constant {shoal.loss_scale} dense<1024.0> : tensor<f32>
  %y2 = shoal.mul %y, %s2 : (tensor<2x1x2x2xf32>, tensor<f32>) -> tensor<2x1x2x2xf32>
  return %o, %x, %y2 : tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>, tensor<2x1x2x2xf32>
}
