// RUN: shoal-opt %s --shoal-parallelize="world-size=2" | FileCheck %s

// Merging the batch into a larger dimension keeps it split (it is the major
// factor); a sum over a split dimension sums partial sums (a mean over one
// would need it whole); a split that would cut a minor factor gathers
// instead.
// CHECK-LABEL: func.func @rules
// CHECK-SAME: %arg0: tensor<2x3x8xf32>
// CHECK: %[[R:.*]] = shoal.reshape %{{.*}} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK: %[[E:.*]] = shoal.exp %[[R]] : (tensor<6x8xf32>) -> tensor<6x8xf32>
// CHECK: %[[S:.*]] = shoal.reduce_sum %[[E]] {axes = array<i64: 0>} : (tensor<6x8xf32>) -> tensor<1x8xf32>
// CHECK: shoal.all_reduce %[[S]] over ["dp"] : tensor<1x8xf32>
// CHECK: %[[M:.*]] = shoal.reduce_mean %[[E]] {axes = array<i64: 1>} : (tensor<6x8xf32>) -> tensor<6x1xf32>
// CHECK: %[[T:.*]] = shoal.all_gather %{{.*}} dim 0 over ["dp"] : (tensor<2x3x8xf32>) -> tensor<4x3x8xf32>
// CHECK: shoal.reshape %[[T]] : (tensor<4x3x8xf32>) -> tensor<3x4x8xf32>
func.func @rules(%x: tensor<4x3x8xf32>) -> (tensor<1x8xf32>, tensor<12x1xf32>, tensor<3x4x8xf32>) {
  %r = shoal.reshape %x : (tensor<4x3x8xf32>) -> tensor<12x8xf32>
  %e = shoal.exp %r : (tensor<12x8xf32>) -> tensor<12x8xf32>
  %s = shoal.reduce_sum %e {axes = array<i64: 0>} : (tensor<12x8xf32>) -> tensor<1x8xf32>
  %m = shoal.reduce_mean %e {axes = array<i64: 1>} : (tensor<12x8xf32>) -> tensor<12x1xf32>
  %t = shoal.reshape %x : (tensor<4x3x8xf32>) -> tensor<3x4x8xf32>
  return %s, %m, %t : tensor<1x8xf32>, tensor<12x1xf32>, tensor<3x4x8xf32>
}
