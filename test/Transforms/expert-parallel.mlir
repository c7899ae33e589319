// Expert parallelism: split(2) over a mixture of experts with stacked expert
// weights puts 2 of the 4 experts on each device and keeps the tokens split
// over the same devices; all_to_all trades one split for the other.
// RUN: shoal-opt %inputs/moe_ep.mlir --shoal-parallelize="spec=%inputs/spec_ep.yaml world-size=2 fuse=0" | FileCheck %s

// The router runs on this rank's 16 of the 32 tokens.
// CHECK: shoal.task_graph "moe" split(2)
// CHECK: shoal.matmul %{{.*}} : (tensor<16x32xf32>, tensor<32x4xf32>) -> tensor<16x4xf32>
// Each rank loads and runs its 2 experts.
// CHECK: shoal.weight "w1" {shoal.global_shape = array<i64: 4, 32, 64>, shoal.sharding = [#shoal.sharding<{{\[\[}}"tp"], [], []]>]} : tensor<2x32x64xf32>
// Dispatch: [experts, tokens/2, C] -> [experts/2, tokens, C].
// CHECK: %[[D:.*]] = shoal.all_to_all %{{.*}} split 0 concat 1 over ["tp"] : (tensor<4x16x32xf32>) -> tensor<2x32x32xf32>
// CHECK: shoal.matmul %[[D]], %{{.*}} : (tensor<2x32x32xf32>, tensor<2x32x64xf32>) -> tensor<2x32x64xf32>
// CHECK: shoal.matmul %{{.*}} : (tensor<2x32x64xf32>, tensor<2x64x32xf32>) -> tensor<2x32x32xf32>
// Combine: back to this rank's tokens, then the sum over experts is local.
// CHECK: %[[C:.*]] = shoal.all_to_all %{{.*}} split 1 concat 0 over ["tp"] : (tensor<2x32x32xf32>) -> tensor<4x16x32xf32>
// CHECK: shoal.reduce_sum %[[C]] {axes = array<i64: 0>, keepdims = false} : (tensor<4x16x32xf32>) -> tensor<16x32xf32>
// CHECK-NOT: shoal.all_gather
// CHECK-NOT: shoal.all_reduce
// CHECK: shoal.yield
