// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of attention over q [.., T, D], kt [.., D, S] and
// v [.., S, E] (lib/Dialect/Shoal/IR/ShoalShardingRules.cpp): the batch
// dimensions, then t, d, sk and e. d (contracted) and sk (softmax's axis)
// stay whole; t and e split in the forward but not in the gradient, which
// sums over the queries (dkt, dv) and over e (dP).

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x6xf32>, %v: tensor<2x6x16xf32>, %m: tensor<4x6xf32>, %m3: tensor<1x4x6xf32>) {
  // CHECK: shoal.attention {{.*}}shoal.sharding_rule = "([i, j, k], [i, k, l], [i, l, m]) -> ([i, j, m]) {i=2, j=4, k=8, l=6, m=16} blocked={k, l}"
  %0 = shoal.attention %q, %kt, %v {scale = 0.125 : f32} : (tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>) -> tensor<2x4x16xf32>
  // The mask broadcasts to the scores [.., T, S].
  // CHECK: shoal.attention {{.*}}shoal.sharding_rule = "([i, j, k], [i, k, l], [i, l, m], [j, l]) -> ([i, j, m]) {i=2, j=4, k=8, l=6, m=16} blocked={k, l}"
  %1 = shoal.attention %q, %kt, %v, %m {scale = 0.125 : f32} : (tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>, tensor<4x6xf32>) -> tensor<2x4x16xf32>
  // CHECK: shoal.attention {{.*}}shoal.sharding_rule = "([i, j, k], [i, k, l], [i, l, m], [1, j, l]) -> ([i, j, m]) {i=2, j=4, k=8, l=6, m=16} blocked={k, l}"
  %2 = shoal.attention %q, %kt, %v, %m3 {scale = 0.125 : f32} : (tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>, tensor<1x4x6xf32>) -> tensor<2x4x16xf32>
  return
}

// CHECK-LABEL: func.func @attention_heads
func.func @attention_heads(%q: tensor<2x4x16x8xf32>, %kt: tensor<2x4x8x16xf32>, %v: tensor<2x4x16x8xf32>) {
  // Two batch dimensions (batch, heads).
  // CHECK: shoal.attention {{.*}}shoal.sharding_rule = "([i, j, k, l], [i, j, l, m], [i, j, m, n]) -> ([i, j, k, n]) {i=2, j=4, k=16, l=8, m=16, n=8} blocked={l, m}"
  %0 = shoal.attention %q, %kt, %v {scale = 0.125 : f32} : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// CHECK-LABEL: func.func @attention_grad
func.func @attention_grad(%dy: tensor<2x4x16xf32>, %q: tensor<2x4x8xf32>, %kt: tensor<2x8x6xf32>, %v: tensor<2x6x16xf32>, %m: tensor<4x6xf32>) {
  // Operands (dy, q, kt, v); results (dq, dkt, dv).
  // CHECK: shoal.attention_grad {{.*}}shoal.sharding_rule = "([i, j, m], [i, j, k], [i, k, l], [i, l, m]) -> ([i, j, k], [i, k, l], [i, l, m]) {i=2, j=4, k=8, l=6, m=16} blocked={j, k, l, m}"
  %0:3 = shoal.attention_grad %dy, %q, %kt, %v {scale = 0.125 : f32} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>) -> (tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>)
  // CHECK: shoal.attention_grad {{.*}}shoal.sharding_rule = "([i, j, m], [i, j, k], [i, k, l], [i, l, m], [j, l]) -> ([i, j, k], [i, k, l], [i, l, m]) {i=2, j=4, k=8, l=6, m=16} blocked={j, k, l, m}"
  %1:3 = shoal.attention_grad %dy, %q, %kt, %v, %m {scale = 0.125 : f32} : (tensor<2x4x16xf32>, tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>, tensor<4x6xf32>) -> (tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x16xf32>)
  return
}
