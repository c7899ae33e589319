// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of the optimizer updates (getOptimizerShardingRule in
// lib/Dialect/Shoal/IR/ShoalShardingRules.cpp): every operand is laid out
// as the weight; they have no results.

// CHECK-LABEL: func.func @updates
func.func @updates(%w: tensor<4x8xf32>, %g: tensor<4x8xf32>, %m: tensor<4x8xf32>, %v: tensor<4x8xf32>, %b: tensor<8xf32>, %bg: tensor<8xf32>, %bm: tensor<8xf32>) {
  // CHECK: shoal.adamw {{.*}}shoal.sharding_rule = "([i, j], [i, j], [i, j], [i, j]) -> () {i=4, j=8}"
  shoal.adamw %w, %g, %m, %v {lr = 1.0e-03 : f64, beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64, weight_decay = 0.01 : f64, clip_norm = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.0 : f64} : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
  // CHECK: shoal.sgd {{.*}}shoal.sharding_rule = "([i], [i], [i]) -> () {i=8}"
  shoal.sgd %b, %bg, %bm {lr = 0.1 : f64, momentum = 0.9 : f64, weight_decay = 0.0 : f64, clip_norm = 0.0 : f64, warmup_steps = 0 : i64, total_steps = 0 : i64, min_lr = 0.0 : f64} : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
  // CHECK: shoal.assign {{.*}}shoal.sharding_rule = "([i], [i]) -> () {i=8}"
  shoal.assign %b, %bg : tensor<8xf32>, tensor<8xf32>
  return
}
