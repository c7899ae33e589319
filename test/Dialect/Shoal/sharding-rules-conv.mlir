// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of Conv, its gradients, the pools and BatchNormalization
// on [N, C, spatial...] (getChannelShardingRule in lib/Dialect/Shoal/IR/
// ShoalShardingRules.cpp). Every dimension first gets a blocked factor of
// its own (i, j, ... below; the ones the batch and channels replace stay
// in the rule unused); then the batch and the channels are shared:
// samples are independent, a Conv's input channels are a contraction and
// its output channels parallel; with group > 1 only the groups may split.
// Space and kernel dimensions stay whole.

// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>, %xg: tensor<2x4x9x9xf32>, %wg: tensor<4x2x3x3xf32>) {
  // X [v, w, ..], W [x, w, ..], B [x], Y [v, x, ..]: w the input channels
  // (a reduction), x the output channels.
  // CHECK: shoal.onnx "Conv"{{.*}}shoal.sharding_rule = "([v, w, k, l], [x, w, o, p], [x]) -> ([v, x, t, u]) {i=2, j=3, k=8, l=8, m=4, n=3, o=3, p=3, q=4, r=2, s=4, t=8, u=8, v=2, w=3, x=4} reduction={w} blocked={i, j, k, l, m, n, o, p, q, r, s, t, u}"
  %0 = shoal.onnx "Conv"(%x, %w, %b) {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
  // Two groups: channels are [group w, C / group]; only w may split.
  // CHECK: shoal.onnx "Conv"{{.*}}shoal.sharding_rule = "([v, wx, k, l], [wy, x, o, p], [wy]) -> ([v, wy, t, u]) {i=2, j=4, k=9, l=9, m=4, n=2, o=3, p=3, q=4, r=2, s=4, t=5, u=5, v=2, w=2, x=2, y=2} blocked={i, j, k, l, m, n, o, p, q, r, s, t, u, x, y}"
  %1 = shoal.onnx "Conv"(%xg, %wg, %b) {dilations = array<i64: 1, 1>, group = 2 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x9x9xf32>, tensor<4x2x3x3xf32>, tensor<4xf32>) -> tensor<2x4x5x5xf32>
  // Shapes that do not fit the channel pattern (3 channels in 2 groups):
  // only the batch is shared.
  // CHECK: shoal.onnx "Conv"{{.*}}shoal.sharding_rule = "([u, j, k, l], [m, n, o, p]) -> ([u, r, s, t]) {i=2, j=3, k=8, l=8, m=4, n=3, o=3, p=3, q=2, r=4, s=8, t=8, u=2} blocked={i, j, k, l, m, n, o, p, q, r, s, t}"
  %2 = shoal.onnx "Conv"(%x, %w) {group = 2 : i64, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  return
}

// CHECK-LABEL: func.func @conv_grads
func.func @conv_grads(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %dy: tensor<2x4x8x8xf32>) {
  // dX: the output channels z_1 are summed over, the input channels z
  // split.
  // CHECK: shoal.onnx "ConvInputGrad"{{.*}}shoal.sharding_rule = "([y, z, k, l], [z_1, z, o, p], [y, z_1, s, t]) -> ([y, z, w, x]) {i=2, j=3, k=8, l=8, m=4, n=3, o=3, p=3, q=2, r=4, s=8, t=8, u=2, v=3, w=8, x=8, y=2, z=3, z_1=4} reduction={z_1} blocked={i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x}"
  %0 = shoal.onnx "ConvInputGrad"(%x, %w, %dy) {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<2x4x8x8xf32>) -> tensor<2x3x8x8xf32>
  // dW sums over the batch u (the data-parallel all-reduce).
  // CHECK: shoal.onnx "ConvWeightGrad"{{.*}}shoal.sharding_rule = "([u, v, k, l], [u, w, o, p]) -> ([w, v, s, t]) {i=2, j=3, k=8, l=8, m=2, n=4, o=8, p=8, q=4, r=3, s=3, t=3, u=2, v=3, w=4} reduction={u} blocked={i, j, k, l, m, n, o, p, q, r, s, t}"
  %1 = shoal.onnx "ConvWeightGrad"(%x, %dy) {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<4x3x3x3xf32>
  // Shapes that do not fit the channel pattern: dX per sample, dW a sum
  // over the batch.
  // CHECK: shoal.onnx "ConvInputGrad"{{.*}}shoal.sharding_rule = "([y, j, k, l], [m, n, o, p], [y, r, s, t]) -> ([y, v, w, x]) {i=2, j=3, k=8, l=8, m=4, n=3, o=3, p=3, q=2, r=4, s=8, t=8, u=2, v=3, w=8, x=8, y=2} blocked={i, j, k, l, m, n, o, p, q, r, s, t, u, v, w, x}"
  %2 = shoal.onnx "ConvInputGrad"(%x, %w, %dy) {group = 2 : i64} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<2x4x8x8xf32>) -> tensor<2x3x8x8xf32>
  // CHECK: shoal.onnx "ConvWeightGrad"{{.*}}shoal.sharding_rule = "([u, j, k, l], [u, n, o, p]) -> ([q, r, s, t]) {i=2, j=3, k=8, l=8, m=2, n=4, o=8, p=8, q=4, r=3, s=3, t=3, u=2} reduction={u} blocked={i, j, k, l, m, n, o, p, q, r, s, t}"
  %3 = shoal.onnx "ConvWeightGrad"(%x, %dy) {group = 2 : i64, kernel_shape = array<i64: 3, 3>} : (tensor<2x3x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<4x3x3x3xf32>
  return
}

// CHECK-LABEL: func.func @pools
func.func @pools(%x: tensor<2x4x5x5xf32>, %dy: tensor<2x4x3x3xf32>) {
  // Batch q and channels r are shared.
  // CHECK: shoal.onnx "MaxPool"{{.*}}shoal.sharding_rule = "([q, r, k, l]) -> ([q, r, o, p]) {i=2, j=4, k=5, l=5, m=2, n=4, o=5, p=5, q=2, r=4} blocked={i, j, k, l, m, n, o, p}"
  %0 = shoal.onnx "MaxPool"(%x) {kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  // CHECK: shoal.onnx "AveragePool"{{.*}}shoal.sharding_rule = "([q, r, k, l]) -> ([q, r, o, p]) {i=2, j=4, k=5, l=5, m=2, n=4, o=3, p=3, q=2, r=4} blocked={i, j, k, l, m, n, o, p}"
  %1 = shoal.onnx "AveragePool"(%x) {kernel_shape = array<i64: 2, 2>, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x5x5xf32>) -> tensor<2x4x3x3xf32>
  // CHECK: shoal.onnx "GlobalAveragePool"{{.*}}shoal.sharding_rule = "([q, r, k, l]) -> ([q, r, o, p]) {i=2, j=4, k=5, l=5, m=2, n=4, o=1, p=1, q=2, r=4} blocked={i, j, k, l, m, n, o, p}"
  %2 = shoal.onnx "GlobalAveragePool"(%x) {} : (tensor<2x4x5x5xf32>) -> tensor<2x4x1x1xf32>
  // CHECK: shoal.onnx "GlobalMaxPool"{{.*}}shoal.sharding_rule = "([q, r, k, l]) -> ([q, r, o, p]) {i=2, j=4, k=5, l=5, m=2, n=4, o=1, p=1, q=2, r=4} blocked={i, j, k, l, m, n, o, p}"
  %3 = shoal.onnx "GlobalMaxPool"(%x) {} : (tensor<2x4x5x5xf32>) -> tensor<2x4x1x1xf32>
  // CHECK: shoal.onnx "MaxPoolGrad"{{.*}}shoal.sharding_rule = "([u, v, k, l], [u, v, o, p]) -> ([u, v, s, t]) {i=2, j=4, k=5, l=5, m=2, n=4, o=5, p=5, q=2, r=4, s=5, t=5, u=2, v=4} blocked={i, j, k, l, m, n, o, p, q, r, s, t}"
  %4 = shoal.onnx "MaxPoolGrad"(%x, %0) {kernel_shape = array<i64: 3, 3>} : (tensor<2x4x5x5xf32>, tensor<2x4x5x5xf32>) -> tensor<2x4x5x5xf32>
  // CHECK: shoal.onnx "AveragePoolGrad"{{.*}}shoal.sharding_rule = "([u, v, k, l], [u, v, o, p]) -> ([u, v, s, t]) {i=2, j=4, k=5, l=5, m=2, n=4, o=3, p=3, q=2, r=4, s=5, t=5, u=2, v=4} blocked={i, j, k, l, m, n, o, p, q, r, s, t}"
  %5 = shoal.onnx "AveragePoolGrad"(%x, %dy) {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>} : (tensor<2x4x5x5xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x5x5xf32>
  return
}

// CHECK-LABEL: func.func @batch_norm
func.func @batch_norm(%x: tensor<2x4x5x5xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>, %mean: tensor<4xf32>, %var: tensor<4xf32>, %x2: tensor<4x8xf32>, %s2: tensor<8xf32>) {
  // Scale, bias, mean and variance follow the channels.
  // CHECK: shoal.onnx "BatchNormalization"{{.*}}shoal.sharding_rule = "([u, v, k, l], [v], [v], [v], [v]) -> ([u, v, s, t]) {i=2, j=4, k=5, l=5, m=4, n=4, o=4, p=4, q=2, r=4, s=5, t=5, u=2, v=4} blocked={i, j, k, l, m, n, o, p, q, r, s, t}"
  %0 = shoal.onnx "BatchNormalization"(%x, %s, %b, %mean, %var) {epsilon = 9.99999974E-6 : f32} : (tensor<2x4x5x5xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x5x5xf32>
  // [N, C] (rank 2): only the batch.
  // CHECK: shoal.onnx "BatchNormalization"{{.*}}shoal.sharding_rule = "([q, j], [k], [l], [m], [n]) -> ([q, p]) {i=4, j=8, k=8, l=8, m=8, n=8, o=4, p=8, q=4} blocked={i, j, k, l, m, n, o, p}"
  %1 = shoal.onnx "BatchNormalization"(%x2, %s2, %s2, %s2, %s2) {epsilon = 9.99999974E-6 : f32} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}
