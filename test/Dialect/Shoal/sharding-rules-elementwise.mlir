// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of the elementwise ops (getElementwiseShardingRule in
// lib/Dialect/Shoal/IR/ShoalShardingRules.cpp): one parallel factor per
// result dimension; an operand's dimensions map to them right-aligned, and
// a dimension that broadcasts (size 1, or missing) has none.

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x1xf32>, %s: tensor<f32>) {
  // CHECK: shoal.add {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %0 = shoal.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.sub {{.*}}shoal.sharding_rule = "([i, j], [i, 1]) -> ([i, j]) {i=4, j=8}"
  %1 = shoal.sub %a, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.mul {{.*}}shoal.sharding_rule = "([], [i, j]) -> ([i, j]) {i=4, j=8}"
  %2 = shoal.mul %s, %a : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.div {{.*}}shoal.sharding_rule = "([i, j], [i, j]) -> ([i, j]) {i=4, j=8}"
  %3 = shoal.div %a, %a : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.pow {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %4 = shoal.pow %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.max {{.*}}shoal.sharding_rule = "([i, j], [i, 1]) -> ([i, j]) {i=4, j=8}"
  %5 = shoal.max %a, %c : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  // CHECK: shoal.min {{.*}}shoal.sharding_rule = "([], [i, j]) -> ([i, j]) {i=4, j=8}"
  %6 = shoal.min %s, %a : (tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // Operands of rank 0 and a result of rank 0: no factors.
  // CHECK: shoal.add {{.*}}shoal.sharding_rule = "([], []) -> ([]) {}"
  %r0 = shoal.add %s, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  // Both operands broadcast: [4, 1] and [8] to [4, 8].
  // CHECK: shoal.mul {{.*}}shoal.sharding_rule = "([i, 1], [j]) -> ([i, j]) {i=4, j=8}"
  %r1 = shoal.mul %c, %b : (tensor<4x1xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// CHECK-LABEL: func.func @compare_and_logic
func.func @compare_and_logic(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %p: tensor<4x8xi1>, %q: tensor<4x1xi1>) {
  // CHECK: shoal.equal {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %0 = shoal.equal %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: shoal.less {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %1 = shoal.less %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: shoal.greater {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %2 = shoal.greater %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: shoal.less_or_equal {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %3 = shoal.less_or_equal %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: shoal.greater_or_equal {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=8}"
  %4 = shoal.greater_or_equal %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: shoal.and {{.*}}shoal.sharding_rule = "([i, j], [i, 1]) -> ([i, j]) {i=4, j=8}"
  %l0 = shoal.and %p, %q : (tensor<4x8xi1>, tensor<4x1xi1>) -> tensor<4x8xi1>
  // CHECK: shoal.or {{.*}}shoal.sharding_rule = "([i, j], [i, 1]) -> ([i, j]) {i=4, j=8}"
  %l1 = shoal.or %p, %q : (tensor<4x8xi1>, tensor<4x1xi1>) -> tensor<4x8xi1>
  // CHECK: shoal.xor {{.*}}shoal.sharding_rule = "([i, j], [i, 1]) -> ([i, j]) {i=4, j=8}"
  %l2 = shoal.xor %p, %q : (tensor<4x8xi1>, tensor<4x1xi1>) -> tensor<4x8xi1>
  // CHECK: shoal.not {{.*}}shoal.sharding_rule = "([i, j]) -> ([i, j]) {i=4, j=8}"
  %n = shoal.not %p : (tensor<4x8xi1>) -> tensor<4x8xi1>
  return
}

// CHECK-LABEL: func.func @unary
func.func @unary(%a: tensor<2x4x8xf32>) {
  // CHECK: shoal.erf {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %0 = shoal.erf %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.tanh {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %1 = shoal.tanh %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.relu {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %2 = shoal.relu %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.sqrt {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %3 = shoal.sqrt %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.exp {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %4 = shoal.exp %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.neg {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %5 = shoal.neg %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.sigmoid {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %6 = shoal.sigmoid %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.sin {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %7 = shoal.sin %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.cos {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %8 = shoal.cos %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.abs {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %9 = shoal.abs %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.log {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %10 = shoal.log %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.reciprocal {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %11 = shoal.reciprocal %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.floor {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %12 = shoal.floor %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // CHECK: shoal.ceil {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %13 = shoal.ceil %a : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// CHECK-LABEL: func.func @where_cast_expand
func.func @where_cast_expand(%c: tensor<4x4xi1>, %x: tensor<f32>, %y: tensor<2x4x4xf32>, %i: tensor<4xi64>, %e: tensor<4x1xf32>) {
  // CHECK: shoal.where {{.*}}shoal.sharding_rule = "([j, k], [], [i, j, k]) -> ([i, j, k]) {i=2, j=4, k=4}"
  %0 = shoal.where %c, %x, %y : (tensor<4x4xi1>, tensor<f32>, tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  // CHECK: shoal.cast {{.*}}shoal.sharding_rule = "([i]) -> ([i]) {i=4}"
  %1 = shoal.cast %i : (tensor<4xi64>) -> tensor<4xf32>
  // CHECK: shoal.expand {{.*}}shoal.sharding_rule = "([i, 1]) -> ([i, j]) {i=4, j=16}"
  %2 = shoal.expand %e : (tensor<4x1xf32>) -> tensor<4x16xf32>
  return
}

// GELU and its gradient (fused ops) are elementwise, with the bias
// broadcast.
// CHECK-LABEL: func.func @gelu
func.func @gelu(%x: tensor<4x16xf32>, %b: tensor<16xf32>, %dy: tensor<4x16xf32>) {
  // CHECK: shoal.gelu {{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=4, j=16}"
  %0 = shoal.gelu %x, %b : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  // CHECK: shoal.gelu {{.*}}shoal.sharding_rule = "([i, j]) -> ([i, j]) {i=4, j=16}"
  %1 = shoal.gelu %x {approximate = "tanh"} : (tensor<4x16xf32>) -> tensor<4x16xf32>
  // CHECK: shoal.gelu_grad {{.*}}shoal.sharding_rule = "([i, j], [i, j], [j]) -> ([i, j]) {i=4, j=16}"
  %2 = shoal.gelu_grad %dy, %x, %b : (tensor<4x16xf32>, tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return
}

// ONNX ops with the elementwise rule.
// CHECK-LABEL: func.func @onnx_elementwise
func.func @onnx_elementwise(%x: tensor<2x4xf32>, %y: tensor<4xf32>, %e: tensor<2x1xf32>) {
  // CHECK: shoal.onnx "HardSigmoid"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, j]) {i=2, j=4}"
  %0 = shoal.onnx "HardSigmoid"(%x) {alpha = 2.500000e-01 : f32, beta = 5.000000e-01 : f32} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: shoal.onnx "HardSwish"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, j]) {i=2, j=4}"
  %1 = shoal.onnx "HardSwish"(%x) {} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: shoal.onnx "Mod"{{.*}}shoal.sharding_rule = "([i, j], [j]) -> ([i, j]) {i=2, j=4}"
  %2 = shoal.onnx "Mod"(%x, %y) {fmod = 1 : i64} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  // An Expand of one operand (its shape folded) broadcasts.
  // CHECK: shoal.onnx "Expand"{{.*}}shoal.sharding_rule = "([i, 1]) -> ([i, j]) {i=2, j=4}"
  %3 = shoal.onnx "Expand"(%e) {} : (tensor<2x1xf32>) -> tensor<2x4xf32>
  return
}
