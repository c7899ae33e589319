// Uneven shards: split(3) of the MLP's 128 hidden units gives ceil-sized
// shards of 43 rows (43 + 43 + 42, the last zero-padded at load). The
// padding goes through the elementwise GELU part and meets the zero-padded
// rows of fc2's weight in the row-parallel product, so it never shows.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split3.yaml world-size=3 fuse=0" | FileCheck %s
// RUN: shoal-opt %inputs/recip_mlp.mlir --shoal-parallelize="spec=%inputs/spec_split3.yaml world-size=3 fuse=0" | FileCheck %s --check-prefix=RECIP
// The report names the product an uneven gather (with the Slice that drops
// its padding) comes from, and why: fc3's 24 outputs over 5 ranks.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-parallelize="spec=%inputs/spec_split5.yaml world-size=5" --shoal-report -o /dev/null | FileCheck %s --check-prefix=REPORT
// REPORT: all_gather dim 1 over tp at /fc3/Gemm: output 0 of the TaskGraph is whole over tp
// Gathering an uneven dimension drops the padding.
// RUN: shoal-opt %inputs/mlp.mlir --shoal-annotate="spec=%inputs/spec_split3.yaml" --shoal-form-taskgraphs="world-size=3" --shoal-propagate-sharding | FileCheck %s --check-prefix=PROP

// CHECK: shoal.weight "fc1.weight" {shoal.global_shape = array<i64: 128, 32>, shoal.sharding = [#shoal.sharding<{{\[\[}}"tp"], []]>]} : tensor<43x32xf32>
// CHECK: shoal.weight "fc1.bias" {shoal.global_shape = array<i64: 128>{{.*}} : tensor<43xf32>
// CHECK: shoal.gemm {{.*}} -> tensor<8x43xf32>
// CHECK: shoal.erf {{.*}} -> tensor<8x43xf32>
// CHECK: shoal.weight "fc2.weight" {shoal.global_shape = array<i64: 32, 128>, shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>]} : tensor<32x43xf32>
// CHECK: shoal.gemm {{.*}} : (tensor<8x43xf32>, tensor<32x43xf32>) -> tensor<8x32xf32>
// CHECK: shoal.all_reduce %{{.*}} over ["tp"] : tensor<8x32xf32>
// fc3's 24 outputs split evenly (8 each) and are gathered at the end.
// CHECK: shoal.all_gather %{{.*}} dim 1 over ["tp"] : (tensor<8x8xf32>) -> tensor<8x24xf32>

// PROP: shoal.erf {{.*}}shoal.sharding = [#shoal.sharding<{{\[\[}}], ["tp"]]>]

// Reciprocal would turn the padding into infinity (and inf * 0 = NaN in the
// next product): the uneven split is gathered before it, padding dropped.
// RECIP: shoal.gemm {{.*}} -> tensor<8x43xf32>
// RECIP-NEXT: shoal.all_gather %{{.*}} dim 1 over ["tp"] : (tensor<8x43xf32>) -> tensor<8x129xf32>
// RECIP-NEXT: shoal.onnx "Slice"(%{{.*}}) {axes = array<i64: 1>, ends = array<i64: 128>, starts = array<i64: 0>} {shoal.unpad} : (tensor<8x129xf32>) -> tensor<8x128xf32>
// RECIP-NEXT: shoal.reciprocal %{{.*}} : (tensor<8x128xf32>) -> tensor<8x128xf32>
