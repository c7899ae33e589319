// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of the matrix products (lib/Dialect/Shoal/IR/
// ShoalShardingRules.cpp): batch dimensions (broadcast), M and N are
// parallel factors, the contracted K a reduction factor (split, it leaves
// partial sums).

// CHECK-LABEL: func.func @matmul
func.func @matmul(%a: tensor<4x16xf32>, %b: tensor<16x8xf32>, %x: tensor<2x3x4x16xf32>, %y: tensor<3x16x8xf32>, %v: tensor<16xf32>, %z: tensor<1x16x8xf32>, %u: tensor<2x4x16xf32>) {
  // CHECK: shoal.matmul {{.*}}shoal.sharding_rule = "([i, k], [k, j]) -> ([i, j]) {i=4, j=8, k=16} reduction={k}"
  %0 = shoal.matmul %a, %b : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  // Batch dimensions broadcast from the right: [2, 3] and [3].
  // CHECK: shoal.matmul {{.*}}shoal.sharding_rule = "([i, j, k, m], [j, m, l]) -> ([i, j, k, l]) {i=2, j=3, k=4, l=8, m=16} reduction={m}"
  %1 = shoal.matmul %x, %y : (tensor<2x3x4x16xf32>, tensor<3x16x8xf32>) -> tensor<2x3x4x8xf32>
  // A size-1 batch dimension that broadcasts has no factor.
  // CHECK: shoal.matmul {{.*}}shoal.sharding_rule = "([i, j, l], [1, l, k]) -> ([i, j, k]) {i=2, j=4, k=8, l=16} reduction={l}"
  %2 = shoal.matmul %u, %z : (tensor<2x4x16xf32>, tensor<1x16x8xf32>) -> tensor<2x4x8xf32>
  // A vector operand: M (or N) is a factor of size 1 in no dimension.
  // CHECK: shoal.matmul {{.*}}shoal.sharding_rule = "([k], [k, j]) -> ([j]) {i=1, j=8, k=16} reduction={k}"
  %3 = shoal.matmul %v, %b : (tensor<16xf32>, tensor<16x8xf32>) -> tensor<8xf32>
  // CHECK: shoal.matmul {{.*}}shoal.sharding_rule = "([i, k], [k]) -> ([i]) {i=4, j=1, k=16} reduction={k}"
  %4 = shoal.matmul %a, %v : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4xf32>
  return
}

// CHECK-LABEL: func.func @gemm
func.func @gemm(%a: tensor<4x16xf32>, %b: tensor<16x8xf32>, %at: tensor<16x4xf32>, %bt: tensor<8x16xf32>, %c: tensor<8xf32>, %c2: tensor<4x1xf32>) {
  // CHECK: shoal.gemm {{.*}}shoal.sharding_rule = "([i, k], [k, j]) -> ([i, j]) {i=4, j=8, k=16} reduction={k}"
  %0 = shoal.gemm %a, %b : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  // transA and transB swap the operands' dimensions; C broadcasts.
  // CHECK: shoal.gemm {{.*}}shoal.sharding_rule = "([k, i], [j, k], [j]) -> ([i, j]) {i=4, j=8, k=16} reduction={k}"
  %1 = shoal.gemm %at, %bt, %c {transA = true, transB = true} : (tensor<16x4xf32>, tensor<8x16xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.gemm {{.*}}shoal.sharding_rule = "([i, k], [k, j], [i, 1]) -> ([i, j]) {i=4, j=8, k=16} reduction={k}"
  %2 = shoal.gemm %a, %b, %c2 : (tensor<4x16xf32>, tensor<16x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  return
}
