// RUN: shoal-opt %s --shoal-test-print-sharding-rules | FileCheck %s

// Sharding rules of the data-movement ops (lib/Dialect/Shoal/IR/
// ShoalShardingRules.cpp): reshape, transpose, gather and the ONNX
// Slice, Split, Concat, Pad, Tile, Resize, OneHot, GatherElements and
// ScatterElements.

// A reshape's groups of dimensions with equal products share factors; a
// dimension made of several lists them major first.
// CHECK-LABEL: func.func @reshape
func.func @reshape(%x: tensor<4x8xf32>, %y: tensor<2x4x8xf32>, %z: tensor<6x4xf32>, %u: tensor<4x1x8xf32>) {
  // [4, 8] -> [2, 16]: 4 = 2 * 2 and 16 = 2 * 8.
  // CHECK: shoal.reshape {{.*}}shoal.sharding_rule = "([ij, k]) -> ([i, jk]) {i=2, j=2, k=8}"
  %0 = shoal.reshape %x : (tensor<4x8xf32>) -> tensor<2x16xf32>
  // [B, H, D] -> [B * H, D].
  // CHECK: shoal.reshape {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([ij, k]) {i=2, j=4, k=8}"
  %1 = shoal.reshape %y : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  // [B * H, D] -> [B, H, D].
  // CHECK: shoal.reshape {{.*}}shoal.sharding_rule = "([ij, k]) -> ([i, j, k]) {i=2, j=4, k=8}"
  %2 = shoal.reshape %1 : (tensor<8x8xf32>) -> tensor<2x4x8xf32>
  // Sizes that do not divide each other stay whole.
  // CHECK: shoal.reshape {{.*}}shoal.sharding_rule = "([i, j]) -> ([k, l]) {i=6, j=4, k=4, l=6} blocked={i, j, k, l}"
  %3 = shoal.reshape %z : (tensor<6x4xf32>) -> tensor<4x6xf32>
  // Dimensions of size 1 have no factor.
  // CHECK: shoal.reshape {{.*}}shoal.sharding_rule = "([i, 1, j]) -> ([ij]) {i=4, j=8}"
  %4 = shoal.reshape %u : (tensor<4x1x8xf32>) -> tensor<32xf32>
  return
}

// CHECK-LABEL: func.func @transpose
func.func @transpose(%x: tensor<2x4x8xf32>) {
  // CHECK: shoal.transpose {{.*}}shoal.sharding_rule = "([i, j, k]) -> ([i, k, j]) {i=2, j=4, k=8}"
  %0 = shoal.transpose %x {perm = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  return
}

// CHECK-LABEL: func.func @gather
func.func @gather(%t: tensor<16x8xf32>, %ids: tensor<2x4xi64>, %x: tensor<4x16xf32>, %i3: tensor<3xi32>, %dy: tensor<2x4x8xf32>) {
  // The rows of a table looked up along axis 0 are a vocabulary.
  // CHECK: shoal.gather {{.*}}shoal.sharding_rule = "([i, j], [k, l]) -> ([k, l, j]) {i=16, j=8, k=2, l=4} vocab={i}"
  %0 = shoal.gather %t, %ids : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  // Along another axis, the indexed axis stays whole.
  // CHECK: shoal.gather {{.*}}shoal.sharding_rule = "([i, j], [k]) -> ([i, k]) {i=4, j=16, k=3} blocked={j}"
  %1 = shoal.gather %x, %i3 {axis = 1 : i64} : (tensor<4x16xf32>, tensor<3xi32>) -> tensor<4x3xf32>
  // The gradient sums over the indices' positions into the table's rows.
  // CHECK: shoal.gather_grad {{.*}}shoal.sharding_rule = "([i, j], [i, j, l]) -> ([k, l]) {i=2, j=4, k=16, l=8} reduction={i, j} vocab={k}"
  %2 = shoal.gather_grad %ids, %dy : (tensor<2x4xi64>, tensor<2x4x8xf32>) -> tensor<16x8xf32>
  return
}

// CHECK-LABEL: func.func @onnx_axis_ops
func.func @onnx_axis_ops(%a: tensor<4x3xf32>, %b: tensor<4x5xf32>, %x: tensor<4x12xf32>, %d: tensor<4x8xf32>, %idx: tensor<4x3xi64>, %upd: tensor<4x3xf32>) {
  // The axis (and any dimension whose sizes differ) stays whole; the
  // others are shared.
  // CHECK: shoal.onnx "Concat"{{.*}}shoal.sharding_rule = "([i, j], [i, k]) -> ([i, l]) {i=4, j=3, k=5, l=8} blocked={j, k, l}"
  %0 = shoal.onnx "Concat"(%a, %b) {axis = 1 : i64} : (tensor<4x3xf32>, tensor<4x5xf32>) -> tensor<4x8xf32>
  // Equal pieces: the axis is [pieces, P] and every result's axis P (the
  // factors of the whole axis, j to m, are left unused).
  // CHECK: shoal.onnx "Split"{{.*}}shoal.sharding_rule = "([i, no]) -> ([i, o], [i, o], [i, o]) {i=4, j=12, k=4, l=4, m=4, n=3, o=4} blocked={j, k, l, m, n}"
  %s:3 = shoal.onnx "Split"(%x) {axis = 1 : i64} : (tensor<4x12xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>)
  // Concat of equal pieces, Split's rule the other way (a fused q/k/v
  // projection's gradient): each input's axis P, the result's [pieces, P].
  // CHECK: shoal.onnx "Concat"{{.*}}shoal.sharding_rule = "([i, o], [i, o], [i, o]) -> ([i, no]) {i=4, j=4, k=4, l=4, m=12, n=3, o=4} blocked={j, k, l, m, n}"
  %c3 = shoal.onnx "Concat"(%s#0, %s#1, %s#2) {axis = 1 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x12xf32>
  // CumSum: its axis stays whole, the others are shared.
  // CHECK: shoal.onnx "CumSum"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, k]) {i=4, j=8, k=8} blocked={j, k}"
  %cs = shoal.onnx "CumSum"(%d) {axis = 1 : i64} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  // Unequal pieces: the axis stays whole.
  // CHECK: shoal.onnx "Split"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, k], [i, l]) {i=4, j=12, k=4, l=8} blocked={j, k, l}"
  %u:2 = shoal.onnx "Split"(%x) {axis = 1 : i64, split = array<i64: 4, 8>} : (tensor<4x12xf32>) -> (tensor<4x4xf32>, tensor<4x8xf32>)
  // CHECK: shoal.onnx "GatherElements"{{.*}}shoal.sharding_rule = "([i, j], [i, k]) -> ([i, l]) {i=4, j=8, k=3, l=3} blocked={j, k, l}"
  %1 = shoal.onnx "GatherElements"(%d, %idx) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x3xi64>) -> tensor<4x3xf32>
  // CHECK: shoal.onnx "ScatterElements"{{.*}}shoal.sharding_rule = "([i, j], [i, k], [i, l]) -> ([i, m]) {i=4, j=8, k=3, l=3, m=8} blocked={j, k, l, m}"
  %2 = shoal.onnx "ScatterElements"(%d, %idx, %upd) {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x3xi64>, tensor<4x3xf32>) -> tensor<4x8xf32>
  return
}

// CHECK-LABEL: func.func @onnx_slice_pad
func.func @onnx_slice_pad(%x: tensor<4x12xf32>, %p: tensor<2x3xf32>, %q: tensor<4x3xf32>) {
  // One of equal pieces (unit steps): the axis is [pieces, P], the
  // result's P.
  // CHECK: shoal.onnx "Slice"{{.*}}shoal.sharding_rule = "([i, jk]) -> ([i, k]) {i=4, j=3, k=4} blocked={j}"
  %0 = shoal.onnx "Slice"(%x) {axes = array<i64: 1>, ends = array<i64: 8>, starts = array<i64: 4>} : (tensor<4x12xf32>) -> tensor<4x4xf32>
  // Any other slice: sliced axes stay whole.
  // CHECK: shoal.onnx "Slice"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, k]) {i=4, j=12, k=5} blocked={j, k}"
  %1 = shoal.onnx "Slice"(%x) {axes = array<i64: 1>, ends = array<i64: 6>, starts = array<i64: 1>} : (tensor<4x12xf32>) -> tensor<4x5xf32>
  // Padded dimensions stay whole.
  // CHECK: shoal.onnx "Pad"{{.*}}shoal.sharding_rule = "([i, k]) -> ([j, l]) {i=2, j=3, k=3, l=6} blocked={i, j, k, l}"
  %2 = shoal.onnx "Pad"(%p) {mode = "constant", pads = array<i64: 1, 2, 0, 1>} : (tensor<2x3xf32>) -> tensor<3x6xf32>
  // Zero padding that makes the input one of equal pieces (a Slice's
  // gradient): the output's axis is [pieces, P].
  // CHECK: shoal.onnx "Pad"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, kj]) {i=4, j=3, k=4} blocked={k}"
  %3 = shoal.onnx "Pad"(%q) {pads = array<i64: 0, 3, 0, 6>} : (tensor<4x3xf32>) -> tensor<4x12xf32>
  return
}

// CHECK-LABEL: func.func @onnx_tile_resize_onehot
func.func @onnx_tile_resize_onehot(%x: tensor<4x3xf32>, %img: tensor<1x3x4x4xf32>, %ids: tensor<4xi64>, %vals: tensor<2xf32>) {
  // Dimensions repeated once pass through; tiled ones stay whole.
  // CHECK: shoal.onnx "Tile"{{.*}}shoal.sharding_rule = "([i, j]) -> ([i, k]) {i=4, j=3, k=6} blocked={j, k}"
  %0 = shoal.onnx "Tile"(%x) {repeats = array<i64: 1, 2>} : (tensor<4x3xf32>) -> tensor<4x6xf32>
  // Dimensions not resized pass through; resized ones stay whole.
  // CHECK: shoal.onnx "Resize"{{.*}}shoal.sharding_rule = "([i, j, k, m]) -> ([i, j, l, n]) {i=1, j=3, k=4, l=8, m=4, n=8} blocked={k, l, m, n}"
  %1 = shoal.onnx "Resize"(%img) {mode = "nearest", scales = array<f32: 1.0, 1.0, 2.0, 2.0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  // tf_half_pixel_for_nn looks one element ahead: everything stays whole.
  // CHECK: shoal.onnx "Resize"{{.*}}shoal.sharding_rule = "([i, k, m, o]) -> ([j, l, n, p]) {i=1, j=1, k=3, l=3, m=4, n=8, o=4, p=8} blocked={i, j, k, l, m, n, o, p}"
  %2 = shoal.onnx "Resize"(%img) {coordinate_transformation_mode = "tf_half_pixel_for_nn", mode = "nearest", scales = array<f32: 1.0, 1.0, 2.0, 2.0>} : (tensor<1x3x4x4xf32>) -> tensor<1x3x8x8xf32>
  // The indices' dimensions pass through; depth and the values stay whole.
  // CHECK: shoal.onnx "OneHot"{{.*}}shoal.sharding_rule = "([m], [j]) -> ([m, l]) {i=4, j=2, k=4, l=10, m=4} blocked={i, j, k, l}"
  %3 = shoal.onnx "OneHot"(%ids, %vals) {depth = 10 : i64} : (tensor<4xi64>, tensor<2xf32>) -> tensor<4x10xf32>
  return
}
