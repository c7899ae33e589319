// Training-mode BatchNormalization imported with statistics over one group
// of samples, under a spec with 2 micro-batches: an error (the importer
// must take the statistics per micro-batch); with 2 groups it is accepted.
// RUN: not shoal-opt %s --shoal-annotate="spec=%inputs/spec_mb2.yaml" -split-input-file 2>&1 | FileCheck %s

// CHECK: error: {{.*}}BatchNormalization in training mode was imported with statistics over 1 group(s) of samples, but the spec has 2 micro-batch(es); import the model for them (shoal-compile does; shoal-translate --batch-norm-groups=N)
func.func @one_group(%x: tensor<4x3x2x2xf32>) -> tensor<1x3x1x1xf32> {
  %s = shoal.reduce_sum %x {axes = array<i64: 0, 2, 3>, shoal.batch_norm_groups = 1 : i64} : (tensor<4x3x2x2xf32>) -> tensor<1x3x1x1xf32> loc("/bn/ReduceSum")
  return %s : tensor<1x3x1x1xf32>
}

// -----

// CHECK: func.func @two_groups
func.func @two_groups(%x: tensor<2x2x3x2x2xf32>) -> tensor<2x1x3x1x1xf32> {
  %s = shoal.reduce_sum %x {axes = array<i64: 1, 3, 4>, shoal.batch_norm_groups = 2 : i64} : (tensor<2x2x3x2x2xf32>) -> tensor<2x1x3x1x1xf32> loc("/bn/ReduceSum")
  return %s : tensor<2x1x3x1x1xf32>
}
