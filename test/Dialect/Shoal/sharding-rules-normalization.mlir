// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of softmax and the layer normalizations
// (lib/Dialect/Shoal/IR/ShoalShardingRules.cpp): the normalized axis (a
// softmax's) or axes (`axis..` of a layer normalization) are blocked, the
// others parallel; scale and bias map to the normalized axes.

// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<4x8xf32>, %dy: tensor<4x8xf32>) {
  // CHECK: shoal.softmax {{.*}}shoal.sharding_rule = "([i, j]) -> ([i, j]) {i=4, j=8} blocked={j}"
  %0 = shoal.softmax %x {axis = -1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.softmax {{.*}}shoal.sharding_rule = "([i, j]) -> ([i, j]) {i=4, j=8} blocked={i}"
  %1 = shoal.softmax %x {axis = 0 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.softmax_grad {{.*}}shoal.sharding_rule = "([i, j], [i, j]) -> ([i, j]) {i=4, j=8} blocked={j}"
  %2 = shoal.softmax_grad %0, %dy {axis = -1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// CHECK-LABEL: func.func @layer_norm
func.func @layer_norm(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %g2: tensor<4x8xf32>, %g3: tensor<1x8xf32>) {
  // CHECK: shoal.layer_norm {{.*}}shoal.sharding_rule = "([i, j, k], [k], [k]) -> ([i, j, k]) {i=2, j=4, k=8} blocked={k}"
  %0 = shoal.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // Normalized over the last two dimensions.
  // CHECK: shoal.layer_norm {{.*}}shoal.sharding_rule = "([i, j, k], [j, k]) -> ([i, j, k]) {i=2, j=4, k=8} blocked={j, k}"
  %1 = shoal.layer_norm %x, %g2 {axis = 1 : i64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  // A scale that broadcasts over a normalized axis.
  // CHECK: shoal.layer_norm {{.*}}shoal.sharding_rule = "([i, j, k], [1, k]) -> ([i, j, k]) {i=2, j=4, k=8} blocked={j, k}"
  %2 = shoal.layer_norm %x, %g3 {axis = 1 : i64} : (tensor<2x4x8xf32>, tensor<1x8xf32>) -> tensor<2x4x8xf32>
  // RMSNorm has the same rule.
  // CHECK: shoal.layer_norm {{.*}}shoal.sharding_rule = "([i, j, k], [k]) -> ([i, j, k]) {i=2, j=4, k=8} blocked={k}"
  %3 = shoal.layer_norm %x, %g {epsilon = 1.0e-06 : f32, rms = true} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return
}

// CHECK-LABEL: func.func @add_layer_norm
func.func @add_layer_norm(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>, %g: tensor<8xf32>, %beta: tensor<8xf32>) {
  // Two data operands and two results (the sum and the normalized sum).
  // CHECK: shoal.add_layer_norm {{.*}}shoal.sharding_rule = "([i, j], [i, j], [j], [j]) -> ([i, j], [i, j]) {i=4, j=8} blocked={j}"
  %s, %y = shoal.add_layer_norm %a, %b, %g, %beta {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// CHECK-LABEL: func.func @layer_norm_grads
func.func @layer_norm_grads(%x: tensor<2x4x8xf32>, %g: tensor<8xf32>, %dy: tensor<2x4x8xf32>) {
  // Operands (input, scale, grad): the grad is laid out as the input.
  // CHECK: shoal.layer_norm_grad {{.*}}shoal.sharding_rule = "([i, j, k], [k], [i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8} blocked={k}"
  %0 = shoal.layer_norm_grad %x, %g, %dy {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // The scale's gradient sums over the other dimensions: reductions.
  // CHECK: shoal.layer_norm_scale_grad {{.*}}shoal.sharding_rule = "([i, j, k], [i, j, k]) -> ([k]) {i=2, j=4, k=8} reduction={i, j} blocked={k}"
  %1 = shoal.layer_norm_scale_grad %x, %dy {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<8xf32>
  // CHECK: shoal.layer_norm_scale_grad {{.*}}shoal.sharding_rule = "([i, j, k], [i, j, k]) -> ([j, k]) {i=2, j=4, k=8} reduction={i} blocked={j, k}"
  %2 = shoal.layer_norm_scale_grad %x, %dy {axis = 1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<4x8xf32>
  return
}
