// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of the cross-entropy loss and its vocabulary-parallel
// pieces (lib/Dialect/Shoal/IR/ShoalShardingRules.cpp): the positions are
// parallel; the class axis of the loss is a vocabulary (shoal-partition
// makes a split one vocabulary-parallel), and the pieces' class and stats
// axes stay whole.

// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy(%logits: tensor<2x4x16xf32>, %labels: tensor<2x4xi64>, %dl: tensor<2x4xf32>) {
  // CHECK: shoal.softmax_cross_entropy {{.*}}shoal.sharding_rule = "([i, j, k], [i, j]) -> ([i, j]) {i=2, j=4, k=16} vocab={k}"
  %0 = shoal.softmax_cross_entropy %logits, %labels : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  // CHECK: shoal.softmax_cross_entropy_grad {{.*}}shoal.sharding_rule = "([i, j, k], [i, j], [i, j]) -> ([i, j, k]) {i=2, j=4, k=16} vocab={k}"
  %1 = shoal.softmax_cross_entropy_grad %logits, %labels, %dl : (tensor<2x4x16xf32>, tensor<2x4xi64>, tensor<2x4xf32>) -> tensor<2x4x16xf32>
  return
}

// CHECK-LABEL: func.func @vocab_pieces
func.func @vocab_pieces(%l: tensor<2x4x17xf32>, %ids: tensor<2x4xi64>, %d: tensor<2x4xf32>) {
  // CHECK: shoal.vocab_max {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j]) {i=2, j=4, k=17} blocked={k}"
  %lm = shoal.vocab_max %l {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>) -> tensor<2x4xf32>
  // CHECK: shoal.vocab_stats {{.*}}shoal.sharding_rule = "([i, j, k], [i, j], [i, j]) -> ([i, j, l]) {i=2, j=4, k=17, l=2} blocked={k, l}"
  %s = shoal.vocab_stats %l, %ids, %lm {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>, tensor<2x4xi64>, tensor<2x4xf32>) -> tensor<2x4x2xf32>
  // CHECK: shoal.vocab_cross_entropy {{.*}}shoal.sharding_rule = "([i, j], [i, j, k], [i, j]) -> ([i, j]) {i=2, j=4, k=2} blocked={k}"
  %loss = shoal.vocab_cross_entropy %lm, %s, %ids : (tensor<2x4xf32>, tensor<2x4x2xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
  // CHECK: shoal.vocab_cross_entropy_grad {{.*}}shoal.sharding_rule = "([i, j, k], [i, j], [i, j], [i, j], [i, j, l]) -> ([i, j, m]) {i=2, j=4, k=17, l=2, m=17} blocked={k, l, m}"
  %g = shoal.vocab_cross_entropy_grad %l, %ids, %d, %lm, %s {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>, tensor<2x4xi64>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4x2xf32>) -> tensor<2x4x17xf32>
  return
}
