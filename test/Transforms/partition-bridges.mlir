// RUN: shoal-opt %s --shoal-parallelize="spec=%inputs/spec_mid_split.yaml world-size=4" | FileCheck %s

// replicate -> split -> replicate on a 2 x 2 mesh. The replicate parts split
// the batch 4 ways; the split part 2 ways (over dp), so its input is
// gathered over tp, and its output, split over dp only, is sliced further
// over tp with no communication.
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<1x8xf32>
// CHECK: shoal.task_graph "default" replicate(2) {{.*}} -> tensor<1x8xf32>
// CHECK: shoal.task_graph "mid" split(2)
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<1x8xf32>):
// CHECK-NEXT: shoal.all_gather %[[A]] dim 0 over ["tp"] : (tensor<1x8xf32>) -> tensor<2x8xf32>
// CHECK: shoal.all_reduce
// CHECK: shoal.task_graph "default.1" replicate(2)
// CHECK-NEXT: ^bb0(%[[B:.*]]: tensor<2x8xf32>):
// CHECK-NEXT: shoal.local_slice %[[B]] dim 0 over ["tp"] : (tensor<2x8xf32>) -> tensor<1x8xf32>
// CHECK-NOT: shoal.all_gather
// CHECK: return
func.func @main(%x: tensor<4x8xf32> {shoal.name = "x"}) -> (tensor<4x8xf32> {shoal.name = "y"}) {
  %0 = shoal.relu %x : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/pre/Relu")
  %w1 = shoal.weight "w1" : tensor<8x16xf32>
  %1 = shoal.matmul %0, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32> loc("/mid/fc1/MatMul")
  %w2 = shoal.weight "w2" : tensor<16x8xf32>
  %2 = shoal.matmul %1, %w2 : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32> loc("/mid/fc2/MatMul")
  %3 = shoal.relu %2 : (tensor<4x8xf32>) -> tensor<4x8xf32> loc("/post/Relu")
  return %3 : tensor<4x8xf32>
}
