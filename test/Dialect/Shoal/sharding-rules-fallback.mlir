// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// An ONNX op that no rule of OnnxOp::getShardingRule knows (lib/Dialect/
// Shoal/IR/ShoalShardingRules.cpp) is computed whole on every rank: every
// dimension of every operand and result gets a blocked factor of its own.

// CHECK-LABEL: func.func @unknown
func.func @unknown(%x: tensor<4x8xf32>, %a: tensor<4x3xf32>) {
  // CHECK: shoal.onnx "LpNormalization"{{.*}}shoal.sharding_rule = "([i, j]) -> ([k, l]) {i=4, j=8, k=4, l=8} blocked={i, j, k, l}"
  %0 = shoal.onnx "LpNormalization"(%x) {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.onnx "Einsum"{{.*}}shoal.sharding_rule = "([i, j], [k, l]) -> ([m, n]) {i=4, j=8, k=4, l=3, m=8, n=3} blocked={i, j, k, l, m, n}"
  %1 = shoal.onnx "Einsum"(%x, %a) {equation = "ij,ik->jk"} : (tensor<4x8xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  return
}
