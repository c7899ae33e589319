// Vocabulary-parallel embedding and cross-entropy (Megatron-LM's
// VocabParallelEmbedding and vocab_parallel_cross_entropy) under split(2):
// a tied LM head over a vocabulary of 33 rows, which 2 ranks split unevenly
// (blocks of 17, the second padded). shoal-propagate-sharding splits the
// embedding table's rows over tp (a weight with more rows than columns,
// looked up by token ids); the LM head reads the same split table, so the
// logits come out split over the classes; shoal-partition rewrites the
// lookup into a block lookup and an all_reduce, and the loss and its
// gradient into vocab_max / vocab_stats with an all_reduce max and an
// all_reduce sum per position. Nothing gathers the table or the logits.
// RUN: shoal-opt %s --shoal-autodiff --shoal-annotate="spec=%inputs/spec_split2.yaml" --shoal-form-taskgraphs="world-size=2" --shoal-propagate-sharding --shoal-partition | FileCheck %s

// CHECK-LABEL: shoal.task_graph "model" split(2)
// CHECK: %[[W:.*]] = shoal.weight "wte" {{.*}}shoal.sharding = [#shoal.sharding<{{\[}}["tp"], []]>]} : tensor<17x8xf32>
// CHECK: %[[E:.*]] = shoal.gather %[[W]], %{{.*}} {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<17x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[X:.*]] = shoal.all_reduce %[[E]] over ["tp"] {shoal.reason = "vocabulary-parallel embedding{{.*}}"} : tensor<2x4x8xf32>
// CHECK: %[[WT:.*]] = shoal.transpose %[[W]] {{.*}} : (tensor<17x8xf32>) -> tensor<8x17xf32>
// CHECK: %[[L:.*]] = shoal.matmul %[[X]], %[[WT]] : (tensor<2x4x8xf32>, tensor<8x17xf32>) -> tensor<2x4x17xf32>
// CHECK: %[[LM:.*]] = shoal.vocab_max %[[L]] {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>) -> tensor<2x4xf32>
// CHECK: %[[M:.*]] = shoal.all_reduce %[[LM]] over ["tp"] {reduction = "max", {{.*}}} : tensor<2x4xf32>
// CHECK: %[[LS:.*]] = shoal.vocab_stats %[[L]], %[[LAB:.*]], %[[M]] {shard_axes = ["tp"], shard_size = 33 : i64} : (tensor<2x4x17xf32>, tensor<2x4xi64>, tensor<2x4xf32>) -> tensor<2x4x2xf32>
// CHECK: %[[S:.*]] = shoal.all_reduce %[[LS]] over ["tp"] {{.*}} : tensor<2x4x2xf32>
// CHECK: shoal.vocab_cross_entropy %[[M]], %[[S]], %[[LAB]] : (tensor<2x4xf32>, tensor<2x4x2xf32>, tensor<2x4xi64>) -> tensor<2x4xf32>
// The gradient reuses the forward's max and sums.
// CHECK: %[[G:.*]] = shoal.vocab_cross_entropy_grad %[[L]], %[[LAB]], %{{.*}}, %[[M]], %[[S]] {shard_axes = ["tp"], shard_size = 33 : i64, shoal.phase = "backward"} : ({{.*}}) -> tensor<2x4x17xf32>
// CHECK-NOT: all_gather
// The table's gradient: the LM head's block and the lookup's block.
// CHECK: %[[GE:.*]] = shoal.gather_grad %{{.*}}, %{{.*}} {shard_axes = ["tp"], shard_size = 33 : i64, shoal.phase = "backward"} : (tensor<2x4xi64>, tensor<2x4x8xf32>) -> tensor<17x8xf32>
// CHECK-NOT: all_gather
// CHECK-NOT: local_slice
// CHECK: shoal.add %{{.*}}, %[[GE]] {shoal.grad_of = ["wte"]{{.*}}} : (tensor<17x8xf32>, tensor<17x8xf32>) -> tensor<17x8xf32>

module attributes {shoal.source = "/models/lm.onnx"} {
  func.func @main(%ids: tensor<2x4xi64> {shoal.name = "input_ids"}) -> (tensor<2x4x33xf32> {shoal.name = "logits"}) {
    %wte = shoal.weight "wte" : tensor<33x8xf32> loc("wte")
    %e = shoal.gather %wte, %ids {axis = 0 : i64} : (tensor<33x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32> loc("/wte/Gather")
    %wt = shoal.transpose %wte {perm = array<i64: 1, 0>} : (tensor<33x8xf32>) -> tensor<8x33xf32> loc("/lm_head/Transpose")
    %l = shoal.matmul %e, %wt : (tensor<2x4x8xf32>, tensor<8x33xf32>) -> tensor<2x4x33xf32> loc("/lm_head/MatMul")
    return %l : tensor<2x4x33xf32>
  }
}
