// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of the reductions (lib/Dialect/Shoal/IR/
// ShoalShardingRules.cpp): a sum over a split dimension is a sum of partial
// sums (a reduction factor); a mean, an arg-max or a top-k needs the
// dimension whole (blocked).

// CHECK-LABEL: func.func @reduce
func.func @reduce(%x: tensor<4x8xf32>, %y: tensor<2x4x8xf32>) {
  // CHECK: shoal.reduce_mean {{.*}}shoal.sharding_rule = "([i, j]) -> ([i, 1]) {i=4, j=8} blocked={j}"
  %0 = shoal.reduce_mean %x {axes = array<i64: -1>} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  // CHECK: shoal.reduce_mean {{.*}}shoal.sharding_rule = "([i, j]) -> ([j]) {i=4, j=8} blocked={i}"
  %1 = shoal.reduce_mean %x {axes = array<i64: 0>, keepdims = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  // CHECK: shoal.reduce_sum {{.*}}shoal.sharding_rule = "([i, j]) -> ([j]) {i=4, j=8} reduction={i}"
  %2 = shoal.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : (tensor<4x8xf32>) -> tensor<8xf32>
  // CHECK: shoal.reduce_sum {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([1, j, 1]) {i=2, j=4, k=8} reduction={i, k}"
  %3 = shoal.reduce_sum %y {axes = array<i64: 0, -1>} : (tensor<2x4x8xf32>) -> tensor<1x4x1xf32>
  return
}

// CHECK-LABEL: func.func @onnx_arg_and_topk
func.func @onnx_arg_and_topk(%x: tensor<4x8xf32>) {
  // The kept dimension of the index is a new factor of size 1.
  // CHECK: shoal.onnx "ArgMax"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, k]) {i=4, j=8, k=1} blocked={j, k}"
  %0 = shoal.onnx "ArgMax"(%x) {axis = 1 : i64, keepdims = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x1xi64>
  // CHECK: shoal.onnx "ArgMin"{{.*}}shoal.sharding_rule = "([i, j]) -> ([j]) {i=4, j=8} blocked={i}"
  %1 = shoal.onnx "ArgMin"(%x) {axis = 0 : i64, keepdims = 0 : i64} : (tensor<4x8xf32>) -> tensor<8xi64>
  // TopK (along the last axis by default) shares the other dimensions.
  // CHECK: shoal.onnx "TopK"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, k], [i, l]) {i=4, j=8, k=2, l=2} blocked={j, k, l}"
  %v, %i = shoal.onnx "TopK"(%x) {k = 2 : i64} : (tensor<4x8xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
  return
}
